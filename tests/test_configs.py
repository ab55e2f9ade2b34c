"""Opaque config decoding, defaults, validation messages and precedence (dra_fake.configs)."""

from __future__ import annotations

import re
import time
from fractions import Fraction
from typing import Any

import pytest

from dra_fake.core import opaque
from dra_fake.gpu import configdecode, configresolve, configs
from dra_fake.gpu.configresolve import AppliedSharing, ResultDevice
from dra_fake.gpu.configs import (
    ConfigError,
    FeatureGates,
    GpuConfig,
    GpuSharing,
    MigDeviceConfig,
    MigDeviceSharing,
    MpsConfig,
    Quantity,
    TimeSlicingConfig,
)

DRIVER = "gpu.nvidia.com"
API = "resource.nvidia.com/v1beta1"
ALL = FeatureGates.of("TimeSlicingSettings", "MPSSupport")
NONE = FeatureGates()
U0, U1 = "GPU-aaaa", "GPU-bbbb"


def gpu_cfg(sharing: Any = None, **extra: Any) -> dict[str, Any]:
    params: dict[str, Any] = {"apiVersion": API, "kind": "GpuConfig", **extra}
    if sharing is not None:
        params["sharing"] = sharing
    return params


def mig_cfg(sharing: Any = None) -> dict[str, Any]:
    params: dict[str, Any] = {"apiVersion": API, "kind": "MigDeviceConfig"}
    if sharing is not None:
        params["sharing"] = sharing
    return params


def entry(
    params: Any, requests: list[str] | None = None, source: str = "FromClaim", driver: str = DRIVER
) -> Any:
    e: dict[str, Any] = {"source": source, "opaque": {"driver": driver, "parameters": params}}
    if requests is not None:
        e["requests"] = requests
    return e


GPU0 = ResultDevice("gpu", "gpu-0", "gpu", U0)
GPU1 = ResultDevice("gpu", "gpu-1", "gpu", U1)
MIG0 = ResultDevice("mig", "gpu-2-mig-1g10gb-19-0", "mig", "MIG-cccc")


def apply(
    entries: list[Any], results: list[ResultDevice] | None = None, gates: Any = ALL
) -> list[AppliedSharing]:
    return configresolve.apply_configs(DRIVER, entries, results or [GPU0], gates, "uid-1")


# --- strict decoding ---------------------------------------------------------------------------

DEC = "error decoding config parameters: "
STRICT = DEC + "strict decoding error: "

