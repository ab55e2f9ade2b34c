"""The compute-domain kubelet plugin process (`dra-fake compute-domain-kubelet-plugin`).

Shares the GPU plugin's pieces: the kubelet gRPC servers and health service, the ResourceSlice
publisher, the claim fetcher (ClaimPreparer: UID and allocation checks) and the API helpers."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_fake import logs
from dra_fake.apiserver import ResourceApi, ServerInfo, discover
from dra_fake.cd import classes
from dra_fake.cd.cdi import CHANNEL_PROC_NAME, channel_major, write_base_spec, write_channel_placeholders
from dra_fake.cd.domains import ComputeDomainApi
from dra_fake.cd.state import ComputeDomainState
from dra_fake.inventory import InventoryError, load_inventory
from dra_fake.plugin import StartupError, load_kube_client, serve_driver, with_backoff

log = logging.getLogger("dra_fake.cd.plugin")


def add_arguments(p: argparse.ArgumentParser, env_default: Any) -> None:
    p.add_argument(
        "--config",
        action=env_default,
        env="DRA_FAKE_CONFIG",
        default="",
        help="node inventory file (YAML); its imexCliqueID is this node's NVLink clique",
    )
    p.add_argument(
        "--imex-clique-id",
        action=env_default,
        env="DRA_FAKE_IMEX_CLIQUE_ID",
        default=None,
        help="override the clique ID (<cluster UUID>.<clique id>; empty: not fabric-attached)",
    )
    p.add_argument(
        "--namespace",
        action=env_default,
        env="NAMESPACE",
        default="nvidia-dra-driver-gpu",
        help="the driver namespace (ComputeDomainCliques, daemon DaemonSets)",
    )


def resolve_clique_id(args: argparse.Namespace) -> str:
    if args.imex_clique_id is not None:
        return str(args.imex_clique_id)
    inventory = load_inventory(Path(args.config) if args.config else None, args.node_name)
    return inventory.imex_clique_id


def run_cd_plugin(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    try:
        if not args.node_name:
            raise StartupError("--node-name (NODE_NAME) is required")
        clique_id = resolve_clique_id(args)
        api = load_kube_client(args.kubeconfig)
    except (StartupError, InventoryError, ValueError, OSError) as err:
        print(f"dra-fake compute-domain-kubelet-plugin: error: {err}", file=sys.stderr)
        return 2
    return ComputeDomainPlugin(args, clique_id, api).run()


class ComputeDomainPlugin:
    def __init__(self, args: argparse.Namespace, clique_id: str, api: client.ApiClient) -> None:
        self.args = args
        self.clique_id = clique_id
        self.api = api
        self.driver = args.driver_name
        self.node = args.node_name

    def run(self) -> int:
        import threading

        stop = threading.Event()
        started = time.monotonic()
        info: ServerInfo = with_backoff("API discovery", lambda: discover(self.api), stop)
        node_uid: str = with_backoff(
            f"get Node {self.node}",
            lambda: str(client.CoreV1Api(self.api).read_node(self.node).metadata.uid),  # type: ignore[union-attr]
            stop,
        )
        resources = ResourceApi(self.api, info)
        data_dir = Path(self.args.kubelet_plugins_directory_path) / self.driver
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        major = channel_major()
        if major is None:
            write_channel_placeholders(data_dir)
            log.info(
                f"no {CHANNEL_PROC_NAME} driver in /proc/devices: IMEX channels are injected as "
                "read-only placeholder files, never as device nodes (docs/computedomain.md)"
            )
        write_base_spec(Path(self.args.cdi_root), self.driver)
        state = ComputeDomainState(
            self.driver,
            self.node,
            Path(self.args.cdi_root),
            data_dir,
            ComputeDomainApi(self.api, self.args.namespace),
            self.clique_id,
            major,
            daemon_gid=self.args.daemon_run_as_group,
        )
        state.startup()
        log.info(
            "compute-domain plugin starting",
            extra={
                "cliqueID": self.clique_id or "-",
                "channelMajor": major if major is not None else "-",
                "resourceApi": resources.version,
            },
        )
        return serve_driver(
            self.args,
            resources,
            state,
            classes.desired_slices(),
            node_uid,
            stop,
            "compute-domain plugin",
            started,
        )
