"""The devices a node offers, as the rest of the driver sees them.

This is the contract between the inventory (config -> devices), the slice builder
(devices -> ResourceSlices) and prepare (allocated device -> CDI edits). It is pure data.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from dra_fake.gpu.shares import SharesMode

# Namespace for deterministic UUIDs: a simulated GPU keeps its UUID across restarts of
# the plugin, like real hardware, and differs between nodes.
_UUID_NAMESPACE = uuid.UUID("6f1c9a52-43c5-4f0e-9d7e-2b0a8e4c1d11")

DeviceKind = Literal["gpu", "mig"]


@dataclass(frozen=True)
class MigPlacement:
    """One GPU-instance placement: a MIG profile at a start slice."""

    profile: str  # NVML profile name, e.g. "1g.10gb", "1g.10gb+me"
    gi_profile_id: int
    start: int
    size: int

    def memory_slices(self) -> range:
        return range(self.start, self.start + self.size)


@dataclass(frozen=True)
class AllocatableDevice:
    """A device published in the node's ResourceSlices."""

    name: str  # device name in the ResourceSlice: gpu-<minor> or gpu-<minor>-mig-<p>-<gi>-<start>
    kind: DeviceKind
    minor: int  # the GPU's minor number (the parent's, for a MIG device)
    index: int  # the GPU's index on the node (the parent's, for a MIG device)
    gpu_uuid: str  # the full GPU's UUID (the parent's, for a MIG device)
    uuid: str | None  # this device's UUID; None for a dynamic MIG device not yet created
    pci_bus_id: str  # the GPU's PCI bus ID (the parent's, for a MIG device)
    product_name: str
    profile_name: str  # GPU profile id, e.g. "h100-sxm5-80gb"
    memory_bytes: int  # memory of this device (MIG: the GI profile's memory)
    mig: MigPlacement | None = None
    dynamic: bool = False  # dynamic MIG: created at prepare, destroyed at unprepare
    shares: SharesMode | None = None  # consumable shares: several claims at once; None: exclusive
    lends: str | None = None  # a lend view (dra_fake.gpu.lending): the GPU it lends, by name

    @property
    def parent_uuid(self) -> str | None:
        return self.gpu_uuid if self.kind == "mig" else None


def gpu_uuid(node_name: str, index: int) -> str:
    """Deterministic GPU UUID for GPU <index> of <node_name>, shaped like NVML's."""
    return "GPU-" + str(uuid.uuid5(_UUID_NAMESPACE, f"{node_name}/gpu/{index}"))


def mig_uuid(node_name: str, index: int, placement: MigPlacement, nonce: str = "") -> str:
    """Deterministic MIG UUID. Pre-created MIG devices use no nonce; a dynamic MIG device is
    created anew for every claim (nonce = claim UID), as real hardware gives a new UUID per creation."""
    key = f"{node_name}/gpu/{index}/mig/{placement.gi_profile_id}/{placement.start}/{nonce}"
    return "MIG-" + str(uuid.uuid5(_UUID_NAMESPACE, key))
