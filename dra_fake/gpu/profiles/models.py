"""Pydantic models of a GPU profile: what NVML reports for one GPU model, plus its MIG tables.

YAML keys are camelCase (NVML/DRA spelling: `memoryMiB`, `giProfileID`); unknown keys are errors.
A value the reference data could not establish is written as `null` and is `None` here; code
that needs it (MIG device capacities) refuses to use the profile instead of guessing.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

# Architectures that need a GPU reset to toggle MIG mode: NVIDIA's driver offers dynamic MIG on
# them only with MIG mode already on, and then without the full GPU
# (docs/reference/gpu-profiles.md#dynamic-mig-devices).
MIG_TOGGLE_NEEDS_RESET = frozenset({"Ampere"})

# MigProfile fields that become MIG device capacities (all must be known to publish a device).
MIG_CAPACITY_FIELDS = (
    "memory_mib",
    "multiprocessors",
    "copy_engines",
    "decoders",
    "encoders",
    "jpeg_engines",
    "ofa_engines",
)

_VERSION_2 = re.compile(r"^\d+\.\d+$")
_VERSION_2_OR_3 = re.compile(r"^\d+\.\d+(\.\d+)?$")


def camel_alias(name: str) -> str:
    """snake_case field name -> camelCase key, keeping NVIDIA's `ID` and `MiB` spellings."""
    camel = to_camel(name)
    camel = re.sub(r"Mib(?=[A-Z]|$)", "MiB", camel)
    camel = re.sub(r"Mhz(?=[A-Z]|$)", "MHz", camel)
    return re.sub(r"Id(?=[A-Z]|$)", "ID", camel)


class StrictModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid", strict=True, frozen=True, alias_generator=camel_alias, populate_by_name=False
    )


NonNegInt = Annotated[int, Field(ge=0)]
PosInt = Annotated[int, Field(ge=1)]
PciId = Annotated[str, Field(pattern=r"^0x[0-9A-F]{8}$")]  # "0x<device><vendor>", NVML's upper case


class Placement(StrictModel):
    """A GPU-instance placement on the memory-slice axis (nvmlGpuInstancePlacement_t)."""

    start: NonNegInt
    size: PosInt


class MigProfile(StrictModel):
    """One GPU-instance profile as `nvidia-smi mig -lgip` / NVML report it."""

    name: Annotated[str, Field(pattern=r"^\d+g\.\d+gb(\+me)?$")]  # e.g. "1g.10gb", "1g.10gb+me"
    gi_profile_id: NonNegInt  # the ID column of -lgip (19, 20, 15, 14, 9, 5, 0)
    # The GPU_INSTANCE_PROFILE_* value NVML looks the profile up by (0, 7, 9, 1, 2, 3, 4); None =
    # not known: the profile is then left out of the device files' GI profile list.
    nvml_index: NonNegInt | None = None
    memory_mib: NonNegInt | None  # memorySizeMB; None = not in the reference
    multiprocessors: NonNegInt | None
    copy_engines: NonNegInt | None
    decoders: NonNegInt | None
    encoders: NonNegInt | None
    jpeg_engines: NonNegInt | None
    ofa_engines: NonNegInt | None
    max_count: PosInt
    placements: Annotated[list[Placement], Field(min_length=1)]

    def missing_values(self) -> list[str]:
        """camelCase names of the capacity values the data leaves unknown (null)."""
        return [camel_alias(n) for n in MIG_CAPACITY_FIELDS if getattr(self, n) is None]

    @property
    def complete(self) -> bool:
        return not self.missing_values()

    def placement_at(self, start: int) -> Placement | None:
        return next((p for p in self.placements if p.start == start), None)

    @property
    def compute_slices(self) -> int:
        """NVML's `sliceCount`: the `<G>` of `<G>g.<M>gb` (the 7g profile has 7 although it spans
        8 memory slices; docs/reference/gpu-profiles.md#placements-and-gi-profile-ids)."""
        return int(self.name.split("g.", 1)[0])


class PcieLink(StrictModel):
    max_generation: PosInt  # nvmlDeviceGetMaxPcieLinkGeneration (the link's: GPU and host)
    max_width: PosInt
    gpu_max_generation: PosInt | None = None  # nvmlDeviceGetGpuMaxPcieLinkGeneration (the GPU's own)


