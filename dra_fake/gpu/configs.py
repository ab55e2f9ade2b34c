"""Opaque device configs of `gpu.nvidia.com`: strict decoding, defaults, validation and precedence.

Mirrors NVIDIA's `resource.nvidia.com/v1beta1` kinds `GpuConfig`, `MigDeviceConfig` and
`VfioDeviceConfig` (see docs/prepare.md for the rules). Everything here is pure: dicts in, frozen
dataclasses or ConfigError out. Error strings follow NVIDIA's wording.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Protocol

from dra_fake.core import featuregates, opaque
from dra_fake.core.opaque import select_config

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


# --- Strict decoding -------------------------------------------------------------------------


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _decode_error(message: str) -> ConfigError:
    return ConfigError(f"error decoding config parameters: {message}")


class _StrictDecoder:
    """Walks one parameters object; collects every unknown field (full dotted path)."""

    def __init__(self) -> None:
        self.unknown: list[str] = []

    def obj(self, value: object, path: str, allowed: Sequence[str]) -> dict[str, object]:
        if not isinstance(value, dict):
            raise self._type_error(path, "object", value)
        for key in value:
            if key not in allowed:
                self.unknown.append(f"{path}.{key}" if path else str(key))
        return value

    def string(self, obj: Mapping[str, object], key: str, path: str) -> str | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._type_error(_join(path, key), "string", value)
        return value

    def integer(self, obj: Mapping[str, object], key: str, path: str) -> int | None:
        value = obj.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._type_error(_join(path, key), "integer", value)
        return value

    def boolean(self, obj: Mapping[str, object], key: str, path: str) -> bool | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, bool):
            raise self._type_error(_join(path, key), "boolean", value)
        return value

    def quantity(self, value: object, path: str) -> Quantity:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise self._type_error(path, "quantity (string or number)", value)
        try:
            return Quantity.parse(value)
        except ValueError as exc:
            raise _decode_error(f'invalid value for field "{path}": {exc}') from None

    def finish(self) -> None:
        if self.unknown:
            fields = ", ".join(f'unknown field "{name}"' for name in self.unknown)
            raise _decode_error(f"strict decoding error: {fields}")

    @staticmethod
    def _type_error(path: str, expected: str, value: object) -> ConfigError:
        where = f'field "{path}"' if path else "config parameters"
        return _decode_error(f"invalid type for {where}: expected {expected}, got {_json_type(value)}")


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _decode_mps(dec: _StrictDecoder, value: object, path: str) -> MpsConfig:
    obj = dec.obj(
        value,
        path,
        (
            "defaultActiveThreadPercentage",
            "defaultPinnedDeviceMemoryLimit",
            "defaultPerDevicePinnedMemoryLimit",
        ),
    )
    default_limit = obj.get("defaultPinnedDeviceMemoryLimit")
    per_device_raw = obj.get("defaultPerDevicePinnedMemoryLimit")
    per_device: dict[str, Quantity] | None = None
    if per_device_raw is not None:
        per_path = _join(path, "defaultPerDevicePinnedMemoryLimit")
        if not isinstance(per_device_raw, dict):
            raise dec._type_error(per_path, "object", per_device_raw)
        per_device = {str(k): dec.quantity(v, f"{per_path}.{k}") for k, v in per_device_raw.items()}
    return MpsConfig(
        default_active_thread_percentage=dec.integer(obj, "defaultActiveThreadPercentage", path),
        default_pinned_device_memory_limit=(
            None
            if default_limit is None
            else dec.quantity(default_limit, _join(path, "defaultPinnedDeviceMemoryLimit"))
        ),
        default_per_device_pinned_memory_limit=per_device,
    )


def _decode_gpu_sharing(dec: _StrictDecoder, value: object) -> GpuSharing:
    obj = dec.obj(value, "sharing", ("strategy", "timeSlicingConfig", "mpsConfig"))
    tsc_raw = obj.get("timeSlicingConfig")
    tsc = None
    if tsc_raw is not None:
        tsc_obj = dec.obj(tsc_raw, "sharing.timeSlicingConfig", ("interval",))
        tsc = TimeSlicingConfig(interval=dec.string(tsc_obj, "interval", "sharing.timeSlicingConfig"))
    mps_raw = obj.get("mpsConfig")
    return GpuSharing(
        strategy=dec.string(obj, "strategy", "sharing") or "",
        time_slicing_config=tsc,
        mps_config=None if mps_raw is None else _decode_mps(dec, mps_raw, "sharing.mpsConfig"),
    )


def _decode_mig_sharing(dec: _StrictDecoder, value: object) -> MigDeviceSharing:
    # No timeSlicingConfig on MIG devices: it is an unknown field here.
    obj = dec.obj(value, "sharing", ("strategy", "mpsConfig"))
    mps_raw = obj.get("mpsConfig")
    return MigDeviceSharing(
        strategy=dec.string(obj, "strategy", "sharing") or "",
        mps_config=None if mps_raw is None else _decode_mps(dec, mps_raw, "sharing.mpsConfig"),
    )


def decode_config(parameters: object) -> DeviceConfig:
    """Strictly decode the `opaque.parameters` of one config entry.

    Rejects (ConfigError, prefixed `error decoding config parameters: `) a missing or unknown
    apiVersion/kind, a wrongly typed value, and any unknown field at any depth, naming its path.
    """
    dec = _StrictDecoder()
    if not isinstance(parameters, dict):
        raise _decode_error(
            f"invalid type for config parameters: expected object, got {_json_type(parameters)}"
        )
    compact = json.dumps(parameters, separators=(",", ":"), sort_keys=True)
    api_version = dec.string(parameters, "apiVersion", "")
    kind = dec.string(parameters, "kind", "")
    if not kind:
        raise _decode_error(f"Object 'Kind' is missing in '{compact}'")
    if not api_version:
        raise _decode_error(f"Object 'apiVersion' is missing in '{compact}'")
    if api_version != API_VERSION or kind not in KIND_DEVICE_TYPE:
        raise _decode_error(
            f'no kind "{kind}" is registered for version "{api_version}"; supported: '
            f"{API_VERSION} {KIND_GPU_CONFIG}, {KIND_MIG_DEVICE_CONFIG}, {KIND_VFIO_DEVICE_CONFIG}"
        )
    config: DeviceConfig
    if kind == KIND_GPU_CONFIG:
        dec.obj(parameters, "", ("apiVersion", "kind", "sharing"))
        sharing = parameters.get("sharing")
        config = GpuConfig(None if sharing is None else _decode_gpu_sharing(dec, sharing))
    elif kind == KIND_MIG_DEVICE_CONFIG:
        dec.obj(parameters, "", ("apiVersion", "kind", "sharing"))
        sharing = parameters.get("sharing")
        config = MigDeviceConfig(None if sharing is None else _decode_mig_sharing(dec, sharing))
    else:
        dec.obj(parameters, "", ("apiVersion", "kind", "iommu"))
        iommu_raw = parameters.get("iommu")
        iommu = None
        if iommu_raw is not None:
            obj = dec.obj(iommu_raw, "iommu", ("backendPolicy", "enableAPIDevice"))
            iommu = IommuConfig(
                backend_policy=dec.string(obj, "backendPolicy", "iommu"),
                enable_api_device=dec.boolean(obj, "enableAPIDevice", "iommu"),
            )
        config = VfioDeviceConfig(iommu)
    dec.finish()
    return config


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


# --- Claim configs: precedence and application -----------------------------------------------


ClaimConfig = opaque.ClaimConfig[DeviceConfig]


def decode_claim_configs(driver: str, entries: Sequence[Mapping[str, object]]) -> list[ClaimConfig]:
    """This driver's configs of `status.allocation.devices.config[]`, in precedence order."""
    return opaque.decode_claim_configs(driver, entries, decode_config, ConfigError)


