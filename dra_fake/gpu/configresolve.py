"""Which of a claim's configs applies to which device of `gpu.nvidia.com` (NVIDIA's
precedence), normalized and validated, and what it means for the device: `AppliedSharing`
(dra_fake.gpu.configs: the kinds; dra_fake.gpu.configdecode: the decoding)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dra_fake.core.opaque import select_config
from dra_fake.gpu.configdecode import decode_claim_configs
from dra_fake.gpu.configs import (
    GATE_DYNAMIC_MIG,
    INTERVAL_DEFAULT,
    KIND_DEVICE_TYPE,
    STRATEGY_MPS,
    STRATEGY_TIME_SLICING,
    ConfigError,
    DeviceConfig,
    GateLookup,
    GpuConfig,
    GpuSharing,
    MigDeviceConfig,
    MpsConfig,
    Quantity,
    TimeSlicingConfig,
    default_config,
    mps_config,
    normalize,
    pinned_memory_limits,
    time_slicing_config,
    validate,
)


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
    fingerprint: str  # of `config`: one per config, however many results share it


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
            normalized,
            _applied(normalized, [results[i] for i in indexes], gates, claim_uid),
            fingerprint(normalized),
        )
        for i in indexes:
            resolved[i] = item
    return [r for r in resolved if r is not None]