class Inforom(StrictModel):
    """nvmlDeviceGetInforomImageVersion and nvmlDeviceGetInforomVersion of the OEM, ECC and power
    objects; None = N/A on the board."""

    image: str | None = None
    oem: str | None = None
    ecc: str | None = None
    pwr: str | None = None


class PciSlot(StrictModel):
    """Where GPU i of a node sits on the PCI bus (see docs/inventory.md for the derivation)."""

    bus_id: Annotated[str, Field(pattern=r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$")]
    pcie_root: Annotated[str, Field(pattern=r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")]
    module_id: PosInt | None = None  # nvmlDeviceGetModuleId of the board in this slot; None = N/A


class Telemetry(StrictModel):
    """An idle GPU's readings and the model's limits (`nvidia-smi -q` of the card): the simulated
    metrics and nvidia-smi move between these (dra_fake.gpu.telemetry). The optional values are
    None where no source gives them: NVML then answers NOT_SUPPORTED, nvidia-smi N/A."""

    power_limit_w: PosInt  # default power limit (also the enforced one)
    power_min_limit_w: PosInt | None = None  # nvmlDeviceGetPowerManagementLimitConstraints
    power_max_limit_w: PosInt | None = None
    power_idle_w: Annotated[float, Field(gt=0)]  # power draw at idle
    temperature_idle_c: PosInt
    memory_temperature_idle_c: PosInt | None  # None: NVML reports N/A (GDDR boards)
    sm_clock_idle_mhz: PosInt  # graphics clock too: equal on every capture
    sm_clock_max_mhz: PosInt
    memory_clock_mhz: PosInt  # current memory clock, idle or busy
    memory_clock_max_mhz: PosInt | None = None
    video_clock_idle_mhz: PosInt | None = None
    video_clock_max_mhz: PosInt | None = None
    # default applications clocks (nvmlDeviceGetDefaultApplicationsClock), graphics and memory
    app_clock_graphics_mhz: PosInt | None = None
    app_clock_memory_mhz: PosInt | None = None
    # nvmlDeviceGetTemperatureThreshold: SHUTDOWN, SLOWDOWN, GPU_MAX, MEM_MAX (absolute degrees C)
    shutdown_temperature_c: PosInt | None = None
    slowdown_temperature_c: PosInt | None = None
    gpu_max_temperature_c: PosInt | None = None
    memory_max_temperature_c: PosInt | None = None
    fb_reserved_mib: NonNegInt
    nvlink: bool

    @model_validator(mode="after")
    def _ordered(self) -> Telemetry:
        if self.power_idle_w >= self.power_limit_w:
            raise ValueError("powerIdleW: must be below powerLimitW")
        if self.sm_clock_idle_mhz > self.sm_clock_max_mhz:
            raise ValueError("smClockIdleMHz: must not exceed smClockMaxMHz")
        for low, high in (
            ("power_min_limit_w", "power_limit_w"),
            ("power_limit_w", "power_max_limit_w"),
            ("memory_clock_mhz", "memory_clock_max_mhz"),
            ("video_clock_idle_mhz", "video_clock_max_mhz"),
        ):
            below, above = getattr(self, low), getattr(self, high)
            if below is not None and above is not None and below > above:
                raise ValueError(f"{camel_alias(low)}: must not exceed {camel_alias(high)}")
        return self


class GpuProfile(StrictModel):
    """A GPU model: NVML-reported identity and sizes, MIG tables and PCI layout."""

    id: Annotated[str, Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")]
    product_name: Annotated[str, Field(min_length=1, max_length=64)]  # nvmlDeviceGetName
    brand: Annotated[str, Field(min_length=1, max_length=64)]  # go-nvlib brand string, e.g. "Nvidia"
    architecture: Annotated[str, Field(min_length=1, max_length=64)]  # e.g. "Hopper"
    cuda_compute_capability: str  # "<major>.<minor>"
    memory_mib: PosInt  # NVML memory total (fb_memory_usage/total)
    multiprocessors: PosInt
    copy_engines: NonNegInt | None  # CUDA asyncEngineCount; None = not in the reference
    decoders: NonNegInt | None
    encoders: NonNegInt | None
    jpeg_engines: NonNegInt | None
    ofa_engines: NonNegInt | None
    pcie: PcieLink
    pci_device_id: PciId  # e.g. 0x233010DE
    pci_subsystem_id: PciId | None = None  # e.g. 0x18BF10DE
    driver_version: str  # NVML driver string, e.g. "580.105.08"
    cuda_driver_version: str  # "<major>.<minor>", e.g. "13.0"
    addressing_mode: Literal["HMM", "ATS", "None"] | None  # None: NVML reports nothing -> omitted
    # Board identity (nvidia-smi -q); None = not in any capture of the model -> N/A.
    serial_prefix: Annotated[str, Field(pattern=r"^\d{1,12}$")] | None = None  # of the 13-digit serial
    vbios_version: Annotated[str, Field(min_length=1, max_length=32)] | None = None
    board_part_number: Annotated[str, Field(min_length=1, max_length=32)] | None = None
    gpu_part_number: Annotated[str, Field(min_length=1, max_length=32)] | None = None
    inforom: Inforom = Field(default_factory=Inforom)
    bar1_mib: PosInt | None = None  # BAR1 total
    memory_bus_width: PosInt | None = None  # bits (nvmlDeviceGetMemoryBusWidth)
    persistence_mode: bool | None = None  # as the captured node ran it
    ecc_mode: bool | None = None  # ECC enabled (current = default)
    telemetry: Telemetry
    mig_memory_slices: PosInt | None = None  # required when migProfiles is not empty
    mig_profiles: list[MigProfile] = Field(default_factory=list)
    pci_topology: Annotated[list[PciSlot], Field(min_length=1)]

    @field_validator("cuda_compute_capability", "cuda_driver_version")
    @classmethod
    def _major_minor(cls, value: str) -> str:
        if not _VERSION_2.match(value):
            raise ValueError(f"expected '<major>.<minor>' (quote it in YAML), got {value!r}")
        return value

    @field_validator("driver_version")
    @classmethod
    def _driver_version(cls, value: str) -> str:
        if not _VERSION_2_OR_3.match(value):
            raise ValueError(f"expected e.g. '580.105.08' (quote it in YAML), got {value!r}")
        return value

    @model_validator(mode="after")
    def _mig_tables_consistent(self) -> GpuProfile:
        # Raised from a model validator, so the message carries the field path itself.
        if self.mig_profiles and self.mig_memory_slices is None:
            raise ValueError("migMemorySlices: required when migProfiles is set")
        _require_unique("migProfiles", "name", [p.name for p in self.mig_profiles])
        _require_unique("migProfiles", "giProfileID", [p.gi_profile_id for p in self.mig_profiles])
        _require_unique("pciTopology", "busID", [s.bus_id for s in self.pci_topology])
        slices = self.mig_memory_slices or 0
        for i, profile in enumerate(self.mig_profiles):
            starts = [p.start for p in profile.placements]
            if len(set(starts)) != len(starts):
                raise ValueError(f"migProfiles.{i}.placements: duplicate start in {starts}")
            for j, placement in enumerate(profile.placements):
                if placement.start + placement.size > slices:
                    raise ValueError(
                        f"migProfiles.{i}.placements.{j}: start {placement.start} + size {placement.size}"
                        f" exceeds migMemorySlices {slices}"
                    )
        return self

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def max_mig_instances(self) -> int:
        return max((p.max_count for p in self.mig_profiles), default=0)

    @property
    def mig_toggle_needs_reset(self) -> bool:
        return self.architecture in MIG_TOGGLE_NEEDS_RESET

    def mig_profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    def incomplete_mig_profiles(self) -> dict[str, list[str]]:
        """MIG profile name -> the capacity values the data leaves unknown."""
        return {p.name: p.missing_values() for p in self.mig_profiles if not p.complete}


def _require_unique(field: str, key: str, values: list[str] | list[int]) -> None:
    seen: set[str | int] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"{field}: duplicate {key} {value!r}")
        seen.add(value)
