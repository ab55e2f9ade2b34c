"""The GPU kubelet plugin process (`dra-fake gpu-kubelet-plugin`): the node's inventory published
as ResourceSlices, claims prepared in the GPU driver's state, served by dra_fake.core.serving."""

from __future__ import annotations

import argparse
import logging
import secrets
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dra_fake.core import featuregates, logs, nvidiahost
from dra_fake.core.kubeconfig import StartupError, check_config_source
from dra_fake.core.serving import ClaimState, PluginContext, run_plugin
from dra_fake.core.slices import DesiredSlice
from dra_fake.gpu.configs import FeatureGates
from dra_fake.gpu.devnodes import MODES, DeviceNodePolicy
from dra_fake.gpu.faults import DEFAULT_IGNORED_XIDS, MAX_XID, Effects, servable_taints
from dra_fake.gpu.gfd import MIG_STRATEGIES
from dra_fake.gpu.inventory import Inventory, InventoryError, SharesSetting, load_inventory
from dra_fake.gpu.lending import UNKNOWN, Lending, LendingSettings, lent_gpus, not_lendable, with_lend_views
from dra_fake.gpu.lendingfile import FILE_NAME as LENDING_FILE
from dra_fake.gpu.lendingfile import KeptLending
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.runtime import Host, Node, NodeSettings
from dra_fake.gpu.shares import FLAG, GATE_CONSUMABLE_SHARES, SharesMode, SharesSettingError, node_mode
from dra_fake.gpu.slices import desired_slices, shuffled
from dra_fake.gpu.state import DeviceState

if TYPE_CHECKING:
    from dra_fake.core.resourceapi import ServerInfo
    from dra_fake.kubelet.api import PreparedDevice

GATE_HEALTH_CHECK = featuregates.NVML_DEVICE_HEALTH_CHECK
DEVICE_ORDERS = ("sorted", "shuffled")
log = logging.getLogger(__name__)


def parse_feature_gates(raw: str) -> FeatureGates:
    """--feature-gates, by the parser both plugins share (dra_fake.core.featuregates)."""
    return FeatureGates(featuregates.parse_feature_gates(raw))


def parse_additional_xids(raw: str) -> frozenset[int]:
    """ADDITIONAL_XIDS_TO_IGNORE: comma-separated decimal Xids. NVIDIA's plugin drops a malformed
    entry with a debug log; here it is a start-up error naming it, since a typo would silently
    turn an ignored Xid into a NoSchedule taint."""
    xids = set()
    for item in filter(None, (s.strip() for s in raw.split(","))):
        # ASCII digits, and few of them: int() refuses other digits and more than 4300 of them
        if not (item.isascii() and item.isdigit() and len(item) <= 9) or not 0 < int(item) < MAX_XID:
            raise StartupError(f"--additional-xids-to-ignore: {item!r} is not an Xid number")
        xids.add(int(item))
    return frozenset(xids)


