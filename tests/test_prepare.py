"""DeviceState: prepare/unprepare, conflicts and dynamic MIG (dra_fake.gpu.state on dra_fake.core.state).
Startup reconciliation and the node lock are in tests/test_prepare_startup.py, crash safety at every
crash point in tests/test_prepare_crash.py; the state they share in tests/statebed.py."""

from __future__ import annotations

import logging
import stat
from pathlib import Path
from typing import Any

import pytest
from crash_helper import NODE, P1_0, make_claim, make_state, opaque, result

from dra_fake.core.claims import ClaimError, PermanentClaimError
from dra_fake.gpu.configs import FeatureGates
from dra_fake.gpu.devices import mig_uuid
from dra_fake.gpu.state import DeviceState
from dra_fake.kubelet.api import PreparedDevice
from tests.statebed import API, KIND, MIG_2G, MIG_A, MIG_B, UID1, UID2, checkpoint, spec_env, ts_config

# --- prepare -----------------------------------------------------------------------------------


def test_prepare_returns_devices_and_writes_spec(state: DeviceState) -> None:
    claim = make_claim(
        UID1, [result("gpu", "gpu-0"), result("big/h100", "gpu-1"), result("x", "gpu-9", driver="other")]
    )
    devices = state.prepare(claim)
    assert devices == [
        PreparedDevice(("gpu",), NODE, "gpu-0", (f"{KIND}={UID1}-gpu-0",)),
        PreparedDevice(("big",), NODE, "gpu-1", (f"{KIND}={UID1}-gpu-1",)),  # subrequest stripped
    ]
    assert state.cdi.claim_uids() == [UID1]
    assert stat.S_IMODE(state.cdi.path(UID1).stat().st_mode) == 0o644
    entry = checkpoint(state).claims[UID1]
    assert (entry.state, entry.name, entry.namespace) == ("PrepareCompleted", "claim", "default")
    env = spec_env(state, UID1)
    uuids = [state.devices["gpu-0"].uuid, state.devices["gpu-1"].uuid]
    assert f"DRA_FAKE_VISIBLE_DEVICES={','.join(str(u) for u in uuids)}" in env
    assert "NVIDIA_VISIBLE_DEVICES=void" in env
    assert state.prepared_claims() == {UID1: "PrepareCompleted"}
    assert state.claim_counts() == {"PrepareStarted": 0, "PrepareCompleted": 1}
    assert state.prepared_device_count() == 2


def test_second_prepare_is_identical_without_side_effects(state: DeviceState) -> None:
    claim = make_claim(UID1, [result("gpu", "gpu-0"), result("mig", MIG_A)], [ts_config("Short", ["gpu"])])
    first = state.prepare(claim)
    ckpt, spec = state.store.path, state.cdi.path(UID1)
    before = (ckpt.read_bytes(), ckpt.stat().st_ino, spec.read_bytes(), spec.stat().st_ino)
    assert state.prepare(claim) == first
    assert (ckpt.read_bytes(), ckpt.stat().st_ino, spec.read_bytes(), spec.stat().st_ino) == before
    assert make_state(state.data_dir.parent).prepare(claim) == first  # another instance, same answer


def test_prepare_restores_a_lost_spec(state: DeviceState) -> None:
    claim = make_claim(UID1, [result("gpu", "gpu-0")])
    state.prepare(claim)
    content = state.cdi.path(UID1).read_bytes()
    state.cdi.path(UID1).unlink()
    state.prepare(claim)
    assert state.cdi.path(UID1).read_bytes() == content


def test_time_slicing_injected_and_recorded(state: DeviceState) -> None:
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0")], [ts_config("Short")]))
    env = spec_env(state, UID1)
    assert "DRA_FAKE_TIMESLICE_INTERVAL=Short" in env
    assert "DRA_FAKE_GPU_0_TIMESLICE_INTERVAL=Short" in env
    undo = checkpoint(state).claims[UID1].driverData
    assert [(t.uuid, t.interval) for t in undo.timeSlicing] == [(state.devices["gpu-0"].uuid, "Short")]


def test_mps_injected_and_recorded(state: DeviceState) -> None:
    params = {
        "apiVersion": API,
        "kind": "GpuConfig",
        "sharing": {
            "strategy": "MPS",
            "mpsConfig": {"defaultActiveThreadPercentage": 20, "defaultPinnedDeviceMemoryLimit": "4Gi"},
        },
    }
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0"), result("gpu", "gpu-1")], [opaque(params)]))
    u0, u1 = state.devices["gpu-0"].uuid, state.devices["gpu-1"].uuid
    env = spec_env(state, UID1)
    assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in env
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=20" in env
    assert f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT={u0}=4096M,{u1}=4096M" in env
    (daemon,) = checkpoint(state).claims[UID1].driverData.mpsDaemons
    assert daemon.uuids == [u0, u1]