@dataclass(frozen=True)
class ResultDevice:
    """An allocation result of this driver, with what config application needs to know."""

    request: str  # as in the result, may be `main/sub`
    device: str
    device_type: str  # "gpu" | "mig"
    uuid: str


@dataclass(frozen=True)
class MpsSettings:
    control_daemon_id: str
    uuids: tuple[str, ...]  # the devices sharing this MPS daemon (one config group)
    active_thread_percentage: int | None = None
    pinned_memory_limits: tuple[tuple[str, str], ...] = ()  # (uuid, "<MiB>M")


@dataclass(frozen=True)
class AppliedSharing:
    """What a config means for one device. strategy None = no sharing settings."""

    strategy: str | None = None
    time_slice_interval: str | None = None  # full GPUs with TimeSlicing only
    mps: MpsSettings | None = None


NO_SHARING = AppliedSharing()


def mps_control_daemon_id(claim_uid: str, uuids: Sequence[str]) -> str:
    digest = hashlib.sha256(",".join(uuids).encode()).hexdigest()[:5]
    return f"mps-control-daemon-{claim_uid}-{digest}"


def _applied(
    config: DeviceConfig, group: Sequence[ResultDevice], gates: GateLookup, claim_uid: str
) -> AppliedSharing:
    sharing = config.sharing if isinstance(config, GpuConfig | MigDeviceConfig) else None
    if sharing is None:
        return NO_SHARING
    if sharing.strategy == STRATEGY_TIME_SLICING:
        interval = None
        if isinstance(sharing, GpuSharing):  # inert on MIG devices
            tsc = time_slicing_config(sharing) or TimeSlicingConfig()
            interval = tsc.interval or INTERVAL_DEFAULT
        return AppliedSharing(STRATEGY_TIME_SLICING, time_slice_interval=interval)
    if gates.enabled(GATE_DYNAMIC_MIG):
        raise ConfigError("MPS is not yet supported when using featureGates.DynamicMIG=true")
    mps = mps_config(sharing) or MpsConfig()
    uuids = tuple(dict.fromkeys(r.uuid for r in group))
    try:
        limits = pinned_memory_limits(mps, uuids)
    except ConfigError as exc:
        raise ConfigError(f"error validating GPU config: {exc}") from None
    return AppliedSharing(
        STRATEGY_MPS,
        mps=MpsSettings(
            control_daemon_id=mps_control_daemon_id(claim_uid, uuids),
            uuids=uuids,
            active_thread_percentage=mps.default_active_thread_percentage,
            pinned_memory_limits=tuple(limits.items()),
        ),
    )


