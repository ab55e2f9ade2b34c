"""Opaque config validation messages as prepare sees them (through apply_configs), config entry errors,
precedence between claim and class configs, and MPS application (dra_fake.gpu.configs;
tests/gpuconfigs.py)."""

from __future__ import annotations

from typing import Any

import pytest

from dra_fake.core import opaque
from dra_fake.gpu import configdecode, configresolve, configs
from dra_fake.gpu.configresolve import AppliedSharing, ResultDevice
from dra_fake.gpu.configs import (
    ConfigError,
    FeatureGates,
    GpuSharing,
    MigDeviceSharing,
    MpsConfig,
    TimeSlicingConfig,
)
from tests.gpuconfigs import ALL, API, DRIVER, GPU0, GPU1, MIG0, NONE, U0, U1, apply, entry, gpu_cfg, mig_cfg

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