def test_not_allocated(state: DeviceState) -> None:
    claim = make_claim(UID1, [])
    del claim["status"]["allocation"]
    with pytest.raises(PermanentClaimError, match=r"^claim not yet allocated$"):
        state.prepare(claim)


def test_no_devices_of_this_driver(state: DeviceState) -> None:
    assert state.prepare(make_claim(UID1, [result("x", "gpu-0", driver="other.example.com")])) == []
    assert state.store.peek() is None and state.cdi.claim_uids() == []


PERMANENT = {
    "unknown device": ([result("gpu", "gpu-42")], [], "requested device is not allocatable: gpu-42"),
    "other pool": (
        [result("gpu", "gpu-0", pool="node-b")],
        [],
        "requested device is not allocatable: gpu-0 (pool node-b; this node's pool is node-a)",
    ),
    "config error": (
        [result("gpu", "gpu-0")],
        [ts_config("Sometimes")],
        "error validating GPU config: unknown time-slice interval: Sometimes, "
        "supported time-slice intervals: Default, Short, Medium, Long",
    ),
    "unknown field": (
        [result("gpu", "gpu-0")],
        [
            opaque(
                {
                    "apiVersion": API,
                    "kind": "GpuConfig",
                    "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"intervall": "Short"}},
                }
            )
        ],
        "error getting opaque device configs: error decoding config parameters: strict decoding error: "
        'unknown field "sharing.timeSlicingConfig.intervall"',
    ),
    "config kind mismatch": (
        [result("mig", MIG_A)],
        [ts_config("Short", ["mig"])],
        f'cannot apply GpuConfig to device "{MIG_A}" of type "mig" (request: mig)',
    ),
}


@pytest.mark.parametrize("results,config,message", PERMANENT.values(), ids=PERMANENT.keys())
def test_permanent_errors_change_nothing(state: DeviceState, results: Any, config: Any, message: str) -> None:
    with pytest.raises(PermanentClaimError) as err:
        state.prepare(make_claim(UID1, results, config))
    assert str(err.value) == f"{failed(UID1)}prepare devices failed: {message}"
    assert state.prepared_claims() == {} and state.cdi.claim_uids() == []


def failed(uid: str, namespace: str = "default", name: str = "claim") -> str:
    """NVIDIA's outer wrapping of every per-claim prepare error."""
    return f"error preparing devices for claim {namespace}/{name}:{uid}: "


# NVIDIA's gpu-kubelet-plugin v0.4.1, captured
# (docs/reference/nvidia-gpu-driver.md#8-observed-in-captures-v041).
CAPTURED = {
    "bad-unknown-field": (
        {"apiVersion": API, "kind": "GpuConfig", "bogusField": 1},
        FeatureGates.of("TimeSlicingSettings", "MPSSupport"),
        "prepare devices failed: error getting opaque device configs: error decoding config parameters: "
        'strict decoding error: unknown field "bogusField"',
    ),
    "bad-timeslicing": (
        {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}},
        FeatureGates(),
        'prepare devices failed: error validating GPU config: "TimeSlicing" is selected as the GPU sharing '
        'strategy, but the "TimeSlicingSettings" feature gate is not enabled',
    ),
    "bad-mps-150": (
        {
            "apiVersion": API,
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 150}},
        },
        FeatureGates.of("MPSSupport"),
        "prepare devices failed: error validating GPU config: active thread percentage must not be greater "
        "than 100",
    ),
}


@pytest.mark.parametrize(
    "name,params,gates,cause", [(k, *v) for k, v in CAPTURED.items()], ids=CAPTURED.keys()
)
def test_errors_match_nvidias_captured_output(
    tmp_path: Path, name: str, params: Any, gates: FeatureGates, cause: str
) -> None:
    state = make_state(tmp_path, gates=gates)
    with pytest.raises(PermanentClaimError) as err:
        state.prepare(make_claim(UID1, [result("gpu", "gpu-0")], [opaque(params)], name=name))
    assert str(err.value) == failed(UID1, name=name) + cause


def test_mps_feature_gate_off(tmp_path: Path) -> None:
    state = make_state(tmp_path, gates=FeatureGates())
    params = {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "MPS"}}
    with pytest.raises(PermanentClaimError, match=r'the "MPSSupport" feature gate is not enabled$'):
        state.prepare(make_claim(UID1, [result("gpu", "gpu-0")], [opaque(params)]))


# --- conflicts ---------------------------------------------------------------------------------


