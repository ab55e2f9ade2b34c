"""The node's simulated GPUs: inventory config (YAML) -> physical GPUs -> published devices.

Pure: reads at most the config file and profile files, never the cluster. The config format,
the default and the UUID / minor / PCI derivation are described in docs/inventory.md.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import Field, ValidationError

from dra_fake.core import yamlio
from dra_fake.gpu.attach import AttachConfig
from dra_fake.gpu.devices import AllocatableDevice, MigPlacement, gpu_uuid, mig_uuid
from dra_fake.gpu.profiles import (
    GpuProfile,
    ProfileError,
    apply_overrides,
    format_validation_error,
    load_profiles,
)
from dra_fake.gpu.profiles.models import MigProfile, StrictModel
from dra_fake.gpu.shares import GATE_CONSUMABLE_SHARES, SharesMode, SharesSettingError, parse_mode

DEFAULT_PROFILE = "h100-sxm5-80gb"
DEFAULT_GPU_COUNT = 8
MIB = 1 << 20

CLIQUE_ID_PATTERN = r"^([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.\d+)?$"

MigMode = Literal["none", "static", "dynamic"]


class InventoryError(ValueError):
    """The inventory config is invalid; the message names the file and the field."""


# ---- config (YAML) -------------------------------------------------------------------------


class MigDeviceConfig(StrictModel):
    """A pre-created MIG device (static MIG): a GI profile name at a placement start."""

    profile: str
    start: Annotated[int, Field(ge=0)]


class GpuGroupConfig(StrictModel):
    """`count` identical GPUs of one profile."""

    profile: str
    count: Annotated[int, Field(ge=1, le=1024)] = 1
    mig: MigMode = "none"
    mig_devices: list[MigDeviceConfig] = Field(default_factory=list)
    overrides: dict[str, Any] = Field(default_factory=dict)  # camelCase profile fields
    # The node's --consumable-shares for this group's GPUs (same values; an integer may be
    # written as a YAML number). Ours: NVIDIA's setting is node-wide
    # (docs/sharing-design.md#11-switches-nvidias-names).
    consumable_shares: str | int | None = None
    # Fabric-attached GPUs: published with binding conditions, attached after allocation
    # (dra_fake.gpu.attach; needs Kubernetes' DRADeviceBindingConditions). None: local GPUs.
    attach: AttachConfig | None = None


class InventoryConfig(StrictModel):
    """The whole node. Keys are camelCase; unknown keys are errors."""

    gpus: list[GpuGroupConfig]
    driver_version: str | None = None  # overrides every profile's driverVersion
    cuda_driver_version: str | None = None  # overrides every profile's cudaDriverVersion
    # NVLink fabric clique "<cluster UUID>.<clique id>", as NVML GetGpuFabricInfo yields it; None or
    # "" = not fabric-attached. Read by the compute-domain plugin.
    imex_clique_id: Annotated[str, Field(pattern=CLIQUE_ID_PATTERN)] | None = None


def default_config() -> InventoryConfig:
    """No config file: 8 x h100-sxm5-80gb, MIG off."""
    return InventoryConfig.model_validate(
        {"gpus": [{"profile": DEFAULT_PROFILE, "count": DEFAULT_GPU_COUNT}]}
    )


def parse_config(data: Any, source: str) -> InventoryConfig:
    try:
        return InventoryConfig.model_validate(data)
    except ValidationError as error:
        raise InventoryError(format_validation_error(source, error)) from None


# ---- result ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PhysicalGpu:
    """One simulated GPU board. `profile` has every override applied."""

    index: int
    minor: int
    uuid: str
    pci_bus_id: str
    pcie_root: str
    profile: GpuProfile
    mig_mode: MigMode
    static_mig: tuple[MigPlacement, ...] = ()  # pre-created MIG devices (mig: static)
    module_id: int | None = None  # the board's module ID, from its topology slot (None = N/A)
    shares: SharesMode | None = None  # consumable shares on every device of this GPU; None: exclusive
    attach: AttachConfig | None = None  # fabric-attached (dra_fake.gpu.attach); None: local

    @property
    def name(self) -> str:
        return f"gpu-{self.minor}"

    @property
    def offers_full_gpu(self) -> bool:
        """NVIDIA hides the full GPU with MIG mode on, except dynamic MIG on Hopper and newer."""
        if self.mig_mode == "none":
            return True
        return self.mig_mode == "dynamic" and not self.profile.mig_toggle_needs_reset


@dataclass(frozen=True)
class Inventory:
    node_name: str
    gpus: tuple[PhysicalGpu, ...]
    devices: dict[str, AllocatableDevice]  # every published device, by name
    imex_clique_id: str = ""
    config: InventoryConfig = field(default_factory=default_config, compare=False)

    def gpu(self, minor: int) -> PhysicalGpu:
        return next(g for g in self.gpus if g.minor == minor)

    def attach_of(self, device: str) -> AttachConfig | None:
        """The attach setting of a published device's GPU (None: not fabric-attached)."""
        found = self.devices.get(device)
        return self.gpu(found.minor).attach if found is not None else None

    @property
    def attachable(self) -> bool:
        return any(g.attach is not None for g in self.gpus)

    def devices_of(self, gpu: PhysicalGpu) -> list[AllocatableDevice]:
        """The devices of one GPU (itself and/or its MIG devices), sorted by name."""
        return sorted((d for d in self.devices.values() if d.minor == gpu.minor), key=lambda d: d.name)