class GpuDriver:
    """gpu.nvidia.com for run_plugin (dra_fake.core.serving.KubeletDriver)."""

    display_name = "GPU kubelet plugin"
    retry_window = 0.0  # NVIDIA's GPU plugin answers each call at once

    def __init__(
        self,
        driver_name: str,
        inventory: Inventory,
        gates: FeatureGates,
        device_nodes: DeviceNodePolicy,
        shuffle_seed: int | None = None,
        node_settings: NodeSettings | None = None,
        allow_device_plugin: bool = False,
        consumable_shares: SharesMode | None = None,
        device_status: bool = False,
        shared_memory_view: str = "share",
    ) -> None:
        self.driver = driver_name
        self.inventory = inventory
        self.gates = gates
        self.device_nodes = device_nodes
        self.shuffle_seed = shuffle_seed  # None: sorted devices
        # What the node's services (dra_fake.gpu.runtime: faults, telemetry, GFD's labels) do.
        self.node_settings = node_settings if node_settings is not None else NodeSettings(driver_name)
        self.allow_device_plugin = allow_device_plugin
        self.consumable_shares = consumable_shares  # --consumable-shares (node-wide); None: disabled
        self.device_status = device_status  # --device-status: prepared devices' status in claims
        self.shared_memory_view = shared_memory_view  # --shared-memory-view: share or device
        self._ctx: PluginContext | None = None  # set by create_state
        self.nvidia_smi: NvidiaSmi | None = None  # set by create_state
        self.state: DeviceState | None = None
        self._taints: dict[str, list[dict[str, str]]] = {}
        # The lend views' taints (dra_fake.gpu.lending): from the first slice on, every lend view is
        # `unknown` (nothing lent) until the lending service's samples say otherwise.
        self._lend_taints: dict[str, list[dict[str, str]]] = {}
        self.lending: KeptLending | None = None  # set by create_state: restored from the data dir
        if self.node_settings.lending is not None:
            first = Lending(self.node_settings.lending, time.time())
            self._lend_taints = first.taints(lent_gpus(inventory.devices))
        self._slices: tuple[object, list[DesiredSlice]] | None = None  # (key, slices) of the last call
        self._lock = threading.Lock()

    def create_state(self, ctx: PluginContext) -> ClaimState:
        self._ctx = ctx
        kept = ctx.data_dir / LENDING_FILE
        if self.node_settings.lending is not None:  # before the first prepare and the first slice
            self.lending = KeptLending(self.node_settings.lending, time.time(), kept)
            with self._lock:
                self._lend_taints = self.lending.state.taints(lent_gpus(self.inventory.devices))
        else:  # what a run with lending kept is stale by the time lending is on again
            kept.unlink(missing_ok=True)
        self.nvidia_smi = NvidiaSmi.from_inventory(ctx.data_dir, self.inventory)
        self.state = DeviceState(
            self.driver,
            ctx.node,
            self.inventory.devices,
            ctx.cdi_root,
            ctx.data_dir,
            feature_gates=self.gates,
            node_name=ctx.node,
            nvidia_smi=self.nvidia_smi,
            device_nodes=self.device_nodes.current,
            on_checkpoint_error=ctx.checkpoint_error_hook(self.driver),
            consumable_shares=self.consumable_shares,
            memory_view=self.shared_memory_view == "share",
            lend_state=None if self.node_settings.lending is None else self.lend_state,
        )
        if not self.device_status:
            return self.state
        from dra_fake.core.devicestatus import ReportingState

        return ReportingState(
            self.state,
            self.driver,
            self.device_data,
            lambda: ctx.api,
            lambda: ctx.resources.info.resource_version,
            ctx.stop,
        )

    def lend_state(self, view: str) -> str | None:
        """What keeps a lend view's GPU from being lent, as its published taints say now; None:
        lendable. Prepare asks it for each spot claim (dra_fake.gpu.plan)."""
        with self._lock:
            taints = self._lend_taints.get(view)
        return UNKNOWN if taints is None else not_lendable(taints)

    def device_data(self, claim: Mapping[str, Any], prepared: PreparedDevice) -> dict[str, Any]:
        """A prepared device's `data` in the claim's status: its UUID, and a MIG device's parent
        and profile (a dynamic MIG device's UUID is the one created for this claim)."""
        device = self.inventory.devices.get(prepared.device_name)
        if device is None or self.state is None:
            return {}
        uuid = device.uuid
        if device.dynamic:
            uuid = self.state.created_mig_uuids(claim["metadata"]["uid"]).get(device.name, uuid)
        data: dict[str, Any] = {
            "uuid": uuid,
            "productName": device.product_name,
            "pciBusID": device.pci_bus_id,
        }
        if device.mig is not None:
            data |= {"parentUUID": device.gpu_uuid, "profile": device.mig.profile}
        return {k: v for k, v in data.items() if v is not None}

    def desired_slices(self, server: ServerInfo) -> list[DesiredSlice]:
        """Rebuilt only when the taints change (the publisher asks at every sync)."""
        with self._lock:
            merged = {
                d: self._taints.get(d, []) + self._lend_taints.get(d, [])
                for d in sorted({*self._taints, *self._lend_taints})
            }
            taints = servable_taints(merged, server.version)
            key = (server.version, repr(taints))
            if self._slices is None or self._slices[0] != key:
                wanted = desired_slices(self.inventory, self.driver, server.version, taints)
                self._slices = (
                    key,
                    wanted if self.shuffle_seed is None else shuffled(wanted, self.shuffle_seed),
                )
            return self._slices[1]

    def refusal(self, node: dict[str, Any]) -> str | None:
        """As NVIDIA's chart refuses its DRA driver's GPUs beside its device plugin: a node whose GPUs
        a device plugin advertises is not served twice (unless --allow-device-plugin)."""
        found = device_plugin_resources(node)
        if found and not self.allow_device_plugin:
            return (
                f"node {node['metadata']['name']} advertises {', '.join(found)} through a device plugin: "
                "serve a node's GPUs through the device plugin or through DRA, not both "
                "(--allow-device-plugin=true to run anyway)"
            )
        return self._gate_refusal()

    def shares_setting(self) -> str | None:
        """What turns consumable shares on for this node, as refusals name it; None: nothing."""
        if self.consumable_shares is not None:
            return f"{FLAG}={self.consumable_shares}"
        modes = sorted({str(g.shares) for g in self.inventory.gpus if g.shares is not None})
        return f"the inventory's consumableShares={','.join(modes)}" if modes else None

    def _gate_refusal(self) -> str | None:
        """A server that cannot honour what this node turns on (consumable shares, fabric-attached
        GPUs, lending): refused before the first slice, also as a Warning event on the Node (the
        probe in dra_fake.core.fieldgate, each feature's data in gpu/sharesgate, attachgate,
        lendinggate)."""
        if self._ctx is None:
            return None
        from dra_fake.core.events import post_node_event
        from dra_fake.gpu import attachgate, lendinggate, sharesgate

        wanted = (
            (self.shares_setting(), sharesgate.GATE),
            (attachgate.SETTING if self.inventory.attachable else None, attachgate.GATE),
            (lendinggate.SETTING if self.node_settings.lending is not None else None, lendinggate.GATE),
        )
        ctx = self._ctx
        for setting, gate in wanted:
            if setting is None:
                continue
            reason = gate.server_refusal(
                setting, ctx.api, ctx.resources.info, self.driver, ctx.node, ctx.stop
            )
            if reason is not None:
                post_node_event(
                    ctx.api,
                    ctx.node,
                    ctx.node_uid,
                    reason=gate.event_reason,
                    message=reason,
                    component=f"{self.driver}-kubelet-plugin",
                )
                return reason
        return None

    def start_background(self, ctx: PluginContext, server: ServerInfo) -> None:
        """The node's services (dra_fake.gpu.runtime): the telemetry (nvidia-smi's live files,
        dcgm-exporter's /metrics), the node's GFD labels, and its GpuFaults: taints with
        NVMLDeviceHealthCheck (as NVIDIA); the health stream, nvidia-smi and the metrics always."""
        health_check = self.gates.enabled(GATE_HEALTH_CHECK)
        if self.nvidia_smi is None or self.state is None:
            raise RuntimeError("start_background before create_state")
        node = Node(
            ctx.node,
            self.inventory,
            holdings=self.state.holdings,
            nvidia_smi=self.nvidia_smi,
            lending=self.lending,
        )
        runtime = Host(self.node_settings, lambda: ctx.api, ctx.stop).node(node)

        def apply(effects: Effects) -> None:
            with self._lock:
                self._taints = effects.taints if health_check else {}
            ctx.device_health.set_health(effects.health)
            ctx.republish()

        def lend(taints: dict[str, list[dict[str, str]]]) -> None:
            with self._lock:
                self._lend_taints = taints
            ctx.republish()

        runtime.on_faults(apply)
        runtime.on_lending(lend)
        runtime.start()