DECODE_ERRORS = {
    "unknown top-level field": (
        gpu_cfg(unexpectedField=1),
        STRICT + 'unknown field "unexpectedField"',
    ),
    "unknown nested field": (
        gpu_cfg({"strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Short"}}),
        STRICT + 'unknown field "sharing.timeSlicingConfig.intervall"',
    ),
    "unknown mps field": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercent": 5}}),
        STRICT + 'unknown field "sharing.mpsConfig.defaultActiveThreadPercent"',
    ),
    "several unknown fields": (
        gpu_cfg({"strategy": "MPS", "foo": 1}, bar=2),
        STRICT + 'unknown field "bar", unknown field "sharing.foo"',
    ),
    "MigDeviceConfig rejects timeSlicingConfig": (
        mig_cfg({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Short"}}),
        STRICT + 'unknown field "sharing.timeSlicingConfig"',
    ),
    "metadata is not a field": (
        gpu_cfg(metadata={"name": "x"}),
        STRICT + 'unknown field "metadata"',
    ),
    "unknown kind": (
        {"apiVersion": API, "kind": "TpuConfig"},
        'error decoding config parameters: no kind "TpuConfig" is registered for version '
        '"resource.nvidia.com/v1beta1"; supported: resource.nvidia.com/v1beta1 GpuConfig, '
        "MigDeviceConfig, VfioDeviceConfig",
    ),
    "unknown apiVersion": (
        {"apiVersion": "gpu.resource.example.com/v1alpha1", "kind": "GpuConfig"},
        'error decoding config parameters: no kind "GpuConfig" is registered for version '
        '"gpu.resource.example.com/v1alpha1"; supported: resource.nvidia.com/v1beta1 GpuConfig, '
        "MigDeviceConfig, VfioDeviceConfig",
    ),
    "missing kind": (
        {"apiVersion": API},
        "error decoding config parameters: Object 'Kind' is missing in "
        '\'{"apiVersion":"resource.nvidia.com/v1beta1"}\'',
    ),
    "missing apiVersion": (
        {"kind": "GpuConfig"},
        "error decoding config parameters: Object 'apiVersion' is missing in '{\"kind\":\"GpuConfig\"}'",
    ),
    "parameters not an object": (
        ["GpuConfig"],
        "error decoding config parameters: invalid type for config parameters: expected object, got array",
    ),
    "strategy of the wrong type": (
        gpu_cfg({"strategy": 3}),
        DEC + 'invalid type for field "sharing.strategy": expected string, got number',
    ),
    "percentage as a string": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": "50"}}),
        "error decoding config parameters: invalid type for field "
        '"sharing.mpsConfig.defaultActiveThreadPercentage": expected integer, got string',
    ),
    "percentage as a boolean": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": True}}),
        "error decoding config parameters: invalid type for field "
        '"sharing.mpsConfig.defaultActiveThreadPercentage": expected integer, got boolean',
    ),
    "bad quantity": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "ten gigs"}}),
        'error decoding config parameters: invalid value for field "sharing.mpsConfig.'
        'defaultPinnedDeviceMemoryLimit": quantities must match the regular expression '
        "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    ),
    "sharing not an object": (
        gpu_cfg("TimeSlicing"),
        'error decoding config parameters: invalid type for field "sharing": expected object, got string',
    ),
    "iommu unknown field": (
        {"apiVersion": API, "kind": "VfioDeviceConfig", "iommu": {"backend": "x"}},
        STRICT + 'unknown field "iommu.backend"',
    ),
}


@pytest.mark.parametrize("params,message", DECODE_ERRORS.values(), ids=DECODE_ERRORS.keys())
def test_decode_errors(params: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        configdecode.decode_config(params)
    assert str(err.value) == message


def test_decode_full_gpu_config() -> None:
    params = gpu_cfg(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 50,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
                "defaultPerDevicePinnedMemoryLimit": {"0": "5Gi", U1: 2048},
            },
        }
    )
    decoded = configdecode.decode_config(params)
    assert isinstance(decoded, GpuConfig)
    assert decoded.sharing is not None
    mps = decoded.sharing.mps_config
    assert mps is not None
    assert mps.default_active_thread_percentage == 50
    assert mps.default_pinned_device_memory_limit == Quantity("10Gi", Fraction(10 * 2**30))
    assert mps.default_per_device_pinned_memory_limit == {
        "0": Quantity("5Gi", Fraction(5 * 2**30)),
        U1: Quantity("2048", Fraction(2048)),
    }


def test_decode_null_fields_are_unset() -> None:
    decoded = configdecode.decode_config(gpu_cfg({"strategy": "TimeSlicing", "timeSlicingConfig": None}))
    assert decoded == GpuConfig(GpuSharing("TimeSlicing"))


QUANTITIES = {
    "10Gi": 10 * 2**30,
    "1Mi": 2**20,
    "512Ki": 512 * 1024,
    "1G": 10**9,
    "1.5Gi": 3 * 2**29,
    "1e6": 10**6,
    "100m": Fraction(1, 10),
    "+2k": 2000,
    "-1Mi": -(2**20),
}


@pytest.mark.parametrize("text,value", QUANTITIES.items(), ids=QUANTITIES.keys())
def test_quantity_parse(text: str, value: int | Fraction) -> None:
    assert Quantity.parse(text).value == value


@pytest.mark.parametrize("text", ["", "Gi", "10 Gi", "10gb", "1.2.3", "0x10"])
def test_quantity_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="quantities must match the regular expression"):
        Quantity.parse(text)


@pytest.mark.parametrize("text", ["1e10000000", "1e-10000000", "1e5000", "1e19", "10Ei", "1" * 70])
def test_hostile_quantities_are_refused_at_once(text: str) -> None:
    """Unbounded exponents cost seconds of CPU under the node lock; huge values broke later
    formatting. Refused before any such work, as out of range (this thread's CPU time, bounded far
    above a refusal's microseconds and far below the seconds of the work: not a timing goal)."""
    start = time.thread_time()
    with pytest.raises(ValueError, match=r"out of range|longer than"):
        Quantity.parse(text)
    assert time.thread_time() - start < 0.5


