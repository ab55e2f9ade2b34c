"""Container edits of gpu.nvidia.com claims: what a container gets for its GPUs and MIG devices.

There is no hardware: the edits are environment variables; when the plugin passes its
`NvidiaSmi`, read-only bind mounts of nvidia-smi, the NVML library and one info file per device
(dra_fake.gpu.nvidia_smi); when the host allows them (dra_fake.gpu.devnodes), NVIDIA's device nodes,
which reach nothing. No hooks (docs/reference/nvidia-gpu-driver.md#54-hooks). docs/prepare.md
lists them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_fake.core import yamlio
from dra_fake.core.cdi import EARLIEST_VERSION, CdiSpecError, claim_kind, minimum_version
from dra_fake.gpu import devicefile
from dra_fake.gpu.configresolve import NO_SHARING, AppliedSharing
from dra_fake.gpu.configs import STRATEGY_MPS, STRATEGY_TIME_SLICING
from dra_fake.gpu.devices import AllocatableDevice
from dra_fake.gpu.devnodes import DeviceNodes
from dra_fake.gpu.nvidia_smi import NvidiaSmi

MPS_PIPE_DIRECTORY = "/tmp/nvidia-mps"


def env_id(device_name: str) -> str:
    """Device name -> env key part: `gpu-2-mig-1g10gb-9-0` -> `GPU_2_MIG_1G10GB_9_0`."""
    return re.sub(r"[^A-Z0-9]", "_", device_name.upper())


@dataclass(frozen=True)
class Share:
    """The claim's share of a device with consumable shares: its ID and what it consumes (the
    allocation result's `consumedCapacity`; None where the device has no such capacity)."""

    share_id: str
    memory_bytes: int | None = None
    shares: int | None = None
    memory_view: bool = True  # its nvidia-smi shows its memory as the total (False: the device's)

    def env(self, prefix: str) -> list[str]:
        """`DRA_FAKE_<ID>_SHARE_*` (docs/sharing-design.md#15-cdi-and-what-the-kubelet-gets)."""
        out = [f"{prefix}SHARE_ID={self.share_id}"]
        if self.memory_bytes is not None:
            out.append(f"{prefix}SHARE_MEMORY_BYTES={self.memory_bytes}")
        if self.shares is not None:
            out.append(f"{prefix}SHARE_SHARES={self.shares}")
        return out


@dataclass(frozen=True)
class SpecDevice:
    """One device of a claim spec and the facts its edits are built from."""

    cdi_name: str
    device: AllocatableDevice
    uuid: str  # for a dynamic MIG device: the UUID it got when created (for its first share's claim)
    admin_access: bool = False
    sharing: AppliedSharing = NO_SHARING
    share: Share | None = None  # allocated as a share (consumable capacity)


def env_prefix(device_name: str) -> str:
    return f"DRA_FAKE_{env_id(device_name)}_"


def device_env(spec_device: SpecDevice) -> list[str]:
    """Per-device env (without the share's: `device_edits` adds it). Keys carry the device name,
    so several devices never collide; the few un-keyed sharing variables have the same value on
    every device of one config group."""
    dev = spec_device.device
    prefix = env_prefix(dev.name)
    env = {
        "DEVICE": dev.name,
        "UUID": spec_device.uuid,
        "TYPE": dev.kind,
        "PRODUCT_NAME": dev.product_name,
        "PCI_BUS_ID": dev.pci_bus_id,
        "MEMORY_BYTES": str(dev.memory_bytes),
    }
    if dev.kind == "mig" and dev.mig is not None:
        env |= {
            "MIG_PROFILE": dev.mig.profile,
            "PARENT_UUID": dev.gpu_uuid,
            "MIG_PLACEMENT_START": str(dev.mig.start),
            "MIG_PLACEMENT_SIZE": str(dev.mig.size),
            "MIG_DYNAMIC": "true" if dev.dynamic else "false",
        }
    if dev.lends is not None:  # a lend view (dra_fake.gpu.lending): the owner's GPU, lent
        env |= {"SPOT": "true", "LENDER": dev.lends}
    if spec_device.admin_access:
        env["ADMIN_ACCESS"] = "true"
    sharing = spec_device.sharing
    if sharing.strategy is not None:
        env["SHARING_STRATEGY"] = sharing.strategy
    out = [f"{prefix}{key}={value}" for key, value in env.items()]
    if sharing.strategy == STRATEGY_TIME_SLICING and sharing.time_slice_interval is not None:
        out.append(f"{prefix}TIMESLICE_INTERVAL={sharing.time_slice_interval}")
        out.append(f"DRA_FAKE_TIMESLICE_INTERVAL={sharing.time_slice_interval}")
    if sharing.strategy == STRATEGY_MPS and sharing.mps is not None:
        mps = sharing.mps
        out.append(f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE_DIRECTORY}")
        if mps.active_thread_percentage is not None:
            out.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={mps.active_thread_percentage}")
        if mps.pinned_memory_limits:
            limits = ",".join(f"{uuid}={limit}" for uuid, limit in mps.pinned_memory_limits)
            out.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={limits}")
        out.append(f"DRA_FAKE_MPS_CONTROL_DAEMON={mps.control_daemon_id}")
    return out