# ---- building ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SharesSetting:
    """The node's consumable-shares setting (--consumable-shares) and whether the feature gate
    allows the inventory's own `consumableShares` keys. Offline tools (render-slices) pass
    `gate=True`: they show what a plugin with the gate would publish."""

    default: SharesMode | None = None
    gate: bool = True


def load_inventory(
    config_path: Path | None,
    node_name: str,
    profile_dirs: Sequence[Path] = (),
    shares: SharesSetting = SharesSetting(),
) -> Inventory:
    """Read the config file (None: the default) and build the node's inventory."""
    source = str(config_path) if config_path else "<default inventory>"
    try:
        profiles = load_profiles(profile_dirs)
    except ProfileError as error:
        raise InventoryError(str(error)) from None
    if config_path is None:
        return build_inventory(default_config(), node_name, profiles, shares=shares)
    try:
        data = yamlio.safe_load(config_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as error:
        raise InventoryError(f"{source}: {error}") from None
    return build_inventory(parse_config(data, source), node_name, profiles, source=source, shares=shares)


def build_inventory(
    config: InventoryConfig,
    node_name: str,
    profiles: Mapping[str, GpuProfile],
    *,
    source: str = "<inventory>",
    shares: SharesSetting = SharesSetting(),
) -> Inventory:
    """GPUs get minors 0..n-1 in config order; see docs/inventory.md for UUIDs and PCI IDs."""
    if not node_name:
        raise InventoryError(f"{source}: node name must not be empty")
    gpus: list[PhysicalGpu] = []
    used_bus_ids: set[str] = set()
    per_profile: Counter[str] = Counter()  # GPUs of each profile so far: picks the topology slot
    for group_index, group in enumerate(config.gpus):
        where = f"gpus.{group_index}"
        profile = _group_profile(config, group, profiles, source, where)
        _check_mig_mode(group, profile, source, where)
        static = tuple(_static_placements(group, profile, source, where))
        group_shares = _group_shares(group, shares, source, where)
        for _ in range(group.count):
            index = len(gpus)
            ordinal = per_profile[profile.id]
            bus_id, root = _pci_location(profile, ordinal, used_bus_ids)
            per_profile[profile.id] += 1
            used_bus_ids.add(bus_id)
            gpus.append(
                PhysicalGpu(
                    index=index,
                    minor=index,
                    uuid=gpu_uuid(node_name, index),
                    pci_bus_id=bus_id,
                    pcie_root=root,
                    profile=profile,
                    mig_mode=group.mig,
                    static_mig=static,
                    module_id=profile.pci_topology[ordinal % len(profile.pci_topology)].module_id,
                    shares=group_shares,
                    attach=group.attach,
                )
            )
    devices: dict[str, AllocatableDevice] = {}
    for gpu in gpus:
        for device in _gpu_devices(node_name, gpu):
            devices[device.name] = device
    return Inventory(
        node_name=node_name,
        gpus=tuple(gpus),
        devices=devices,
        imex_clique_id=config.imex_clique_id or "",
        config=config,
    )


def _group_profile(
    config: InventoryConfig,
    group: GpuGroupConfig,
    profiles: Mapping[str, GpuProfile],
    source: str,
    where: str,
) -> GpuProfile:
    profile = profiles.get(group.profile)
    if profile is None:
        raise InventoryError(
            f"{source}: {where}.profile: unknown profile {group.profile!r}; known: {sorted(profiles)}"
        )
    node_wide: dict[str, Any] = {}
    if config.driver_version is not None:
        node_wide["driverVersion"] = config.driver_version
    if config.cuda_driver_version is not None:
        node_wide["cudaDriverVersion"] = config.cuda_driver_version
    try:
        profile = apply_overrides(profile, node_wide, source)
        if "id" in group.overrides:
            raise InventoryError(f"{source}: {where}.overrides.id: the profile id cannot be overridden")
        return apply_overrides(profile, group.overrides, source, prefix=f"{where}.overrides.")
    except ProfileError as error:
        raise InventoryError(str(error)) from None


def _group_shares(group: GpuGroupConfig, shares: SharesSetting, source: str, where: str) -> SharesMode | None:
    """The group's own `consumableShares`, else the node's setting."""
    if group.consumable_shares is None:
        return shares.default
    field = f"{source}: {where}.consumableShares"
    try:
        mode = parse_mode(group.consumable_shares, field)
    except SharesSettingError as error:
        raise InventoryError(str(error)) from None
    if mode is not None and not shares.gate:
        raise InventoryError(f"{field}: requires feature gate {GATE_CONSUMABLE_SHARES} to be enabled")
    return mode


def _check_mig_mode(group: GpuGroupConfig, profile: GpuProfile, source: str, where: str) -> None:
    if group.mig != "none" and not profile.mig_capable:
        raise InventoryError(
            f"{source}: {where}.mig: profile {profile.id!r} is not MIG-capable; use mig: none"
        )
    if group.mig_devices and group.mig != "static":
        raise InventoryError(f"{source}: {where}.migDevices: only allowed with mig: static")
    if group.mig == "dynamic":
        missing = profile.incomplete_mig_profiles()
        if missing:
            detail = "; ".join(f"{name}: {', '.join(values)}" for name, values in missing.items())
            raise InventoryError(
                f"{source}: {where}.mig: dynamic MIG needs every GI profile's values, and profile"
                f" {profile.id!r} lacks some (not in the reference data): {detail}."
                " Supply them with a profile override (docs/inventory.md)"
            )


def _static_placements(
    group: GpuGroupConfig, profile: GpuProfile, source: str, where: str
) -> list[MigPlacement]:
    """Validate migDevices against the profile's placement rules, as NVML would on creation."""
    placements: list[MigPlacement] = []
    owner_of_slice: dict[int, str] = {}
    counts: Counter[str] = Counter()
    for i, spec in enumerate(group.mig_devices):
        at = f"{source}: {where}.migDevices.{i}"
        mig = profile.mig_profile(spec.profile)
        if mig is None:
            names = ", ".join(p.name for p in profile.mig_profiles)
            raise InventoryError(
                f"{at}.profile: {spec.profile!r} is not a MIG profile of {profile.id}; valid: {names}"
            )
        placement = mig.placement_at(spec.start)
        if placement is None:
            starts = ", ".join(str(p.start) for p in mig.placements)
            raise InventoryError(
                f"{at}.start: {mig.name} cannot start at {spec.start}; valid starts: {starts}"
            )
        if not mig.complete:
            raise InventoryError(
                f"{at}.profile: {mig.name} on {profile.id} lacks {', '.join(mig.missing_values())}"
                " (not in the reference data); supply them with a profile override (docs/inventory.md)"
            )
        counts[mig.name] += 1
        if counts[mig.name] > mig.max_count:
            raise InventoryError(f"{at}: more than {mig.max_count} {mig.name} instance(s) on one GPU")
        label = f"{mig.name} at {spec.start}"
        for memory_slice in range(placement.start, placement.start + placement.size):
            if memory_slice in owner_of_slice:
                raise InventoryError(
                    f"{at}: {label} overlaps {owner_of_slice[memory_slice]} (memory slice {memory_slice})"
                )
            owner_of_slice[memory_slice] = label
        placements.append(MigPlacement(mig.name, mig.gi_profile_id, placement.start, placement.size))
    return placements


def _pci_location(profile: GpuProfile, ordinal: int, used: set[str]) -> tuple[str, str]:
    """The node's `ordinal`-th GPU of this profile takes slot ordinal mod n of the profile's
    topology; each further round of n GPUs, and any clash with a GPU of another profile, moves
    to the next PCI domain (bus ID and PCIe root alike)."""
    slots = profile.pci_topology
    slot = slots[ordinal % len(slots)]
    slot_domain = int(slot.bus_id[:4], 16)
    domain = slot_domain + ordinal // len(slots)
    while f"{domain:04x}{slot.bus_id[4:]}" in used:
        domain += 1
    root_domain = int(slot.pcie_root[3:7], 16) + domain - slot_domain
    if domain > 0xFFFF or root_domain > 0xFFFF:
        raise InventoryError(f"too many GPUs of profile {profile.id} for its PCI topology")
    bus_id = f"{domain:04x}{slot.bus_id[4:]}"
    return bus_id, f"pci{root_domain:04x}{slot.pcie_root[7:]}"


def mig_device_name(minor: int, placement: MigPlacement) -> str:
    """gpu-<minor>-mig-<profile>-<GI profile id>-<start>; profile lower-cased, dots removed, other
    characters outside [a-z0-9-] replaced by '-', outer '-' trimmed (NVIDIA's v25.12+ scheme)."""
    cleaned = re.sub(r"[^a-z0-9-]", "-", placement.profile.lower().replace(".", "")).strip("-")
    return f"gpu-{minor}-mig-{cleaned}-{placement.gi_profile_id}-{placement.start}"


def _gpu_devices(node_name: str, gpu: PhysicalGpu) -> list[AllocatableDevice]:
    profile = gpu.profile
    devices: list[AllocatableDevice] = []
    if gpu.offers_full_gpu:
        devices.append(_device(gpu, gpu.name, "gpu", gpu.uuid, profile.memory_mib * MIB))
    if gpu.mig_mode == "static":
        for placement in gpu.static_mig:
            mig = _mig_profile(profile, placement.profile)
            uuid = mig_uuid(node_name, gpu.index, placement)
            devices.append(
                _device(gpu, mig_device_name(gpu.minor, placement), "mig", uuid, _mib(mig), placement)
            )
    elif gpu.mig_mode == "dynamic":
        for mig in profile.mig_profiles:
            for p in mig.placements:
                placement = MigPlacement(mig.name, mig.gi_profile_id, p.start, p.size)
                name = mig_device_name(gpu.minor, placement)
                devices.append(_device(gpu, name, "mig", None, _mib(mig), placement, dynamic=True))
    return devices


def whole_gpu(gpu: PhysicalGpu) -> AllocatableDevice:
    """The GPU as one device, also where MIG mode hides it from the DRA view (NVIDIA's device plugin
    with MIG strategy `none` hands out MIG-enabled GPUs whole)."""
    return _device(gpu, gpu.name, "gpu", gpu.uuid, gpu.profile.memory_mib * MIB)


def _device(
    gpu: PhysicalGpu,
    name: str,
    kind: Literal["gpu", "mig"],
    uuid: str | None,
    memory_bytes: int,
    placement: MigPlacement | None = None,
    dynamic: bool = False,
) -> AllocatableDevice:
    return AllocatableDevice(
        name=name,
        kind=kind,
        minor=gpu.minor,
        index=gpu.index,
        gpu_uuid=gpu.uuid,
        uuid=uuid,
        pci_bus_id=gpu.pci_bus_id,
        product_name=gpu.profile.product_name,
        profile_name=gpu.profile.id,
        memory_bytes=memory_bytes,
        mig=placement,
        dynamic=dynamic,
        shares=gpu.shares,
    )


def _mig_profile(profile: GpuProfile, name: str) -> MigProfile:
    mig = profile.mig_profile(name)
    if mig is None:  # validated when the inventory was built
        raise KeyError(name)
    return mig


def _mib(mig: MigProfile) -> int:
    if mig.memory_mib is None:  # validated: only complete profiles become devices
        raise ValueError(f"{mig.name}: memoryMiB unknown")
    return mig.memory_mib * MIB
