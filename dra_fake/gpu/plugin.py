"""The GPU kubelet plugin process (`dra-fake gpu-kubelet-plugin`): the node's inventory published
as ResourceSlices, claims prepared in the GPU driver's state, served by dra_fake.core.serving."""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
from pathlib import Path

from dra_fake.core import logs
from dra_fake.core.kube import StartupError, load_kube_client
from dra_fake.core.resourceapi import ServerInfo
from dra_fake.core.serving import ClaimState, PluginContext, run_plugin
from dra_fake.core.slices import DesiredSlice
from dra_fake.gpu.configs import FeatureGates
from dra_fake.gpu.devnodes import MODES, DeviceNodePolicy
from dra_fake.gpu.inventory import Inventory, InventoryError, load_inventory
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.slices import desired_slices, shuffled
from dra_fake.gpu.state import DeviceState

KNOWN_GATES = ("TimeSlicingSettings", "MPSSupport", "DynamicMIG")
DEVICE_ORDERS = ("sorted", "shuffled")
log = logging.getLogger(__name__)


def parse_feature_gates(raw: str) -> FeatureGates:
    enabled = set()
    for item in filter(None, (s.strip() for s in raw.split(","))):
        name, _, value = item.partition("=")
        if name not in KNOWN_GATES:
            raise StartupError(
                f"--feature-gates: unknown feature gate {name!r} (known: {', '.join(KNOWN_GATES)})"
            )
        if value.lower() not in ("true", "false"):
            raise StartupError(f"--feature-gates: {name}={value!r}: the value must be true or false")
        if value.lower() == "true":
            enabled.add(name)
    return FeatureGates(frozenset(enabled))


class GpuDriver:
    """gpu.nvidia.com for run_plugin (dra_fake.core.serving.KubeletDriver)."""

    display_name = "GPU kubelet plugin"

    def __init__(
        self,
        driver_name: str,
        inventory: Inventory,
        gates: FeatureGates,
        device_nodes: DeviceNodePolicy,
        shuffle_seed: int | None = None,
    ) -> None:
        self.driver = driver_name
        self.inventory = inventory
        self.gates = gates
        self.device_nodes = device_nodes
        self.shuffle_seed = shuffle_seed  # None: sorted devices

    def create_state(self, ctx: PluginContext) -> ClaimState:
        return DeviceState(
            self.driver,
            ctx.node,
            self.inventory.devices,
            ctx.cdi_root,
            ctx.data_dir,
            feature_gates=self.gates,
            node_name=ctx.node,
            nvidia_smi=NvidiaSmi.from_inventory(ctx.data_dir, self.inventory),
            device_nodes=self.device_nodes.current,
            on_checkpoint_error=ctx.checkpoint_error_hook(self.driver),
        )

    def desired_slices(self, server: ServerInfo) -> list[DesiredSlice]:
        wanted = desired_slices(self.inventory, self.driver, server.version)
        return wanted if self.shuffle_seed is None else shuffled(wanted, self.shuffle_seed)


def run_gpu_plugin(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    try:
        if not args.node_name:
            raise StartupError("--node-name (NODE_NAME) is required")
        gates = parse_feature_gates(args.feature_gates)
        if args.device_nodes not in MODES:
            raise StartupError(f"--device-nodes: {args.device_nodes!r} is not one of {', '.join(MODES)}")
        if args.device_order not in DEVICE_ORDERS:
            raise StartupError(
                f"--device-order: {args.device_order!r} is not one of {', '.join(DEVICE_ORDERS)}"
            )
        profile_dirs = [Path(args.profiles_dir)] if args.profiles_dir else []
        inventory = load_inventory(Path(args.config) if args.config else None, args.node_name, profile_dirs)
        api = load_kube_client(args.kubeconfig)
    except (StartupError, InventoryError, ValueError, OSError) as err:
        print(f"dra-fake gpu-kubelet-plugin: error: {err}", file=sys.stderr)
        return 2
    policy = DeviceNodePolicy(args.device_nodes)
    policy.current()  # logs the decision at start
    seed = None
    if args.device_order == "shuffled":
        seed = secrets.randbits(32)
        log.info("slice devices shuffled (--device-order=shuffled)", extra={"seed": seed})
    return run_plugin(args, api, GpuDriver(args.driver_name, inventory, gates, policy, seed))