def test_a_hostile_pinned_memory_limit_fails_the_claim_naming_the_field() -> None:
    claim_config = gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "1e5000"}})
    field = '"sharing.mpsConfig.defaultPinnedDeviceMemoryLimit": quantity 1e5000 is out of range'
    with pytest.raises(ConfigError, match=re.escape(field)):
        configdecode.decode_config(claim_config)


# --- defaults ----------------------------------------------------------------------------------

DEFAULTS = {
    "gates off: no sharing stays none": (GpuConfig(), NONE, GpuConfig()),
    "TimeSlicingSettings: missing sharing = TimeSlicing/Default": (
        GpuConfig(),
        FeatureGates.of("TimeSlicingSettings"),
        GpuConfig(GpuSharing("TimeSlicing", TimeSlicingConfig("Default"))),
    ),
    "TimeSlicing without config gets Default": (
        GpuConfig(GpuSharing("TimeSlicing")),
        ALL,
        GpuConfig(GpuSharing("TimeSlicing", TimeSlicingConfig("Default"))),
    ),
    "TimeSlicing config without interval gets Default": (
        GpuConfig(GpuSharing("TimeSlicing", TimeSlicingConfig())),
        ALL,
        GpuConfig(GpuSharing("TimeSlicing", TimeSlicingConfig("Default"))),
    ),
    "MPSSupport: MPS without mpsConfig = {}": (
        GpuConfig(GpuSharing("MPS")),
        FeatureGates.of("MPSSupport"),
        GpuConfig(GpuSharing("MPS", mps_config=MpsConfig())),
    ),
    "MPS gate off: mpsConfig not added": (
        GpuConfig(GpuSharing("MPS")),
        NONE,
        GpuConfig(GpuSharing("MPS")),
    ),
    "MIG with TimeSlicingSettings": (
        MigDeviceConfig(),
        ALL,
        MigDeviceConfig(MigDeviceSharing("TimeSlicing")),
    ),
    "MIG MPS default": (
        MigDeviceConfig(MigDeviceSharing("MPS")),
        ALL,
        MigDeviceConfig(MigDeviceSharing("MPS", MpsConfig())),
    ),
    "VFIO defaults": (
        configs.VfioDeviceConfig(),
        NONE,
        configs.VfioDeviceConfig(configs.IommuConfig("LegacyOnly", False)),
    ),
}


@pytest.mark.parametrize("config,gates,expected", DEFAULTS.values(), ids=DEFAULTS.keys())
def test_normalize(config: configs.DeviceConfig, gates: FeatureGates, expected: configs.DeviceConfig) -> None:
    assert configs.normalize(config, gates) == expected


def test_default_config_per_device_type() -> None:
    assert configs.default_config("gpu", NONE) == GpuConfig()
    assert configs.default_config("mig", NONE) == MigDeviceConfig()
    assert apply([], [GPU0, MIG0], NONE) == [configresolve.NO_SHARING, configresolve.NO_SHARING]
    ts = apply([], [GPU0, MIG0], ALL)
    assert ts[0] == AppliedSharing("TimeSlicing", time_slice_interval="Default")
    assert ts[1] == AppliedSharing("TimeSlicing")  # accepted but inert on MIG


# --- validation messages (through apply_configs, as prepare sees them) ------------------------

GATE_TS = (
    '"TimeSlicing" is selected as the GPU sharing strategy, but the "TimeSlicingSettings" '
    "feature gate is not enabled"
)
GATE_MPS = '"MPS" is selected as the GPU sharing strategy, but the "MPSSupport" feature gate is not enabled'
GPU_PFX = "error validating GPU config: "  # no "invalid GPU sharing settings: " (NVIDIA: fall-through only)
MIG_PFX = "error validating GPU config: "

