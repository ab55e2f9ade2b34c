"""The GPU opaque configs the config tests (tests/test_configs*.py) build: GpuConfig and MigDeviceConfig
parameters, claim config entries, feature gates, and applying them to allocation results."""

from __future__ import annotations

from typing import Any

from dra_fake.gpu import configresolve
from dra_fake.gpu.configresolve import AppliedSharing, ResultDevice
from dra_fake.gpu.configs import (
    FeatureGates,
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
