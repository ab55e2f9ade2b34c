"""Strict decoding of `gpu.nvidia.com`'s opaque device configs (dra_fake.gpu.configs: the
kinds): a missing or unknown apiVersion/kind, a wrongly typed value or an unknown field at any
depth is a ConfigError naming its path, in NVIDIA's wording."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from dra_fake.core import opaque
from dra_fake.gpu.configs import (
    API_VERSION,
    KIND_DEVICE_TYPE,
    KIND_GPU_CONFIG,
    KIND_MIG_DEVICE_CONFIG,
    KIND_VFIO_DEVICE_CONFIG,
    ConfigError,
    DeviceConfig,
    GpuConfig,
    GpuSharing,
    IommuConfig,
    MigDeviceConfig,
    MigDeviceSharing,
    MpsConfig,
    Quantity,
    TimeSlicingConfig,
    VfioDeviceConfig,
)

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


ClaimConfig = opaque.ClaimConfig[DeviceConfig]


def decode_claim_configs(driver: str, entries: Sequence[Mapping[str, object]]) -> list[ClaimConfig]:
    """This driver's configs of `status.allocation.devices.config[]`, in precedence order."""
    return opaque.decode_claim_configs(driver, entries, decode_config, ConfigError)