def test_device_held_by_another_claim(state: DeviceState) -> None:
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0")]))
    with pytest.raises(ClaimError) as err:
        state.prepare(make_claim(UID2, [result("gpu", "gpu-1"), result("gpu", "gpu-0")]))
    assert not isinstance(err.value, PermanentClaimError)
    assert str(err.value) == (
        f"{failed(UID2)}unable to prepare claim {UID2}: requested device gpu-0 is already allocated to "
        f"different claim {UID1}"
    )
    assert state.prepared_claims() == {UID1: "PrepareCompleted"}
    state.unprepare(UID1)
    assert [d.device_name for d in state.prepare(make_claim(UID2, [result("gpu", "gpu-0")]))] == ["gpu-0"]


def test_admin_access_is_allowed_beside_a_holder(state: DeviceState) -> None:
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0")]))
    admin = state.prepare(make_claim(UID2, [result("mon", "gpu-0", adminAccess=True)]))
    assert admin[0].device_name == "gpu-0"
    assert "DRA_FAKE_GPU_0_ADMIN_ACCESS=true" in spec_env(state, UID2)
    # an admin-access holder does not block a regular claim either
    state.unprepare(UID1)
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0")]))


def test_dynamic_mig_created_and_destroyed(state: DeviceState) -> None:
    devices = state.prepare(make_claim(UID1, [result("mig", MIG_A)]))
    expected = mig_uuid(NODE, 3, P1_0, nonce=UID1)
    assert expected.startswith("MIG-")
    (created,) = state.dynamic_mig_devices()
    assert (created.device, created.uuid, created.parentUUID) == (
        MIG_A,
        expected,
        state.devices["gpu-3"].uuid,
    )
    assert f"DRA_FAKE_GPU_3_MIG_1G10GB_19_0_UUID={expected}" in spec_env(state, UID1)
    assert devices[0].cdi_device_ids == (f"{KIND}={UID1}-{MIG_A}",)
    state.unprepare(UID1)
    assert state.dynamic_mig_devices() == []
    # a new claim on the same placement gets a new MIG device
    state.prepare(make_claim(UID2, [result("mig", MIG_A)]))
    assert [m.uuid for m in state.dynamic_mig_devices()] == [mig_uuid(NODE, 3, P1_0, nonce=UID2)]


def test_static_mig_creates_nothing(state: DeviceState) -> None:
    state.prepare(make_claim(UID1, [result("mig", "gpu-2-mig-1g10gb-19-0")]))
    assert state.dynamic_mig_devices() == []
    assert "DRA_FAKE_GPU_2_MIG_1G10GB_19_0_MIG_DYNAMIC=false" in spec_env(state, UID1)


OVERLAPS = {
    "overlapping placements": (
        [result("m", MIG_2G)],
        [result("m", MIG_B)],
        f"requested device {MIG_B} overlaps MIG device {MIG_2G} prepared for claim {UID1} on the same GPU",
    ),
    "partition on a held full GPU": (
        [result("g", "gpu-3")],
        [result("m", MIG_A)],
        f"requested device {MIG_A} conflicts with full GPU gpu-3 prepared for claim {UID1}",
    ),
    "full GPU with a partition on it": (
        [result("m", MIG_A)],
        [result("g", "gpu-3")],
        f"requested device gpu-3 conflicts with MIG device {MIG_A} prepared for claim {UID1} on the same GPU",
    ),
    "overlap within one claim": (
        [],
        [result("a", MIG_2G), result("b", MIG_A)],
        f"requested device {MIG_A} overlaps MIG device {MIG_2G} prepared for claim {UID2} on the same GPU",
    ),
}


@pytest.mark.parametrize("first,second,message", OVERLAPS.values(), ids=OVERLAPS.keys())
def test_dynamic_mig_overlaps_refused(state: DeviceState, first: Any, second: Any, message: str) -> None:
    if first:
        state.prepare(make_claim(UID1, first))
    with pytest.raises(ClaimError) as err:
        state.prepare(make_claim(UID2, second))
    assert str(err.value) == f"{failed(UID2)}unable to prepare claim {UID2}: {message}"
    assert UID2 not in state.prepared_claims()


def test_disjoint_placements_coexist(state: DeviceState) -> None:
    state.prepare(make_claim(UID1, [result("m", MIG_A)]))
    state.prepare(make_claim(UID2, [result("m", MIG_B)]))
    assert sorted(m.device for m in state.dynamic_mig_devices()) == [MIG_A, MIG_B]


# --- unprepare ---------------------------------------------------------------------------------


def test_unprepare_unknown_claim_succeeds(state: DeviceState, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="dra_fake.core.state"):
        state.unprepare(UID1)
    assert "Unprepare noop: claim not found in checkpoint data" in caplog.text


def test_unprepare_removes_everything_and_is_idempotent(state: DeviceState) -> None:
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0"), result("m", MIG_A)]))
    state.unprepare(UID1)
    state.unprepare(UID1)
    assert state.prepared_claims() == {} and state.cdi.claim_uids() == []