VALIDATION_ERRORS: dict[str, tuple[Any, list[ResultDevice], Any, str]] = {
    "TimeSlicing gate off": (
        gpu_cfg({"strategy": "TimeSlicing"}),
        [GPU0],
        NONE,
        GPU_PFX + GATE_TS,
    ),
    "MPS gate off": (gpu_cfg({"strategy": "MPS"}), [GPU0], NONE, GPU_PFX + GATE_MPS),
    "MIG MPS gate off": (mig_cfg({"strategy": "MPS"}), [MIG0], NONE, MIG_PFX + GATE_MPS),
    "MIG TimeSlicing gate off": (mig_cfg({"strategy": "TimeSlicing"}), [MIG0], NONE, MIG_PFX + GATE_TS),
    "unknown strategy": (
        gpu_cfg({"strategy": "SpacePartitioning"}),
        [GPU0],
        ALL,
        GPU_PFX
        + "unknown GPU sharing strategy: SpacePartitioning, "
        + "supported GPU sharing strategies: TimeSlicing, MPS",
    ),
    "empty strategy": (
        gpu_cfg({}),
        [GPU0],
        ALL,
        GPU_PFX + "unknown GPU sharing strategy: , supported GPU sharing strategies: TimeSlicing, MPS",
    ),
    "MIG unknown strategy": (
        mig_cfg({"strategy": "Foo"}),
        [MIG0],
        ALL,
        MIG_PFX + "unknown GPU sharing strategy: Foo, supported GPU sharing strategies: TimeSlicing, MPS",
    ),
    "unknown interval": (
        gpu_cfg({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Fast"}}),
        [GPU0],
        ALL,
        GPU_PFX
        + "unknown time-slice interval: Fast, supported time-slice intervals: Default, Short, Medium, Long",
    ),
    "negative percentage": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": -1}}),
        [GPU0],
        ALL,
        GPU_PFX + "active thread percentage must not be negative",
    ),
    "percentage over 100": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
        [GPU0],
        ALL,
        GPU_PFX + "active thread percentage must not be greater than 100",
    ),
    "MIG percentage over 100": (
        mig_cfg({"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 101}}),
        [MIG0],
        ALL,
        MIG_PFX + "active thread percentage must not be greater than 100",
    ),
    "MpsConfig with TimeSlicing": (
        gpu_cfg({"strategy": "TimeSlicing", "mpsConfig": {}}),
        [GPU0],
        ALL,
        GPU_PFX + "cannot use MpsConfig with the 'TimeSlicing' strategy",
    ),
    "MIG MpsConfig with TimeSlicing": (
        mig_cfg({"strategy": "TimeSlicing", "mpsConfig": {}}),
        [MIG0],
        ALL,
        MIG_PFX + "cannot use MpsConfig with the 'TimeSlicing' strategy",
    ),
    "TimeSlicingConfig with MPS": (
        gpu_cfg({"strategy": "MPS", "timeSlicingConfig": {"interval": "Short"}}),
        [GPU0],
        ALL,
        GPU_PFX + "cannot use TimeSlicingConfig with the 'MPS' strategy",
    ),
    "default limit too low": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultPinnedDeviceMemoryLimit": "512Ki"}}),
        [GPU0],
        ALL,
        GPU_PFX + "invalid limit: default value set too low: 512Ki",
    ),
    "per-device limit too low": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"0": "100"}}}),
        [GPU0],
        ALL,
        GPU_PFX + "invalid limit: value set too low: 0: 100",
    ),
    "per-device key not an integer": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"first": "1Gi"}}}),
        [GPU0],
        ALL,
        "error validating GPU config: invalid device: unable to parse key as an integer: first",
    ),
    "per-device index out of range": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"2": "1Gi"}}}),
        [GPU0, GPU1],
        ALL,
        "error validating GPU config: invalid device: invalid device index: 2",
    ),
    "per-device negative index": (
        gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {"-1": "1Gi"}}}),
        [GPU0],
        ALL,
        "error validating GPU config: invalid device: invalid device index: -1",
    ),
    "unknown IOMMU policy": (
        {"apiVersion": API, "kind": "VfioDeviceConfig", "iommu": {"backendPolicy": "Always"}},
        [ResultDevice("vfio", "gpu-vfio-0", "vfio", U0)],
        ALL,
        "error validating GPU config: unknown IOMMU backend policy: Always, supported IOMMU backend "
        "policies: LegacyOnly, PreferIommuFD",
    ),
    "GpuConfig on a MIG device": (
        gpu_cfg(),
        [ResultDevice("mig/small", "gpu-2-mig-1g10gb-19-0", "mig", "MIG-cccc")],
        ALL,
        'cannot apply GpuConfig to device "gpu-2-mig-1g10gb-19-0" of type "mig" (request: mig/small)',
    ),
    "MigDeviceConfig on a GPU": (
        mig_cfg(),
        [GPU0],
        ALL,
        'cannot apply MigDeviceConfig to device "gpu-0" of type "gpu" (request: gpu)',
    ),
    "VfioDeviceConfig on a GPU": (
        {"apiVersion": API, "kind": "VfioDeviceConfig"},
        [GPU0],
        ALL,
        'cannot apply VfioDeviceConfig to device "gpu-0" of type "gpu" (request: gpu)',
    ),
    "MPS with DynamicMIG": (
        gpu_cfg({"strategy": "MPS"}),
        [GPU0],
        FeatureGates.of("MPSSupport", "DynamicMIG"),
        "MPS is not yet supported when using featureGates.DynamicMIG=true",
    ),
}


