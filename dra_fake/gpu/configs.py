"""Opaque device configs of `gpu.nvidia.com`: strict decoding, defaults, validation and precedence.

Mirrors NVIDIA's `resource.nvidia.com/v1beta1` kinds `GpuConfig`, `MigDeviceConfig` and
`VfioDeviceConfig` (see docs/prepare.md for the rules). Everything here is pure: dicts in, frozen
dataclasses or ConfigError out. Error strings follow NVIDIA's wording.

This module holds the kinds, their defaults and validation; the strict decoding of a claim's
entries is dra_fake.gpu.configdecode, and which config applies to which device, with what it
means for the device (sharing), dra_fake.gpu.configresolve.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Protocol

from dra_fake.core import featuregates, opaque

API_VERSION = "resource.nvidia.com/v1beta1"
KIND_GPU_CONFIG = "GpuConfig"
KIND_MIG_DEVICE_CONFIG = "MigDeviceConfig"
KIND_VFIO_DEVICE_CONFIG = "VfioDeviceConfig"

STRATEGY_TIME_SLICING = "TimeSlicing"
STRATEGY_MPS = "MPS"
INTERVAL_DEFAULT = "Default"
TIME_SLICE_INTERVALS = ("Default", "Short", "Medium", "Long")
IOMMU_BACKEND_POLICIES = ("LegacyOnly", "PreferIommuFD")

GATE_TIME_SLICING_SETTINGS = featuregates.TIME_SLICING_SETTINGS
GATE_MPS_SUPPORT = featuregates.MPS_SUPPORT
GATE_DYNAMIC_MIG = featuregates.DYNAMIC_MIG

MIB = 1024 * 1024

# The device type each config kind applies to (the `type` attribute of the device).
KIND_DEVICE_TYPE = {KIND_GPU_CONFIG: "gpu", KIND_MIG_DEVICE_CONFIG: "mig", KIND_VFIO_DEVICE_CONFIG: "vfio"}


class ConfigError(opaque.OpaqueConfigError):
    """A config cannot be used; str(error) is the message for the kubelet."""


class GateLookup(Protocol):
    def enabled(self, name: str) -> bool: ...


@dataclass(frozen=True)
class FeatureGates:
    """The driver's feature gates; all alpha gates default to off, as in NVIDIA's driver."""

    enabled_gates: frozenset[str] = frozenset()

    def enabled(self, name: str) -> bool:
        return name in self.enabled_gates

    @classmethod
    def of(cls, *names: str) -> FeatureGates:
        return cls(frozenset(names))


# --- Kubernetes quantities -------------------------------------------------------------------

_QUANTITY_FORMAT_ERROR = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_QUANTITY_RE = re.compile(
    r"^([+-]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?$"
)
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}


# Bounds that keep parsing cheap whatever a claim says (a user controls these strings; without
# them "1e10000000" costs seconds of CPU under the node lock). Kubernetes parses any int32
# exponent, but a quantity's value is read as an int64 (resource.Quantity.Value()), and a device
# memory limit beyond that is meaningless: larger values are refused, naming the field.
QUANTITY_MAX_CHARS = 64
QUANTITY_MAX_EXPONENT = 40
QUANTITY_MAX_VALUE = 2**63 - 1


@dataclass(frozen=True)
class Quantity:
    """A Kubernetes resource.Quantity: `text` as the user wrote it, `value` exact."""

    text: str
    value: Fraction

    @classmethod
    def parse(cls, raw: str | int | float) -> Quantity:
        text = raw if isinstance(raw, str) else json.dumps(raw)
        if len(text) > QUANTITY_MAX_CHARS:
            raise ValueError(f"quantity is longer than {QUANTITY_MAX_CHARS} characters")
        match = _QUANTITY_RE.match(text.strip())
        if match is None:
            raise ValueError(_QUANTITY_FORMAT_ERROR)
        sign, number, suffix = match.groups()
        value = Fraction(number)
        if suffix in _BINARY:
            value *= _BINARY[suffix]
        elif suffix in _DECIMAL:
            value *= _DECIMAL[suffix]
        elif suffix:
            exponent = int(suffix[1:])
            if abs(exponent) > QUANTITY_MAX_EXPONENT:
                limit = QUANTITY_MAX_EXPONENT
                raise ValueError(f"quantity {text} is out of range (exponent beyond ±{limit})")
            value *= Fraction(10) ** exponent
        if value > QUANTITY_MAX_VALUE:
            raise ValueError(f"quantity {text} is out of range (larger than {QUANTITY_MAX_VALUE})")
        return cls(text, -value if sign == "-" else value)

    def mebibytes(self) -> int:
        """Whole MiB, as the limits handed to MPS (`<MiB>M`)."""
        return int(self.value // MIB)

    def __str__(self) -> str:
        return self.text


# --- Config types ------------------------------------------------------------------------------


@dataclass(frozen=True)
class TimeSlicingConfig:
    interval: str | None = None


@dataclass(frozen=True)
class MpsConfig:
    default_active_thread_percentage: int | None = None
    default_pinned_device_memory_limit: Quantity | None = None
    default_per_device_pinned_memory_limit: Mapping[str, Quantity] | None = None


@dataclass(frozen=True)
class GpuSharing:
    strategy: str
    time_slicing_config: TimeSlicingConfig | None = None
    mps_config: MpsConfig | None = None


@dataclass(frozen=True)
class MigDeviceSharing:
    strategy: str
    mps_config: MpsConfig | None = None


@dataclass(frozen=True)
class GpuConfig:
    sharing: GpuSharing | None = None
    kind: str = field(default=KIND_GPU_CONFIG, init=False)


@dataclass(frozen=True)
class MigDeviceConfig:
    sharing: MigDeviceSharing | None = None
    kind: str = field(default=KIND_MIG_DEVICE_CONFIG, init=False)


@dataclass(frozen=True)
class IommuConfig:
    backend_policy: str | None = None
    enable_api_device: bool | None = None


@dataclass(frozen=True)
class VfioDeviceConfig:
    iommu: IommuConfig | None = None
    kind: str = field(default=KIND_VFIO_DEVICE_CONFIG, init=False)


DeviceConfig = GpuConfig | MigDeviceConfig | VfioDeviceConfig


# --- Defaults (Normalize) --------------------------------------------------------------------


def default_config(device_type: str, gates: GateLookup) -> DeviceConfig:
    """The config of a device no config entry applies to (already normalized)."""
    if device_type == "mig":
        return normalize(MigDeviceConfig(), gates)
    if device_type == "vfio":
        return normalize(VfioDeviceConfig(), gates)
    return normalize(GpuConfig(), gates)


def normalize(config: DeviceConfig, gates: GateLookup) -> DeviceConfig:
    """Fill in NVIDIA's defaults. TimeSlicingSettings on: no sharing = TimeSlicing/Default;
    MPSSupport on and strategy MPS: no mpsConfig = {}; both off: no sharing is added."""
    ts_gate = gates.enabled(GATE_TIME_SLICING_SETTINGS)
    mps_gate = gates.enabled(GATE_MPS_SUPPORT)
    if isinstance(config, GpuConfig):
        gpu_sharing = config.sharing
        if gpu_sharing is None:
            if not ts_gate:
                return config
            gpu_sharing = GpuSharing(STRATEGY_TIME_SLICING)
        if gpu_sharing.strategy == STRATEGY_TIME_SLICING:
            tsc = gpu_sharing.time_slicing_config or TimeSlicingConfig()
            if tsc.interval is None:
                tsc = TimeSlicingConfig(INTERVAL_DEFAULT)
            gpu_sharing = replace(gpu_sharing, time_slicing_config=tsc)
        if gpu_sharing.strategy == STRATEGY_MPS and mps_gate and gpu_sharing.mps_config is None:
            gpu_sharing = replace(gpu_sharing, mps_config=MpsConfig())
        return GpuConfig(gpu_sharing)
    if isinstance(config, MigDeviceConfig):
        mig_sharing = config.sharing
        if mig_sharing is None:
            if not ts_gate:
                return config
            mig_sharing = MigDeviceSharing(STRATEGY_TIME_SLICING)
        if mig_sharing.strategy == STRATEGY_MPS and mps_gate and mig_sharing.mps_config is None:
            mig_sharing = replace(mig_sharing, mps_config=MpsConfig())
        return MigDeviceConfig(mig_sharing)
    iommu = config.iommu or IommuConfig()
    return VfioDeviceConfig(
        IommuConfig(
            backend_policy=iommu.backend_policy or "LegacyOnly",
            enable_api_device=bool(iommu.enable_api_device),
        )
    )


# --- Validation ------------------------------------------------------------------------------


def _gate_error(strategy: str, gate: str) -> ConfigError:
    return ConfigError(
        f'"{strategy}" is selected as the GPU sharing strategy, but the "{gate}" feature gate is not enabled'
    )


def _unknown_strategy(strategy: str) -> ConfigError:
    return ConfigError(
        f"unknown GPU sharing strategy: {strategy}, supported GPU sharing strategies: "
        f"{STRATEGY_TIME_SLICING}, {STRATEGY_MPS}"
    )


def validate_time_slicing(config: TimeSlicingConfig) -> None:
    interval = config.interval if config.interval is not None else INTERVAL_DEFAULT
    if interval not in TIME_SLICE_INTERVALS:
        raise ConfigError(
            f"unknown time-slice interval: {interval}, supported time-slice intervals: "
            + ", ".join(TIME_SLICE_INTERVALS)
        )


def validate_mps(config: MpsConfig) -> None:
    pct = config.default_active_thread_percentage
    if pct is not None and pct < 0:
        raise ConfigError("active thread percentage must not be negative")
    if pct is not None and pct > 100:
        raise ConfigError("active thread percentage must not be greater than 100")
    default = config.default_pinned_device_memory_limit
    if default is not None and default.value < MIB:
        raise ConfigError(f"invalid limit: default value set too low: {default}")
    for key, limit in sorted((config.default_per_device_pinned_memory_limit or {}).items()):
        if limit.value < MIB:
            raise ConfigError(f"invalid limit: value set too low: {key}: {limit}")


def _validate_strategy(strategy: str, gates: GateLookup) -> None:
    if strategy == STRATEGY_TIME_SLICING:
        if not gates.enabled(GATE_TIME_SLICING_SETTINGS):
            raise _gate_error(STRATEGY_TIME_SLICING, GATE_TIME_SLICING_SETTINGS)
    elif strategy == STRATEGY_MPS:
        if not gates.enabled(GATE_MPS_SUPPORT):
            raise _gate_error(STRATEGY_MPS, GATE_MPS_SUPPORT)
    else:
        raise _unknown_strategy(strategy)


def _validate_gpu_sharing(sharing: GpuSharing, gates: GateLookup) -> None:
    _validate_strategy(sharing.strategy, gates)
    if sharing.strategy == STRATEGY_TIME_SLICING:
        if sharing.mps_config is not None:
            raise ConfigError("cannot use MpsConfig with the 'TimeSlicing' strategy")
        validate_time_slicing(sharing.time_slicing_config or TimeSlicingConfig())
    else:
        if sharing.time_slicing_config is not None:
            raise ConfigError("cannot use TimeSlicingConfig with the 'MPS' strategy")
        validate_mps(sharing.mps_config or MpsConfig())


def _validate_mig_sharing(sharing: MigDeviceSharing, gates: GateLookup) -> None:
    _validate_strategy(sharing.strategy, gates)
    if sharing.strategy == STRATEGY_TIME_SLICING:
        if sharing.mps_config is not None:
            raise ConfigError("cannot use MpsConfig with the 'TimeSlicing' strategy")
    else:
        validate_mps(sharing.mps_config or MpsConfig())


def validate(config: DeviceConfig, gates: GateLookup) -> None:
    """Raise ConfigError with NVIDIA's message if a (normalized) config is invalid."""
    # NVIDIA returns the sharing checks' messages as they are; its `invalid GPU sharing settings`
    # prefix belongs to a fall-through no valid config reaches
    # (docs/reference/nvidia-gpu-driver.md#44-validation-messages).
    if isinstance(config, GpuConfig):
        if config.sharing is not None:
            _validate_gpu_sharing(config.sharing, gates)
    elif isinstance(config, MigDeviceConfig):
        if config.sharing is not None:
            _validate_mig_sharing(config.sharing, gates)
    else:
        policy = (config.iommu or IommuConfig()).backend_policy or "LegacyOnly"
        if policy not in IOMMU_BACKEND_POLICIES:
            raise ConfigError(
                f"unknown IOMMU backend policy: {policy}, supported IOMMU backend policies: "
                + ", ".join(IOMMU_BACKEND_POLICIES)
            )


