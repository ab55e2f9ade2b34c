"""The ComputeDomain commands of `dra-fake`: the kubelet plugin, the controller, the IMEX daemon."""

from __future__ import annotations

import argparse
from typing import Any

from computedomain.api import DEFAULT_DAEMON_UID, DEFAULT_DRIVER_NAMESPACE, DRIVER_NAME
from dra_fake.core.flags import add_log_flags, add_plugin_flags, env_flag

COMMANDS = ("compute-domain-kubelet-plugin", "compute-domain-controller", "imex-daemon")


def _common(p: argparse.ArgumentParser) -> None:
    env_flag(p, "--kubeconfig", default="", help="kubeconfig file")
    add_log_flags(p)


def add_daemon_identity(p: argparse.ArgumentParser) -> None:
    """The uid/gid IMEX daemon pods run as: the controller sets it on their DaemonSets, the plugin
    gives each domain's IMEX directory to it (the daemon writes its config there)."""
    env_flag(
        p,
        "--daemon-run-as-user",
        type=int,
        default=DEFAULT_DAEMON_UID,
        help="uid of the IMEX daemon containers",
    )
    env_flag(
        p,
        "--daemon-run-as-group",
        type=int,
        default=DEFAULT_DAEMON_UID,
        help="gid of the IMEX daemon containers",
    )


def add_parsers(sub: Any) -> None:
    plugin = sub.add_parser(
        "compute-domain-kubelet-plugin",
        help="the compute-domain kubelet plugin (driver compute-domain.nvidia.com)",
        description="Publish IMEX channel-0 and daemon-0 and prepare ComputeDomain claims.",
    )
    add_plugin_flags(plugin, DRIVER_NAME)
    _add_plugin_arguments(plugin)
    add_daemon_identity(plugin)

    ctrl = sub.add_parser(
        "compute-domain-controller",
        help="the ComputeDomain controller (kopf)",
        description="Reconcile ComputeDomains: claim templates, daemon DaemonSets, status, cleanup.",
    )
    _common(ctrl)
    env_flag(
        ctrl,
        "--namespace",
        default=DEFAULT_DRIVER_NAMESPACE,
        help="driver namespace: daemon DaemonSets, daemon claim templates, cliques",
    )
    env_flag(
        ctrl,
        "--daemon-image",
        env="IMAGE_NAME",
        default="dra-fake:dev",  # what `make image` builds; the chart passes its own image
        help="image of the daemon pods (it must provide `dra-fake imex-daemon`)",
    )
    env_flag(ctrl, "--max-nodes-per-imex-domain", type=int, default=18, help="largest clique index + 1")
    env_flag(
        ctrl,
        "--status-sync-seconds",
        type=float,
        default=2.0,
        help="how often every status is recomputed from the watch caches (each change also is, at once)",
    )
    env_flag(
        ctrl,
        "--cleanup-interval-seconds",
        type=float,
        default=600.0,
        help="how often objects and node labels of vanished ComputeDomains are removed",
    )
    env_flag(
        ctrl,
        "--leader-elect",
        default="false",
        choices=["true", "false"],
        help="run only while holding the Lease compute-domain-controller in the namespace",
    )
    env_flag(ctrl, "--leader-elect-identity", env="POD_NAME", default="")
    add_daemon_identity(ctrl)
    env_flag(
        ctrl,
        "--metrics-port",
        type=int,
        default=-1,
        help="port of the Prometheus metrics endpoint, served from start-up on (negative: disabled)",
    )

    daemon = sub.add_parser(
        "imex-daemon",
        help="the simulated IMEX daemon a ComputeDomain daemon pod runs",
        description="run: join the clique and serve IMEX; check: readiness probe (prints READY).",
    )
    daemon.add_argument("action", choices=["run", "check"])
    _common(daemon)


def run(args: argparse.Namespace) -> int:
    if args.command == "compute-domain-kubelet-plugin":
        from computedomain.plugin.plugin import run_cd_plugin

        return run_cd_plugin(args)
    if args.command == "compute-domain-controller":
        from computedomain.controller.main import run_controller

        return run_controller(args)
    if args.action == "check":  # the readiness probe, without the daemon's Kubernetes client
        from computedomain.daemon.check import check

        return check()
    from computedomain.daemon.daemon import main

    return main(args)


def _add_plugin_arguments(p: argparse.ArgumentParser) -> None:
    """The compute-domain plugin's own flags (here, not in its module: building the parser of
    every command must not import the plugin)."""
    env_flag(
        p,
        "--config",
        env="DRA_FAKE_CONFIG",
        default="",
        help="node inventory file (YAML); its imexCliqueID is this node's NVLink clique",
    )
    env_flag(
        p,
        "--imex-clique-id",
        env="DRA_FAKE_IMEX_CLIQUE_ID",
        default=None,
        help="override the clique ID (<cluster UUID>.<clique id>; empty: not fabric-attached)",
    )
    env_flag(
        p,
        "--namespace",
        default="nvidia-dra-driver-gpu",
        help="the driver namespace (ComputeDomainCliques, daemon DaemonSets)",
    )
