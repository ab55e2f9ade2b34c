"""Which extended resources the node's simulated GPUs become under NVIDIA's device plugin, and the
device IDs it advertises. Pure. Facts: docs/reference/nvidia-device-plugin.md#b1-resource-names
and #b4-device-ids-allocate-responses.

- MIG strategy `none`: every GPU is `nvidia.com/gpu`, also one with MIG mode on (whole);
  `single`: every GPU must have MIG on and MIG devices of one profile, which become `nvidia.com/gpu`;
  `mixed`: GPUs without MIG are `nvidia.com/gpu`, MIG devices `nvidia.com/mig-<profile>`.
- IDs are GPU or MIG UUIDs; a shared resource (time-slicing, MPS) advertises each device `replicas`
  times as `<UUID>::<n>`, renamed `<name>.shared` with `renameByDefault`.
- The same UUIDs, bus IDs and minors as the DRA view of the inventory (dra_fake.gpu.inventory).
- Each resource's devices (what ListAndWatch sends) are in numeric order (`order_key`); NVIDIA's
  come in Go map order, which is no order.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from dra_fake.deviceplugin.config import SHARED_SUFFIX, ConfigError, PluginConfig
from dra_fake.gpu.api import AllocatableDevice, Inventory, PhysicalGpu, profile_in_resource_name, whole_gpu

PREFIX = "nvidia.com/"
GPU_RESOURCE = PREFIX + "gpu"
REPLICA_SEPARATOR = "::"


@dataclass(frozen=True)
class PluginDevice:
    """One advertised device (a GPU, a MIG device, or one replica of either)."""

    id: str  # what ListAndWatch advertises: the UUID, or <UUID>::<n> for a replica
    uuid: str
    index: str  # NVML's index: "0" for a GPU, "<gpu>:<mig>" for a MIG device
    device: AllocatableDevice  # the device as the DRA side publishes it (names, minor, bus ID)
    pcie_root: str = ""  # the GPU's PCIe root complex (topology for the preferred allocation)
    replica: int | None = None


@dataclass(frozen=True)
class Resource:
    name: str  # e.g. nvidia.com/gpu, nvidia.com/gpu.shared, nvidia.com/mig-1g.10gb
    devices: tuple[PluginDevice, ...]
    replicas: int = 1
    sharing: str = ""  # "", time-slicing or mps
    fail_requests_greater_than_one: bool = False

    @property
    def socket_name(self) -> str:
        """NVIDIA's socket file: nvidia-<name without the domain>.sock."""
        return f"nvidia-{self.name.split('/', 1)[1]}.sock"

    def by_id(self) -> dict[str, PluginDevice]:
        return {d.id: d for d in self.devices}


def order_key(device: PluginDevice) -> tuple[int, ...]:
    """The numeric order of devices: GPU index, MIG index, replica (`<UUID>::10` after `::9`, GPU
    10 after GPU 9). NVIDIA leaves most of its lists in Go map order; ours are in this order."""
    replica = -1 if device.replica is None else device.replica
    return (*(int(part) for part in device.index.split(":")), replica)


def mig_resource_name(profile: str) -> str:
    return f"{PREFIX}mig-{profile_in_resource_name(profile)}"


def _mig_devices(inventory: Inventory, gpu: PhysicalGpu) -> list[PluginDevice]:
    """A GPU's MIG devices in NVML's order (by GPU-instance placement), indexed `<gpu>:<n>`."""
    migs = sorted(
        (d for d in inventory.devices_of(gpu) if d.kind == "mig" and d.uuid and d.mig is not None),
        key=lambda d: (d.mig.start if d.mig else 0, d.name),
    )
    return [
        PluginDevice(d.uuid or "", d.uuid or "", f"{gpu.index}:{n}", d, gpu.pcie_root)
        for n, d in enumerate(migs)
    ]


def _gpu(gpu: PhysicalGpu) -> PluginDevice:
    return PluginDevice(gpu.uuid, gpu.uuid, str(gpu.index), whole_gpu(gpu), gpu.pcie_root)


def _mig_on(gpu: PhysicalGpu) -> bool:
    if gpu.mig_mode == "dynamic":
        raise ConfigError(
            f"gpu {gpu.index}: dynamic MIG is a DRA driver feature; the device plugin sees MIG devices "
            "created beforehand (inventory mig: static) or whole GPUs (mig: none)"
        )
    return gpu.mig_mode == "static"


def physical_resources(inventory: Inventory, mig_strategy: str) -> dict[str, list[PluginDevice]]:
    """Resource name -> its devices before sharing, as NVIDIA's device map builds them."""
    gpus = sorted(inventory.gpus, key=lambda g: g.index)
    out: dict[str, list[PluginDevice]] = {}
    if mig_strategy == "none":
        for gpu in gpus:
            _mig_on(gpu)
            out.setdefault(GPU_RESOURCE, []).append(_gpu(gpu))
    elif mig_strategy == "single":
        if len({_mig_on(g) for g in gpus}) > 1:
            raise ConfigError("all devices on the node must be configured with the same migEnabled value")
        for gpu in gpus:
            if not _mig_on(gpu):
                out.setdefault(GPU_RESOURCE, []).append(_gpu(gpu))
                continue
            migs = _mig_devices(inventory, gpu)
            if not migs:
                raise ConfigError(f"device {gpu.index} has no MIG devices configured")
            out.setdefault(GPU_RESOURCE, []).extend(migs)
        profiles = {d.device.mig.profile for d in out.get(GPU_RESOURCE, []) if d.device.mig}
        if len(profiles) > 1:
            raise ConfigError("more than one MIG device type present on node")
    else:  # mixed
        for gpu in gpus:
            if not _mig_on(gpu):
                out.setdefault(GPU_RESOURCE, []).append(_gpu(gpu))
                continue
            for mig in _mig_devices(inventory, gpu):
                if mig.device.mig is not None:
                    out.setdefault(mig_resource_name(mig.device.mig.profile), []).append(mig)
    return out


def build_resources(inventory: Inventory, config: PluginConfig) -> list[Resource]:
    """The resources the plugin registers, sorted by name; sharing applied."""
    sharing = config.sharing
    out = []
    for name, devices in sorted(physical_resources(inventory, config.mig_strategy).items()):
        replicas = sharing.replicas(name)
        if replicas < 2:
            out.append(Resource(name, tuple(devices)))
            continue
        shared = tuple(
            PluginDevice(f"{d.uuid}{REPLICA_SEPARATOR}{n}", d.uuid, d.index, d.device, d.pcie_root, n)
            for d in devices
            for n in range(replicas)
        )
        renamed = name + SHARED_SUFFIX if sharing.rename_by_default else name
        out.append(
            Resource(renamed, shared, replicas, sharing.strategy, sharing.fail_requests_greater_than_one)
        )
    # a shared resource the node does not have is skipped
    ordered = (replace(r, devices=tuple(sorted(r.devices, key=order_key))) for r in out)
    return sorted(ordered, key=lambda r: r.name)