@pytest.mark.parametrize(
    "params,results,gates,message", VALIDATION_ERRORS.values(), ids=VALIDATION_ERRORS.keys()
)
def test_validation_errors(params: Any, results: list[ResultDevice], gates: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        apply([entry(params)], results, gates)
    assert str(err.value) == message


ENTRY_ERRORS = {
    "invalid source": (
        {"source": "FromNowhere", "opaque": {"driver": DRIVER}},
        "error getting opaque device configs: invalid config source: FromNowhere",
    ),
    "not opaque": (
        {"source": "FromClaim"},
        "error getting opaque device configs: only opaque parameters are supported by this driver",
    ),
}


@pytest.mark.parametrize("raw,message", ENTRY_ERRORS.values(), ids=ENTRY_ERRORS.keys())
def test_config_entry_errors(raw: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        apply([raw])
    assert str(err.value) == message


def test_strategy_accessors() -> None:
    with pytest.raises(ConfigError, match=r"^strategy is not set to 'TimeSlicing'$"):
        configs.time_slicing_config(GpuSharing("MPS"))
    with pytest.raises(ConfigError, match=r"^strategy is not set to 'MPS'$"):
        configs.mps_config(GpuSharing("TimeSlicing"))
    with pytest.raises(ConfigError, match=r"^cannot use MpsConfig with the 'TimeSlicing' strategy$"):
        configs.time_slicing_config(GpuSharing("TimeSlicing", mps_config=MpsConfig()))
    with pytest.raises(ConfigError, match=r"^cannot use TimeSlicingConfig with the 'MPS' strategy$"):
        configs.mps_config(GpuSharing("MPS", time_slicing_config=TimeSlicingConfig()))
    assert configs.mps_config(MigDeviceSharing("MPS", MpsConfig(50))) == MpsConfig(50)


def test_invalid_config_for_other_requests_is_not_validated() -> None:
    # A bad config that applies to none of this driver's results is decoded but not validated.
    bad = entry(gpu_cfg({"strategy": "Nope"}), requests=["other"])
    assert apply([bad], gates=NONE) == [configresolve.NO_SHARING]


# --- precedence --------------------------------------------------------------------------------


def ts(interval: str, requests: list[str] | None = None, source: str = "FromClaim") -> Any:
    return entry(
        gpu_cfg({"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}), requests, source
    )


PRECEDENCE: dict[str, tuple[list[Any], str, str]] = {
    "claim beats class (class listed last)": (
        [ts("Short", source="FromClaim"), ts("Long", source="FromClass")],
        "gpu",
        "Short",
    ),
    "later claim config wins": ([ts("Short"), ts("Medium")], "gpu", "Medium"),
    "later class config wins": (
        [ts("Short", source="FromClass"), ts("Medium", source="FromClass")],
        "gpu",
        "Medium",
    ),
    "empty requests apply to all": ([ts("Long", [])], "gpu", "Long"),
    "absent requests apply to all": ([ts("Long")], "gpu", "Long"),
    "specific request": ([ts("Long", ["gpu"]), ts("Short", ["other"])], "gpu", "Long"),
    "main request covers subrequest": ([ts("Medium", ["gpu"])], "gpu/big", "Medium"),
    "exact subrequest": ([ts("Medium", ["gpu/small"]), ts("Short", ["gpu/big"])], "gpu/big", "Short"),
    "later broad config overrides earlier specific": ([ts("Long", ["gpu"]), ts("Short", [])], "gpu", "Short"),
    "earlier specific kept when later one names another request": (
        [ts("Long", ["gpu"]), ts("Short", ["x"])],
        "gpu/sub",
        "Long",
    ),
    "other driver's config ignored": (
        [ts("Long"), entry({"anything": True}, driver="gpu.example.com")],
        "gpu",
        "Long",
    ),
    "no matching config: default": ([ts("Long", ["x"])], "gpu", "Default"),
}


@pytest.mark.parametrize("entries,req,interval", PRECEDENCE.values(), ids=PRECEDENCE.keys())
def test_precedence(entries: list[Any], req: str, interval: str) -> None:
    (applied,) = apply(entries, [ResultDevice(req, "gpu-0", "gpu", U0)])
    assert applied == AppliedSharing("TimeSlicing", time_slice_interval=interval)


def test_decode_claim_configs_orders_class_first() -> None:
    got = configdecode.decode_claim_configs(
        DRIVER, [ts("Short", ["a"]), ts("Long", ["b"], source="FromClass"), ts("Medium", ["c"])]
    )
    assert [(c.source, c.requests, c.position) for c in got] == [
        ("FromClass", ("b",), 0),
        ("FromClaim", ("a",), 1),
        ("FromClaim", ("c",), 2),
    ]


@pytest.mark.parametrize(
    "requests,req,expected",
    [
        ((), "x", True),
        (("a",), "a", True),
        (("a",), "a/b", True),
        (("a/b",), "a/b", True),
        (("a/b",), "a/c", False),
        (("a/b",), "a", False),
        (("ab",), "a", False),
    ],
)
def test_requests_match(requests: tuple[str, ...], req: str, expected: bool) -> None:
    assert opaque.requests_match(requests, req) is expected


# --- MPS application ---------------------------------------------------------------------------


def test_mps_limits_default_and_per_device() -> None:
    params = gpu_cfg(
        {
            "strategy": "MPS",
            "mpsConfig": {
                "defaultActiveThreadPercentage": 25,
                "defaultPinnedDeviceMemoryLimit": "10Gi",
                "defaultPerDevicePinnedMemoryLimit": {"1": "1536Mi"},
            },
        }
    )
    first, second = apply([entry(params)], [GPU0, GPU1])
    assert first == second  # one group, one daemon
    assert first.mps is not None
    assert first.mps.active_thread_percentage == 25
    assert first.mps.pinned_memory_limits == ((U0, "10240M"), (U1, "1536M"))
    assert first.mps.uuids == (U0, U1)
    assert first.mps.control_daemon_id == configresolve.mps_control_daemon_id("uid-1", [U0, U1])
    assert first.mps.control_daemon_id.startswith("mps-control-daemon-uid-1-")


def test_mps_limit_by_uuid_only() -> None:
    params = gpu_cfg({"strategy": "MPS", "mpsConfig": {"defaultPerDevicePinnedMemoryLimit": {U1: "2Gi"}}})
    (applied, _) = apply([entry(params)], [GPU0, GPU1])
    assert applied.mps is not None
    assert applied.mps.pinned_memory_limits == ((U1, "2048M"),)


def test_groups_by_config() -> None:
    mps = entry(gpu_cfg({"strategy": "MPS"}), ["a"])
    got = apply(
        [mps, ts("Short", ["b"])],
        [ResultDevice("a", "gpu-0", "gpu", U0), ResultDevice("b", "gpu-1", "gpu", U1)],
    )
    assert got[0].strategy == "MPS" and got[0].mps is not None and got[0].mps.uuids == (U0,)
    assert got[1] == AppliedSharing("TimeSlicing", time_slice_interval="Short")
