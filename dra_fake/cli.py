"""`dra-fake`: the kubelet plugins, the ComputeDomain controller and offline tools.

Every flag of a long-running command has an environment variable (shown in --help), as
NVIDIA's and the reference driver's binaries do, so a Helm chart can set them either way.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_DRIVER = "gpu.nvidia.com"


class _EnvDefault(argparse.Action):
    """An option whose default comes from an environment variable."""

    def __init__(self, env: str, required: bool = False, default: Any = None, **kwargs: Any) -> None:
        if env in os.environ:
            default = os.environ[env]
            required = False
        kwargs["help"] = f"{kwargs.get('help', '')} [env {env}]" + (
            f" (default {default})" if default not in (None, "") else ""
        )
        super().__init__(default=default, required=required, **kwargs)
        self.env = env

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)


def _add_common_plugin_flags(p: argparse.ArgumentParser, driver_default: str) -> None:
    p.add_argument(
        "--device-status",
        action=_EnvDefault,
        env="DEVICE_STATUS",
        default="true",
        choices=["true", "false"],
        help="write each prepared device's status (Ready, with its data: a GPU's UUID, MIG parent and "
        "profile; an IMEX channel's number and domain) into its claim's status.devices; the GPU plugin "
        "reports the attach of fabric-attached GPUs there too (docs/prepare.md)",
    )
    p.add_argument(
        "--node-name",
        action=_EnvDefault,
        env="NODE_NAME",
        required=True,
        help="name of the node this plugin runs on",
    )
    p.add_argument(
        "--driver-name",
        action=_EnvDefault,
        env="DRIVER_NAME",
        default=driver_default,
        help="DRA driver name published in ResourceSlices and registered with the kubelet",
    )
    p.add_argument(
        "--cdi-root",
        action=_EnvDefault,
        env="CDI_ROOT",
        default="/var/run/cdi",
        help="directory for generated CDI specs",
    )
    p.add_argument(
        "--kubelet-registrar-directory-path",
        action=_EnvDefault,
        env="KUBELET_REGISTRAR_DIRECTORY_PATH",
        default="/var/lib/kubelet/plugins_registry",
        help="the kubelet's plugin registration directory",
    )
    p.add_argument(
        "--kubelet-plugins-directory-path",
        action=_EnvDefault,
        env="KUBELET_PLUGINS_DIRECTORY_PATH",
        default="/var/lib/kubelet/plugins",
        help="the kubelet's plugins directory; socket, checkpoint and lock live in <dir>/<driver>",
    )
    p.add_argument(
        "--pod-uid",
        action=_EnvDefault,
        env="POD_UID",
        default="",
        help="UID of the plugin's pod (downward API); enables rolling-update socket names",
    )
    p.add_argument(
        "--healthcheck-port",
        action=_EnvDefault,
        env="HEALTHCHECK_PORT",
        type=int,
        default=-1,
        help="port of the gRPC health service (negative: disabled)",
    )
    p.add_argument(
        "--healthcheck-address",
        action=_EnvDefault,
        env="HEALTHCHECK_ADDRESS",
        default="127.0.0.1",
        help="address the gRPC health service listens on; in a pod, its IP, for the kubelet's gRPC probe",
    )
    p.add_argument(
        "--metrics-port",
        action=_EnvDefault,
        env="METRICS_PORT",
        type=int,
        default=-1,
        help="port of the Prometheus metrics endpoint (negative: disabled)",
    )
    p.add_argument(
        "--kubeconfig",
        action=_EnvDefault,
        env="KUBECONFIG",
        default="",
        help="kubeconfig file; in-cluster configuration when empty",
    )
    p.add_argument(
        "--cpu-affinity",
        action=_EnvDefault,
        env="CPU_AFFINITY",
        default="inherit",
        choices=["one", "inherit"],
        help="inherit: the CPUs the process was started with; one: every thread of the plugin on the "
        "CPU it starts on (its Python threads share one interpreter lock; handing it between CPUs "
        "costs CPU, docs/benchmarks/history.md#sixteenth-round-one-cpu; make bench sets it)",
    )
    p.add_argument(
        "--feature-gates",
        action=_EnvDefault,
        env="FEATURE_GATES",
        default="",
        help="NVIDIA driver feature gates, one set for both plugins as NVIDIA's, e.g. "
        "TimeSlicingSettings=true,NVMLDeviceHealthCheck=true",
    )
    p.add_argument(
        "--log-level",
        action=_EnvDefault,
        env="LOG_LEVEL",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log level",
    )
    p.add_argument(
        "--log-format",
        action=_EnvDefault,
        env="LOG_FORMAT",
        default="text",
        choices=["text", "json"],
        help="log format",
    )


def add_allow_real_gpu_node(p: argparse._ActionsContainer) -> None:
    p.add_argument(
        "--allow-real-gpu-node",
        action=_EnvDefault,
        env="ALLOW_REAL_GPU_NODE",
        default="false",
        choices=["true", "false"],
        help="start even on a node with NVIDIA PCI functions or a loaded NVIDIA driver, or whose "
        "hardware cannot be read (fake GPUs beside real ones; docs/security.md)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dra-fake", description="A DRA driver that simulates NVIDIA GPUs.")
    sub = parser.add_subparsers(dest="command", required=True)

    gpu = sub.add_parser(
        "gpu-kubelet-plugin",
        help="the GPU kubelet plugin (driver gpu.nvidia.com)",
        description="Publish simulated GPUs as ResourceSlices and prepare claims for the kubelet.",
    )
    _add_common_plugin_flags(gpu, DEFAULT_DRIVER)
    gpu.add_argument(
        "--config",
        action=_EnvDefault,
        env="DRA_FAKE_CONFIG",
        default="",
        help="node inventory file (YAML); default: 8 x h100-sxm5-80gb",
    )
    gpu.add_argument(
        "--profiles-dir",
        action=_EnvDefault,
        env="DRA_FAKE_PROFILES_DIR",
        default="",
        help="extra directory of GPU profile files (added to / overriding the built-in ones)",
    )
    gpu.add_argument(
        "--consumable-shares",
        action=_EnvDefault,
        env="CONSUMABLE_SHARES",
        default="disabled",
        help="NVIDIA's consumable shares: several claims on one GPU or MIG device, its memory accounted "
        "by the scheduler: disabled, memory, unlimited or a positive integer (at most N claims); needs "
        "feature gate ConsumableShares (docs/sharing-design.md)",
    )
    gpu.add_argument(
        "--shared-memory-view",
        action=_EnvDefault,
        env="SHARED_MEMORY_VIEW",
        default="share",
        choices=("share", "device"),
        help="ours: what a share's nvidia-smi shows: share (its memory as the total, other shares "
        "invisible) or device (the whole GPU, as NVIDIA's driver; docs/sharing.md)",
    )
    gpu.add_argument(
        "--gpu-lending",
        action=_EnvDefault,
        env="GPU_LENDING",
        default="false",
        choices=("true", "false"),
        help="ours: lend allocated but idle GPUs to spot claims (class spot.<driver>) through a second "
        "device gpu-N-spot, reclaimed by NoExecute device-taint eviction (docs/sharing.md)",
    )
    gpu.add_argument(
        "--gpu-lending-idle-threshold",
        action=_EnvDefault,
        env="GPU_LENDING_IDLE_THRESHOLD",
        type=int,
        default=10,
        help="percent: owners below it are idle, at or above it busy (reclaim at once)",
    )
    gpu.add_argument(
        "--gpu-lending-idle-for",
        action=_EnvDefault,
        env="GPU_LENDING_IDLE_FOR",
        type=float,
        default=60.0,
        help="seconds the owners must be idle in every sample before their GPU is lent (again)",
    )
    gpu.add_argument(
        "--additional-xids-to-ignore",
        action=_EnvDefault,
        env="ADDITIONAL_XIDS_TO_IGNORE",
        default="",
        help="comma-separated Xids whose faults taint with effect None, beside NVIDIA's "
        "13,31,43,45,68,109 (NVMLDeviceHealthCheck; docs/faults.md)",
    )
    gpu.add_argument(
        "--device-nodes",
        action=_EnvDefault,
        env="DEVICE_NODES",
        default="auto",
        help="auto: NVIDIA's /dev/nvidia* nodes in claim specs where no real NVIDIA device or driver "
        "exists on the host (they reach nothing); never: none (docs/prepare.md)",
    )
    gpu.add_argument(
        "--device-order",
        action=_EnvDefault,
        env="DEVICE_ORDER",
        default="sorted",
        help="sorted: slice devices by PCI bus ID and name; shuffled: a new order on every start, "
        "as NVIDIA's plugin, to flush out tests that depend on the order",
    )

    add_allow_real_gpu_node(gpu)
    gpu.add_argument(
        "--allow-device-plugin",
        action=_EnvDefault,
        env="ALLOW_DEVICE_PLUGIN",
        default="false",
        choices=["true", "false"],
        help="start even when a device plugin advertises nvidia.com/gpu on this node (the GPUs are then "
        "offered twice)",
    )
    gpu.add_argument(
        "--dcgm-exporter-port",
        action=_EnvDefault,
        env="DCGM_EXPORTER_PORT",
        type=int,
        default=-1,
        help="serve dcgm-exporter-compatible GPU metrics at :<port>/metrics (dcgm-exporter: 9400; "
        "negative: not served; docs/observability.md)",
    )
    gpu.add_argument(
        "--node-labels",
        action=_EnvDefault,
        env="NODE_LABELS",
        default="false",
        choices=["true", "false"],
        help="write GPU Feature Discovery's nvidia.com/* labels on this node (docs/observability.md)",
    )
    gpu.add_argument(
        "--mig-strategy",
        action=_EnvDefault,
        env="MIG_STRATEGY",
        default="none",
        help="GFD's MIG strategy for the node labels: none, single or mixed",
    )

    labels = sub.add_parser(
        "node-labels",
        help="remove the GPU Feature Discovery labels dra-fake wrote (the chart's pre-delete hook)",
    )
    labels.add_argument("action", choices=["remove"])
    labels.add_argument("--node", action="append", default=[], help="only this node (repeatable)")
    labels.add_argument("--kubeconfig", action=_EnvDefault, env="KUBECONFIG", default="")
    labels.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])

    from computedomain.cli import add_parsers as add_compute_domain_parsers

    add_compute_domain_parsers(sub, _EnvDefault, _add_common_plugin_flags)

    render = sub.add_parser(
        "render-slices", help="print the ResourceSlices a node would publish (no cluster needed)"
    )
    render.add_argument("--config", type=Path, help="node inventory file (default: 8 x h100-sxm5-80gb)")
    render.add_argument("--node-name", default="node-1")
    render.add_argument("--driver-name", default=DEFAULT_DRIVER)
    render.add_argument("--api-version", default="v1", choices=["v1", "v1beta2", "v1beta1"])
    render.add_argument("--server-version", default="1.37", help="Kubernetes minor version, e.g. 1.34")
    render.add_argument("--profiles-dir", type=Path, action="append", default=[])
    render.add_argument(
        "--consumable-shares", default="disabled", help="disabled, memory, unlimited or N (as the plugin's)"
    )

    profiles = sub.add_parser("profiles", help="list the GPU profiles with their key specs")
    profiles.add_argument("--profiles-dir", type=Path, action="append", default=[])

    from dra_fake.fleet.cli import add_fleet_parser, add_fleet_stages_parser

    add_fleet_parser(sub)
    add_fleet_stages_parser(sub)
    from dra_fake.gpu.faultcli import add_fault_parser

    add_fault_parser(sub)
    from dra_fake.scenario.cli import add_scenario_parser

    add_scenario_parser(sub)
    from dra_fake.deviceplugin.cli import add_device_plugin_parser

    add_device_plugin_parser(sub, _EnvDefault)
    return parser


def env_flags(command: str) -> dict[str, str]:
    """{environment variable: its flag} of a command, e.g. {"FEATURE_GATES": "--feature-gates"}: what
    a chart sets as env, a command line can set as flags (e2e/localcluster/values.py)."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    actions = subparsers.choices[command]._actions
    return {a.env: a.option_strings[0] for a in actions if isinstance(a, _EnvDefault)}


