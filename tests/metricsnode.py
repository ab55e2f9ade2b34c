"""The node the observability tests (tests/test_observability*.py) watch: its inventory, pods and the
claims they hold, a GpuMonitor over them, and the samples of an exposition."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.monitor import GpuMonitor
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.workloads import (
    ClaimHolding,
    HeldDevice,
)

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "dcgm-exporter-and-gfd.md"
NODE = "node-a"
T0 = 1_800_000_000.0


def inventory(config: dict[str, Any]) -> Inventory:
    return build_inventory(parse_config(config, "test"), NODE, load_profiles())


H100x2 = {"gpus": [{"profile": "h100-sxm5-80gb", "count": 2}]}
A100_STATIC = {
    "gpus": [
        {
            "profile": "a100-sxm4-40gb",
            "mig": "static",
            "migDevices": [{"profile": "3g.20gb", "start": 0}, {"profile": "1g.5gb", "start": 4}],
        }
    ]
}


def pod(name: str, claim: str, annotations: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
        },
        "status": {"phase": "Running"},
        **extra,
    }


def holding(claim: str, *devices: str) -> ClaimHolding:
    return ClaimHolding("ns", claim, tuple(HeldDevice(d, NODE, ("gpu",)) for d in devices))


def monitor_for(tmp_path: Path, inv: Inventory, holdings: list[ClaimHolding], now: float = T0) -> GpuMonitor:
    clock = [now]
    m = GpuMonitor(inv, lambda: holdings, NvidiaSmi.from_inventory(tmp_path, inv), NODE, "gpu.nvidia.com")
    m.clock = lambda: clock[0]
    m.simulator.boot_time = now - 3600
    return m


def samples(text: str) -> list[Any]:
    """Samples named as exposed (the Python parser renames counter samples to `<name>_total`;
    a Prometheus server stores them under the exposed name)."""
    return [s._replace(name=f.name) for f in text_string_to_metric_families(text) for s in f.samples]