# NVIDIA's claim spec sets these two (docs/reference/nvidia-gpu-driver.md#5-cdi): GPUs reach a
# container as device nodes, never by name in NVIDIA_VISIBLE_DEVICES, which a node with the NVIDIA
# container runtime would read as a request for real GPUs. Our UUID list has its own name.
NVIDIA_SPEC_ENV = ("NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib64")


def spec_env(claim_uid: str, devices: Sequence[SpecDevice]) -> list[str]:
    """Spec-level env (applies when any device of the claim is injected)."""
    uuids = ",".join(dict.fromkeys(d.uuid for d in devices))
    return [*NVIDIA_SPEC_ENV, f"DRA_FAKE_VISIBLE_DEVICES={uuids}", f"DRA_FAKE_CLAIM_UID={claim_uid}"]


def gpu_edits(
    device: AllocatableDevice, uuid: str, nvidia_smi: NvidiaSmi | None, device_nodes: DeviceNodes | None
) -> dict[str, Any]:
    """A device's own edits, whichever API hands it out: its GPU's device node, its nvidia-smi file
    and live directories."""
    edits: dict[str, Any] = {}
    if device_nodes is not None:
        edits["deviceNodes"] = [device_nodes.gpu(device.minor)]
    if nvidia_smi is not None:
        edits["mounts"] = [nvidia_smi.device_mount(device, uuid), *nvidia_smi.live_mounts(device, uuid)]
    return edits


def common_edits(nvidia_smi: NvidiaSmi | None, device_nodes: DeviceNodes | None) -> dict[str, Any]:
    """What any GPU brings once: the control and uvm nodes, nvidia-smi and the NVML library."""
    edits: dict[str, Any] = {}
    if device_nodes is not None:
        edits["deviceNodes"] = device_nodes.common()
    if nvidia_smi is not None:
        edits["mounts"] = nvidia_smi.spec_mounts()
    return edits


# A device's own edits do not depend on the claim: built once per (device, UUID, access,
# sharing, nvidia-smi files, device nodes), shared by every spec that names it, and never changed
# after (a spec is built, stored and rendered, never edited); their YAML is rendered once
# (yamlio.FRAGMENTS). A dynamic MIG device gets a new UUID per claim: bounded.
_DEVICE_EDITS: dict[tuple[object, ...], dict[str, Any]] = {}
_DEVICE_EDITS_MAX = 1024


def device_edits(
    d: SpecDevice, nvidia_smi: NvidiaSmi | None, device_nodes: DeviceNodes | None
) -> dict[str, Any]:
    """The device's containerEdits in a claim spec (shared: never change the dict returned). A
    share's are the device's with its own env added: built per share, not kept."""
    key = (d.device, d.uuid, d.admin_access, d.sharing, nvidia_smi, device_nodes)
    edits = _DEVICE_EDITS.get(key)
    if edits is None:
        edits = {"env": device_env(d)} | gpu_edits(d.device, d.uuid, nvidia_smi, device_nodes)
        if len(_DEVICE_EDITS) >= _DEVICE_EDITS_MAX:
            _DEVICE_EDITS.clear()
        _DEVICE_EDITS[key] = yamlio.FRAGMENTS.register(edits)
    if d.share is None:
        return edits
    share = edits | {"env": edits["env"] + d.share.env(env_prefix(d.device.name))}
    if nvidia_smi is not None:  # the share's own device file, at the device's place
        mib = (
            devicefile.share_memory_mib(d.device.memory_bytes, d.share.memory_bytes)
            if d.share.memory_view
            else None
        )
        mount = nvidia_smi.device_mount(d.device, d.uuid, d.share.share_id, mib)
        here = mount["containerPath"]
        share["mounts"] = [mount if m["containerPath"] == here else m for m in edits["mounts"]]
        share["mounts"].append(nvidia_smi.share_live_mount(d.share.share_id))
    return share


def build_claim_spec(
    driver: str,
    claim_uid: str,
    devices: Sequence[SpecDevice],
    nvidia_smi: NvidiaSmi | None = None,
    device_nodes: DeviceNodes | None = None,
) -> dict[str, Any]:
    """The claim's CDI spec (a dict), with the minimum cdiVersion its content needs. With
    `nvidia_smi`, the spec mounts nvidia-smi and the NVML library and each device its info file; with
    `device_nodes`, each device gets its GPU's node and the spec the control and uvm nodes."""
    if not devices:
        raise CdiSpecError("a CDI spec needs at least one device")
    unique: dict[str, SpecDevice] = {}
    for d in devices:
        unique.setdefault(d.cdi_name, d)
    spec_devices: list[dict[str, Any]] = []
    used: set[int] = set()
    for d in unique.values():
        edits = device_edits(d, nvidia_smi, device_nodes)
        parts = {id(edits), *map(id, edits.values())}  # a share's edits hold its device's lists
        if parts & used:
            # one device twice in a claim: PyYAML would write one object twice as an alias
            edits = copy.deepcopy(edits)
            parts = {id(edits), *map(id, edits.values())}
        used |= parts
        spec_devices.append({"name": d.cdi_name, "containerEdits": edits})
    common = {"env": spec_env(claim_uid, list(unique.values()))} | common_edits(nvidia_smi, device_nodes)
    spec: dict[str, Any] = {
        "cdiVersion": EARLIEST_VERSION,
        "kind": claim_kind(driver),
        "devices": spec_devices,
        "containerEdits": common,
    }
    spec["cdiVersion"] = minimum_version(spec)
    return spec
