"""The DeviceState the prepare tests (tests/test_prepare*.py) run on (the fixture `state`, through
tests/conftest.py), its claims' UIDs and devices, reads of its checkpoint and CDI specs, and a
prepare left half done."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from crash_helper import make_claim, make_state, opaque

from dra_fake.core.checkpoint import CheckpointData
from dra_fake.gpu.state import DeviceState

HELPER = Path(__file__).with_name("crash_helper.py")
REPO = HELPER.parent.parent
API = "resource.nvidia.com/v1beta1"
UID1 = "1a111111-1111-1111-1111-111111111111"
UID2 = "b2222222-2222-2222-2222-222222222222"
KIND = "k8s.gpu.nvidia.com/claim"
MIG_A = "gpu-3-mig-1g10gb-19-0"
MIG_B = "gpu-3-mig-1g10gb-19-1"
MIG_2G = "gpu-3-mig-2g20gb-14-0"


def ts_config(interval: str, requests: list[str] | None = None) -> dict[str, Any]:
    params = {
        "apiVersion": API,
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
    }
    return opaque(params, requests)


@pytest.fixture
def state(tmp_path: Path) -> DeviceState:
    return make_state(tmp_path)


def checkpoint(state: DeviceState) -> CheckpointData:
    data = state.store.peek()
    assert data is not None
    return data


def spec_env(state: DeviceState, uid: str) -> list[str]:
    spec = yaml.safe_load(state.cdi.path(uid).read_text())
    env: list[str] = list(spec["containerEdits"]["env"])
    for device in spec["devices"]:
        env += device["containerEdits"]["env"]
    return env


# --- partial state and startup -----------------------------------------------------------------


def leave_started(state: DeviceState, uid: str, results: list[dict[str, Any]]) -> None:
    """A PrepareStarted entry as a crash after the first checkpoint write leaves it, + its spec."""
    state.prepare(make_claim(uid, results))
    data = checkpoint(state)
    data.claims[uid].state = "PrepareStarted"
    state.store.save(data)
