"""`dra-fake`: the kubelet plugins, the ComputeDomain controller and offline tools.

Every flag of a long-running command has an environment variable (shown in --help;
dra_fake.core.flags), as NVIDIA's and the reference driver's binaries do, so a Helm chart can set
them either way.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from dra_fake.core import trials
from dra_fake.core.flags import LOG_LEVELS, EnvDefault, add_plugin_flags, env_flag

DEFAULT_DRIVER = "gpu.nvidia.com"


def add_allow_real_gpu_node(p: argparse._ActionsContainer) -> None:
    env_flag(
        p,
        "--allow-real-gpu-node",
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
    add_plugin_flags(gpu, DEFAULT_DRIVER)
    env_flag(
        gpu,
        "--config",
        env="DRA_FAKE_CONFIG",
        default="",
        help="node inventory file (YAML); default: 8 x h100-sxm5-80gb",
    )
    env_flag(
        gpu,
        "--profiles-dir",
        env="DRA_FAKE_PROFILES_DIR",
        default="",
        help="extra directory of GPU profile files (added to / overriding the built-in ones)",
    )
    env_flag(
        gpu,
        "--consumable-shares",
        default="disabled",
        help="NVIDIA's consumable shares: several claims on one GPU or MIG device, its memory accounted "
        "by the scheduler: disabled, memory, unlimited or a positive integer (at most N claims); needs "
        "feature gate ConsumableShares (docs/sharing-design.md)",
    )
    env_flag(
        gpu,
        "--shared-memory-view",
        default="share",
        choices=("share", "device"),
        help="ours: what a share's nvidia-smi shows: share (its memory as the total, other shares "
        "invisible) or device (the whole GPU, as NVIDIA's driver; docs/sharing.md)",
    )
    env_flag(
        gpu,
        "--gpu-lending",
        default="false",
        choices=("true", "false"),
        help="ours: lend allocated but idle GPUs to spot claims (class spot.<driver>) through a second "
        "device gpu-N-spot, reclaimed by NoExecute device-taint eviction (docs/sharing.md)",
    )
    env_flag(
        gpu,
        "--gpu-lending-idle-threshold",
        type=int,
        default=10,
        help="percent: owners below it are idle, at or above it busy (reclaim at once)",
    )
    env_flag(
        gpu,
        "--gpu-lending-idle-for",
        type=float,
        default=60.0,
        help="seconds the owners must be idle in every sample before their GPU is lent (again)",
    )
    env_flag(
        gpu,
        "--additional-xids-to-ignore",
        default="",
        help="comma-separated Xids whose faults taint with effect None, beside NVIDIA's "
        "13,31,43,45,68,109 (NVMLDeviceHealthCheck; docs/faults.md)",
    )
    env_flag(
        gpu,
        "--device-nodes",
        default="auto",
        help="auto: NVIDIA's /dev/nvidia* nodes in claim specs where no real NVIDIA device or driver "
        "exists on the host (they reach nothing); never: none (docs/prepare.md)",
    )
    env_flag(
        gpu,
        "--device-order",
        default="sorted",
        help="sorted: slice devices by PCI bus ID and name; shuffled: a new order on every start, "
        "as NVIDIA's plugin, to flush out tests that depend on the order",
    )
    add_allow_real_gpu_node(gpu)
    env_flag(
        gpu,
        "--allow-device-plugin",
        default="false",
        choices=["true", "false"],
        help="start even when a device plugin advertises nvidia.com/gpu on this node (the GPUs are then "
        "offered twice)",
    )
    env_flag(
        gpu,
        "--dcgm-exporter-port",
        type=int,
        default=-1,
        help="serve dcgm-exporter-compatible GPU metrics at :<port>/metrics (dcgm-exporter: 9400; "
        "negative: not served; docs/observability.md)",
    )
    env_flag(
        gpu,
        "--node-labels",
        default="false",
        choices=["true", "false"],
        help="write GPU Feature Discovery's nvidia.com/* labels on this node (docs/observability.md)",
    )
    env_flag(
        gpu,
        "--mig-strategy",
        default="none",
        help="GFD's MIG strategy for the node labels: none, single or mixed",
    )

    labels = sub.add_parser(
        "node-labels",
        help="remove the GPU Feature Discovery labels dra-fake wrote (the chart's pre-delete hook)",
    )
    labels.add_argument("action", choices=["remove"])
    labels.add_argument("--node", action="append", default=[], help="only this node (repeatable)")
    env_flag(labels, "--kubeconfig", default="")
    labels.add_argument("--log-level", default="info", choices=LOG_LEVELS)

    from computedomain.cli import add_parsers as add_compute_domain_parsers

    add_compute_domain_parsers(sub)

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

    add_device_plugin_parser(sub)
    return parser


def env_flags(command: str) -> dict[str, str]:
    """{environment variable: its flag} of a command, e.g. {"FEATURE_GATES": "--feature-gates"}: what
    a chart sets as env, a command line can set as flags (e2e/localcluster/values.py)."""
    subparsers = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    actions = subparsers.choices[command]._actions
    return {a.env: a.option_strings[0] for a in actions if isinstance(a, EnvDefault)}


def parse_server_version(raw: str) -> tuple[int, int]:
    try:
        major, minor = raw.removeprefix("v").split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        raise SystemExit(f"dra-fake: error: --server-version {raw!r} is not MAJOR.MINOR, e.g. 1.34") from None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        trials.check()
    except trials.UnknownPieceError as err:
        print(f"dra-fake: error: {err}", file=sys.stderr)
        return 2
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
