"""Opaque config decoding and defaults (dra_fake.gpu.configs). Validation messages, precedence and MPS
application are in tests/test_configs_validation.py; the configs both build in tests/gpuconfigs.py."""

from __future__ import annotations

import re
import time
from fractions import Fraction
from typing import Any

import pytest

from dra_fake.gpu import configdecode, configresolve, configs
from dra_fake.gpu.configresolve import AppliedSharing
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
from tests.gpuconfigs import ALL, API, GPU0, MIG0, NONE, U1, apply, gpu_cfg, mig_cfg

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