def device_plugin_resources(node: dict[str, Any]) -> list[str]:
    """NVIDIA's device-plugin resources the node has allocatable (a device plugin serves them)."""
    status = node.get("status")
    allocatable = status.get("allocatable", {}) if isinstance(status, dict) else {}
    return sorted(
        name
        for name, value in (allocatable or {}).items()
        if (name == "nvidia.com/gpu" or name.startswith(("nvidia.com/mig-", "nvidia.com/gpu.")))
        and value != "0"
    )


def run_gpu_plugin(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    try:
        if not args.node_name:
            raise StartupError("--node-name (NODE_NAME) is required")
        if args.allow_real_gpu_node != "true" and (
            refused := nvidiahost.refusal("dra-fake gpu-kubelet-plugin")
        ):
            raise StartupError(refused)
        gates = parse_feature_gates(args.feature_gates)
        shares_gate = gates.enabled(GATE_CONSUMABLE_SHARES)
        consumable_shares = node_mode(args.consumable_shares, shares_gate)
        ignored_xids = DEFAULT_IGNORED_XIDS | parse_additional_xids(args.additional_xids_to_ignore)
        if args.device_nodes not in MODES:
            raise StartupError(f"--device-nodes: {args.device_nodes!r} is not one of {', '.join(MODES)}")
        if args.mig_strategy not in MIG_STRATEGIES:
            raise StartupError(
                f"--mig-strategy: {args.mig_strategy!r} is not one of {', '.join(MIG_STRATEGIES)}"
            )
        if args.device_order not in DEVICE_ORDERS:
            raise StartupError(
                f"--device-order: {args.device_order!r} is not one of {', '.join(DEVICE_ORDERS)}"
            )
        profile_dirs = [Path(args.profiles_dir)] if args.profiles_dir else []
        inventory = load_inventory(
            Path(args.config) if args.config else None,
            args.node_name,
            profile_dirs,
            SharesSetting(consumable_shares, shares_gate),
        )
        device_status = args.device_status == "true"
        if inventory.attachable and not device_status:
            raise StartupError(
                "the inventory's attach (fabric-attached GPUs) is reported in the claims' status: "
                "it needs --device-status=true"
            )
        check_config_source(args.kubeconfig)
        lending_settings = None
        if args.gpu_lending == "true":
            lending_settings = LendingSettings(args.gpu_lending_idle_threshold, args.gpu_lending_idle_for)
            inventory = with_lend_views(inventory)
    except SharesSettingError as err:  # NVIDIA's plugin exits 1 on these (validateCLIFlags)
        print(f"dra-fake gpu-kubelet-plugin: error: {err}", file=sys.stderr)
        return 1
    except (StartupError, InventoryError, ValueError, OSError) as err:
        print(f"dra-fake gpu-kubelet-plugin: error: {err}", file=sys.stderr)
        return 2
    featuregates.export(gates.enabled_gates)
    log.info("feature gates", extra={"enabled": sorted(gates.enabled_gates)})
    policy = DeviceNodePolicy(args.device_nodes)
    policy.current()  # logs the decision at start
    seed = None
    if args.device_order == "shuffled":
        seed = secrets.randbits(32)
        log.info("slice devices shuffled (--device-order=shuffled)", extra={"seed": seed})
    node_settings = NodeSettings(
        args.driver_name,
        ignored_xids=ignored_xids,
        dcgm_port=args.dcgm_exporter_port,
        node_labels=args.node_labels == "true",
        mig_strategy=args.mig_strategy,
        attach=device_status,
        lending=lending_settings,
    )
    driver = GpuDriver(
        args.driver_name,
        inventory,
        gates,
        policy,
        seed,
        node_settings,
        args.allow_device_plugin == "true",
        consumable_shares,
        device_status,
        args.shared_memory_view,
    )
    return run_plugin(args, driver)
