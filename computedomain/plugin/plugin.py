"""The compute-domain kubelet plugin process (`dra-fake compute-domain-kubelet-plugin`): channel-0
and daemon-0 published per node, ComputeDomain claims prepared, served by dra_fake.core.serving
(the same process runtime as the GPU plugin)."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from computedomain.plugin import slices
from computedomain.plugin.domains import ComputeDomainApi
from computedomain.plugin.edits import (
    CHANNEL_PROC_NAME,
    channel_major,
    write_base_spec,
    write_channel_placeholders,
)
from computedomain.plugin.state import CHANNEL_DEVICE, ComputeDomainState
from dra_fake.core import featuregates, logs, yamlio
from dra_fake.core.kubeconfig import StartupError, check_config_source
from dra_fake.core.resourceapi import ServerInfo
from dra_fake.core.serving import ClaimState, PluginContext, run_plugin
from dra_fake.core.slices import DesiredSlice

if TYPE_CHECKING:
    from dra_fake.kubelet.api import PreparedDevice

log = logging.getLogger(__name__)
# NVML's fabric clique "<cluster UUID>.<clique id>" (the inventory's imexCliqueID, docs/inventory.md)
CLIQUE_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.\d+$")


def resolve_clique_id(args: argparse.Namespace) -> str:
    """--imex-clique-id, else the node inventory's `imexCliqueID` (the GPU plugin's file), else ""
    (not fabric-attached)."""
    if args.imex_clique_id is not None:
        clique = str(args.imex_clique_id)
    elif args.config:
        try:
            doc = yamlio.safe_load(Path(args.config).read_text()) or {}
        except (OSError, yaml.YAMLError) as err:
            raise StartupError(f"--config {args.config}: {err}") from err
        clique = str((doc if isinstance(doc, dict) else {}).get("imexCliqueID") or "")
    else:
        clique = ""
    if clique and not CLIQUE_ID.match(clique):
        raise StartupError(f"imexCliqueID {clique!r}: expected <cluster UUID>.<clique id>")
    return clique


class ComputeDomainDriver:
    """compute-domain.nvidia.com for run_plugin (dra_fake.core.serving.KubeletDriver)."""

    display_name = "compute-domain plugin"
    # NVIDIA's ErrorRetryMaxTimeout: a channel whose IMEX daemon is not Ready yet is prepared in
    # the same kubelet call once it is (docs/computedomain.md#prepare-retries).
    retry_window = 45.0

    def __init__(self, args: argparse.Namespace, clique_id: str) -> None:
        self.args = args
        self.clique_id = clique_id
        self.domains: ComputeDomainApi | None = None  # made with the state
        self.state: ComputeDomainState | None = None

    def create_state(self, ctx: PluginContext) -> ClaimState:
        # Placeholders everywhere: a device node on the real channels driver's major would hand
        # the container a host device (docs/computedomain.md).
        real = channel_major()
        write_channel_placeholders(ctx.data_dir)
        if real is None:
            log.info(
                f"no {CHANNEL_PROC_NAME} driver in /proc/devices: IMEX channels are injected as "
                "read-only placeholder files, never as device nodes (docs/computedomain.md)"
            )
        else:
            log.warning(
                f"{CHANNEL_PROC_NAME} is registered on this host (major {real}): a real NVIDIA "
                "driver; IMEX channels are still placeholder files, never the host's devices "
                "(docs/computedomain.md)"
            )
        write_base_spec(ctx.cdi_root, self.args.driver_name)
        log.info("compute-domain plugin state", extra={"cliqueID": self.clique_id or "-"})
        self.domains = ComputeDomainApi(ctx.api, self.args.namespace)
        self.state = ComputeDomainState(
            self.args.driver_name,
            ctx.node,
            ctx.cdi_root,
            ctx.data_dir,
            self.domains,
            self.clique_id,
            self.args.namespace,
            daemon_gid=self.args.daemon_run_as_group,
            on_checkpoint_error=ctx.checkpoint_error_hook(self.args.driver_name),
        )
        if self.args.device_status != "true":
            return self.state
        from dra_fake.core.devicestatus import ReportingState

        return ReportingState(
            self.state,
            self.args.driver_name,
            self.device_data,
            lambda: ctx.api,
            lambda: ctx.resources.info.resource_version,
            ctx.stop,
        )

    def device_data(self, claim: Mapping[str, Any], prepared: PreparedDevice) -> dict[str, Any]:
        """A prepared device's `data` in the claim's status: the ComputeDomain's UID, and for the
        channel its number (channel-0: IMEX channel 0)."""
        domain = self.state.domain_of(claim["metadata"]["uid"]) if self.state is not None else None
        data: dict[str, Any] = {"computeDomain": domain} if domain else {}
        if prepared.device_name == CHANNEL_DEVICE:
            data["channel"] = 0
        return data

    def desired_slices(self, server: ServerInfo) -> list[DesiredSlice]:
        return slices.desired_slices()

    def start_background(self, ctx: PluginContext, server: ServerInfo) -> None:
        # (the channel and daemon devices have no faults to watch)
        if self.domains is not None:
            self.domains.start_watch(ctx.stop)

    def refusal(self, node: dict[str, Any]) -> str | None:
        return None  # ComputeDomains run beside a device plugin too


def run_cd_plugin(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    try:
        if not args.node_name:
            raise StartupError("--node-name (NODE_NAME) is required")
        # Gates of the GPU side are accepted and unused here, as in NVIDIA's plugin: one registry.
        gates = featuregates.parse_feature_gates(args.feature_gates)
        clique_id = resolve_clique_id(args)
        check_config_source(args.kubeconfig)
    except (StartupError, ValueError, OSError) as err:
        print(f"dra-fake compute-domain-kubelet-plugin: error: {err}", file=sys.stderr)
        return 2
    featuregates.export(gates)
    log.info("feature gates", extra={"enabled": sorted(gates)})
    return run_plugin(args, ComputeDomainDriver(args, clique_id))
