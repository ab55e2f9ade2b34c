"""The ComputeDomain commands of `dra-fake`: the kubelet plugin, the controller, the IMEX daemon."""

from __future__ import annotations

import argparse
from typing import Any

from computedomain.api import DEFAULT_DAEMON_UID, DEFAULT_DRIVER_NAMESPACE, DRIVER_NAME

COMMANDS = ("compute-domain-kubelet-plugin", "compute-domain-controller", "imex-daemon")


def _common(p: argparse.ArgumentParser, env_default: Any) -> None:
    p.add_argument("--kubeconfig", action=env_default, env="KUBECONFIG", default="", help="kubeconfig file")
    p.add_argument(
        "--log-level",
        action=env_default,
        env="LOG_LEVEL",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level",
    )
    p.add_argument(
        "--log-format", action=env_default, env="LOG_FORMAT", default="text", choices=["text", "json"]
    )


def add_daemon_identity(p: argparse.ArgumentParser, env_default: Any) -> None:
    """The uid/gid IMEX daemon pods run as: the controller sets it on their DaemonSets, the plugin
    gives each domain's IMEX directory to it (the daemon writes its config there)."""
    p.add_argument(
        "--daemon-run-as-user",
        action=env_default,
        env="DAEMON_RUN_AS_USER",
        type=int,
        default=DEFAULT_DAEMON_UID,
        help="uid of the IMEX daemon containers",
    )
    p.add_argument(
        "--daemon-run-as-group",
        action=env_default,
        env="DAEMON_RUN_AS_GROUP",
        type=int,
        default=DEFAULT_DAEMON_UID,
        help="gid of the IMEX daemon containers",
    )


def add_parsers(sub: Any, env_default: Any, add_plugin_flags: Any) -> None:
    plugin = sub.add_parser(
        "compute-domain-kubelet-plugin",
        help="the compute-domain kubelet plugin (driver compute-domain.nvidia.com)",
        description="Publish IMEX channel-0 and daemon-0 and prepare ComputeDomain claims.",
    )
    add_plugin_flags(plugin, DRIVER_NAME)
    _add_plugin_arguments(plugin, env_default)
    add_daemon_identity(plugin, env_default)

    ctrl = sub.add_parser(
        "compute-domain-controller",
        help="the ComputeDomain controller (kopf)",
        description="Reconcile ComputeDomains: claim templates, daemon DaemonSets, status, cleanup.",
    )
    _common(ctrl, env_default)
    ctrl.add_argument(
        "--namespace",
        action=env_default,
        env="NAMESPACE",
        default=DEFAULT_DRIVER_NAMESPACE,
        help="driver namespace: daemon DaemonSets, daemon claim templates, cliques",
    )
    ctrl.add_argument(
        "--daemon-image",
        action=env_default,
        env="IMAGE_NAME",
        default="dra-fake:dev",  # what `make image` builds; the chart passes its own image
        help="image of the daemon pods (it must provide `dra-fake imex-daemon`)",
    )
    ctrl.add_argument(
        "--max-nodes-per-imex-domain",
        action=env_default,
        env="MAX_NODES_PER_IMEX_DOMAIN",
        type=int,
        default=18,
        help="largest clique index + 1",
    )
    ctrl.add_argument(
        "--status-sync-seconds",
        action=env_default,
        env="STATUS_SYNC_SECONDS",
        type=float,
        default=2.0,
        help="how often every status is recomputed from the watch caches (each change also is, at once)",
    )
    ctrl.add_argument(
        "--cleanup-interval-seconds",
        action=env_default,
        env="CLEANUP_INTERVAL_SECONDS",
        type=float,
        default=600.0,
        help="how often objects and node labels of vanished ComputeDomains are removed",
    )
    ctrl.add_argument(
        "--leader-elect",
        action=env_default,
        env="LEADER_ELECT",
        default="false",
        choices=["true", "false"],
        help="run only while holding the Lease compute-domain-controller in the namespace",
    )
    ctrl.add_argument("--leader-elect-identity", action=env_default, env="POD_NAME", default="")
    add_daemon_identity(ctrl, env_default)
    ctrl.add_argument(
        "--metrics-port",
        action=env_default,
        env="METRICS_PORT",
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
    _common(daemon, env_default)


def run(args: argparse.Namespace) -> int:
    if args.command == "compute-domain-kubelet-plugin":
        from computedomain.plugin.plugin import run_cd_plugin

        return run_cd_plugin(args)
    if args.command == "compute-domain-controller":
        from computedomain.controller.main import run_controller

        return run_controller(args)
    from computedomain.daemon.daemon import main

    return main(args)


def _add_plugin_arguments(p: argparse.ArgumentParser, env_default: Any) -> None:
    """The compute-domain plugin's own flags (here, not in its module: building the parser of
    every command must not import the plugin)."""
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