def time_slicing_config(sharing: GpuSharing) -> TimeSlicingConfig | None:
    """The time-slicing settings of a sharing block whose strategy must be TimeSlicing."""
    if sharing.strategy != STRATEGY_TIME_SLICING:
        raise ConfigError(f"strategy is not set to '{STRATEGY_TIME_SLICING}'")
    if sharing.mps_config is not None:
        raise ConfigError("cannot use MpsConfig with the 'TimeSlicing' strategy")
    return sharing.time_slicing_config


def mps_config(sharing: GpuSharing | MigDeviceSharing) -> MpsConfig | None:
    """The MPS settings of a sharing block whose strategy must be MPS."""
    if sharing.strategy != STRATEGY_MPS:
        raise ConfigError(f"strategy is not set to '{STRATEGY_MPS}'")
    if isinstance(sharing, GpuSharing) and sharing.time_slicing_config is not None:
        raise ConfigError("cannot use TimeSlicingConfig with the 'MPS' strategy")
    return sharing.mps_config


def resolve_device_key(key: str, uuids: Sequence[str]) -> str:
    """A per-device MPS limit key: a UUID of the group's devices, or an index into them."""
    if key in uuids:
        return key
    if re.fullmatch(r"[+-]?[0-9]+", key) is None:
        raise ConfigError(f"invalid device: unable to parse key as an integer: {key}")
    index = int(key)
    if index < 0 or index >= len(uuids):
        raise ConfigError(f"invalid device: invalid device index: {index}")
    return uuids[index]


def pinned_memory_limits(config: MpsConfig, uuids: Sequence[str]) -> dict[str, str]:
    """UUID -> `<MiB>M`: the default limit for every device, then per-device overrides."""
    limits: dict[str, Quantity] = {}
    if config.default_pinned_device_memory_limit is not None:
        limits = dict.fromkeys(uuids, config.default_pinned_device_memory_limit)
    for key, limit in (config.default_per_device_pinned_memory_limit or {}).items():
        limits[resolve_device_key(key, uuids)] = limit
    return {uuid: f"{limits[uuid].mebibytes()}M" for uuid in uuids if uuid in limits}