@dataclass(frozen=True)
class ResolvedConfig:
    """A result's config, normalized and validated, and what it means for the device."""

    config: DeviceConfig
    sharing: AppliedSharing


def fingerprint(config: DeviceConfig) -> str:
    """A normalized config as one string: two shares of a device must have equal ones (NVIDIA
    compares them deep-equal; docs/reference/nvidia-gpu-driver.md#103-prepare-and-unprepare)."""

    def plain(value: object) -> object:
        if isinstance(value, Quantity):
            return value.text
        if isinstance(value, Mapping):
            return {str(k): plain(v) for k, v in value.items()}
        if hasattr(value, "__dataclass_fields__"):
            return {name: plain(getattr(value, name)) for name in value.__dataclass_fields__}
        return value

    return json.dumps(plain(config), sort_keys=True, separators=(",", ":"))


def apply_configs(
    driver: str,
    entries: Sequence[Mapping[str, object]],
    results: Sequence[ResultDevice],
    gates: GateLookup,
    claim_uid: str,
) -> list[AppliedSharing]:
    """Decide the sharing settings of every result (same order as `results`)."""
    return [r.sharing for r in resolve_configs(driver, entries, results, gates, claim_uid)]


def resolve_configs(
    driver: str,
    entries: Sequence[Mapping[str, object]],
    results: Sequence[ResultDevice],
    gates: GateLookup,
    claim_uid: str,
) -> list[ResolvedConfig]:
    """Each result's normalized config and sharing settings (same order as `results`).

    Each result gets the last matching config (class configs before claim configs), or the
    default for its device type; the config kind must fit the device type. Results with the same
    config form one group (one MPS daemon, device indexes count within the group).
    """
    try:
        configs = decode_claim_configs(driver, entries)
    except (
        ConfigError
    ) as exc:  # NVIDIA's wrapping (docs/reference/nvidia-gpu-driver.md#45-how-errors-reach-the-kubelet)
        raise ConfigError(f"error getting opaque device configs: {exc}") from None
    groups: dict[object, tuple[DeviceConfig, list[int]]] = {}
    for i, result in enumerate(results):
        chosen = select_config(configs, result.request)
        if chosen is None:
            key: object = ("default", result.device_type)
            config = default_config(result.device_type, gates)
        else:
            if KIND_DEVICE_TYPE[chosen.config.kind] != result.device_type:
                raise ConfigError(
                    f'cannot apply {chosen.config.kind} to device "{result.device}" of type '
                    f'"{result.device_type}" (request: {result.request})'
                )
            key, config = chosen.position, chosen.config
        groups.setdefault(key, (config, []))[1].append(i)

    resolved: list[ResolvedConfig | None] = [None] * len(results)
    for config, indexes in groups.values():
        normalized = normalize(config, gates)
        try:
            validate(normalized, gates)
        except ConfigError as exc:
            raise ConfigError(f"error validating GPU config: {exc}") from None
        item = ResolvedConfig(
            normalized, _applied(normalized, [results[i] for i in indexes], gates, claim_uid)
        )
        for i in indexes:
            resolved[i] = item
    return [r for r in resolved if r is not None]