def parse_server_version(raw: str) -> tuple[int, int]:
    try:
        major, minor = raw.removeprefix("v").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise SystemExit(f"dra-fake: error: --server-version {raw!r} is not MAJOR.MINOR, e.g. 1.34") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from computedomain.cli import COMMANDS as COMPUTE_DOMAIN_COMMANDS

    if args.command in COMPUTE_DOMAIN_COMMANDS:
        from computedomain.cli import run as run_compute_domain_command

        return run_compute_domain_command(args)
    if args.command == "gpu-kubelet-plugin":
        from dra_fake.gpu.plugin import run_gpu_plugin

        return run_gpu_plugin(args)
    if args.command == "render-slices":
        from dra_fake.gpu.render import render_slices

        sys.stdout.write(
            render_slices(
                args.config,
                args.node_name,
                args.api_version,
                parse_server_version(args.server_version),
                driver_name=args.driver_name,
                profile_dirs=args.profiles_dir,
                consumable_shares=args.consumable_shares,
            )
        )
        return 0
    if args.command == "fleet":
        from dra_fake.fleet.main import run_fleet

        return run_fleet(args)
    if args.command == "fleet-stages":
        from dra_fake.fleet.cli import run_fleet_stages

        return run_fleet_stages(args)
    if args.command == "fault":
        from dra_fake.gpu.faultcli import run_fault_command

        return run_fault_command(args)
    if args.command == "scenario":
        from dra_fake.scenario.cli import run_scenario_command

        return run_scenario_command(args)
    if args.command == "device-plugin":
        from dra_fake.deviceplugin.plugin import run_device_plugin

        return run_device_plugin(args)
    if args.command == "node-labels":
        from dra_fake.gpu.nodelabels import run_node_labels

        return run_node_labels(args)
    if args.command == "profiles":
        from dra_fake.gpu.profiles import load_profiles
        from dra_fake.gpu.render import profiles_table

        sys.stdout.write(profiles_table(load_profiles(args.profiles_dir)))
        return 0
    raise AssertionError(args.command)
