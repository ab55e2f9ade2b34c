"""DeviceState: prepare/unprepare, conflicts, dynamic MIG, startup reconciliation, the node lock and
crash safety at every crash point (dra_fake.gpu.state on dra_fake.core.state, dra_fake.core.locking)."""

from __future__ import annotations

import json
import logging
import os
import select
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest
import yaml
from crash_helper import (
    NODE,
    P1_0,
    make_claim,
    make_lending_state,
    make_state,
    opaque,
    result,
)

from dra_fake.core.checkpoint import CheckpointData
from dra_fake.core.claims import ClaimError, PermanentClaimError
from dra_fake.core.crashpoints import CRASH_ENV, CRASH_POINTS
from dra_fake.core.locking import LockTimeoutError, PrepareUnprepareLock
from dra_fake.gpu.claimdata import GpuClaimData
from dra_fake.gpu.configs import FeatureGates
from dra_fake.gpu.devices import mig_uuid
from dra_fake.gpu.lending import Lending, LendingSettings, Owners
from dra_fake.gpu.lendingfile import FILE_NAME as LENDING_FILE
from dra_fake.gpu.state import DeviceState
from dra_fake.kubelet.api import PreparedDevice

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


# --- partial state and startup -----------------------------------------------------------------


def leave_started(state: DeviceState, uid: str, results: list[dict[str, Any]]) -> None:
    """A PrepareStarted entry as a crash after the first checkpoint write leaves it, + its spec."""
    state.prepare(make_claim(uid, results))
    data = checkpoint(state)
    data.claims[uid].state = "PrepareStarted"
    state.store.save(data)


def test_prepare_rolls_back_an_earlier_partial_prepare(state: DeviceState) -> None:
    leave_started(state, UID1, [result("m", MIG_A)])
    devices = state.prepare(make_claim(UID1, [result("m", MIG_A)]))
    assert devices[0].device_name == MIG_A
    assert state.prepared_claims() == {UID1: "PrepareCompleted"}
    assert len(state.dynamic_mig_devices()) == 1


def test_startup_reconciles(state: DeviceState, tmp_path: Path) -> None:
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0")]))
    leave_started(state, UID2, [result("m", MIG_A)])
    orphan = "d4444444-4444-4444-4444-444444444444"
    state.cdi.write(orphan, state.cdi.read(UID1) or {})
    state.cdi.path(UID1).unlink()  # lost spec of a completed claim
    other_driver = state.cdi.root / "k8s.compute-domain.nvidia.com-claim_x.yaml"
    other_driver.write_text("kept")
    temp = state.cdi.root / f".k8s.gpu.nvidia.com-claim_{UID1}.yaml.abcd.tmp"
    temp.write_text("partial")

    report = make_state(tmp_path).startup()
    assert report.checkpoint_status == "ok"
    assert report.rolled_back == (UID2,)
    assert report.orphans_removed == (orphan,)
    assert report.specs_restored == (UID1,)
    assert report.temp_files_removed == 1
    assert state.prepared_claims() == {UID1: "PrepareCompleted"}
    assert state.cdi.claim_uids() == [UID1]
    assert state.dynamic_mig_devices() == []
    assert other_driver.exists() and not temp.exists()


def test_startup_keeps_intact_specs_whose_edits_the_checkpoint_holds_in_another_key_order(
    tmp_path: Path,
) -> None:
    """The checkpoint keeps a spec with sorted keys; the file has the device's edits in the order
    prepare built them (env before device nodes): still intact, not rewritten at every start."""
    from dra_fake.gpu.devnodes import DeviceNodes

    nodes = DeviceNodes(120)
    make_state(tmp_path, device_nodes=lambda: nodes).prepare(make_claim(UID1, [result("gpu", "gpu-0")]))
    spec = make_state(tmp_path).cdi.path(UID1)
    written = spec.read_bytes()
    assert written.index(b"env:") < written.index(b"deviceNodes:")
    assert make_state(tmp_path, device_nodes=lambda: nodes).startup().specs_restored == ()
    assert spec.read_bytes() == written
    spec.write_bytes(written[: len(written) // 2])  # cut short: restored
    assert make_state(tmp_path, device_nodes=lambda: nodes).startup().specs_restored == (UID1,)


def test_startup_after_reboot_discards_and_cleans(state: DeviceState, tmp_path: Path) -> None:
    state.prepare(make_claim(UID1, [result("m", MIG_A)]))
    (tmp_path / "boot_id").write_text("another-boot")
    report = make_state(tmp_path).startup()
    assert report.checkpoint_status == "boot-id-changed"
    assert report.orphans_removed == (UID1,)
    assert state.prepared_claims() == {} and state.cdi.claim_uids() == []
    assert checkpoint(state).nodeBootID == "another-boot"


def holders(held: Any) -> dict[str, list[str]]:
    """device -> the claim UIDs holding it, from the conflict check's holdings."""
    return {device: [h.uid for h in found] for device, found in held.devices.items()}


def test_the_conflict_check_sees_an_entry_replaced_under_the_same_claim(state: DeviceState) -> None:
    """The conflict check's holdings are kept between plans while the checkpoint holds the same
    entries: an entry replaced under the same claim UID (another device list or payload) must be
    seen, a plan later and without the claim ever leaving the checkpoint."""
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0"), result("m", MIG_A)]))
    data = checkpoint(state)
    held = state.holdings_of(data)
    assert holders(held) == {"gpu-0": [UID1], MIG_A: [UID1]} and [m.device for m, _ in held.migs] == [MIG_A]
    entry = data.claims[UID1]
    data.claims[UID1] = entry.model_copy(update={"preparedDevices": [entry.preparedDevices[0]]})
    data.claims[UID1].preparedDevices[0] = entry.preparedDevices[0].model_copy(update={"deviceName": "gpu-1"})
    assert holders(state.holdings_of(data)) == {"gpu-1": [UID1]}
    data.claims[UID1] = data.claims[UID1].model_copy(update={"driverData": GpuClaimData()})
    held = state.holdings_of(data)
    assert held.migs == [] and [h.uid for h in held.holders("gpu-1", UID2)] == [UID1]
    assert held.holders("gpu-1", UID1) == []  # a claim's own devices are not in its way


def test_the_conflict_check_extends_its_holdings_by_the_claims_prepared_since(state: DeviceState) -> None:
    """A plan works on the checkpoint as this store last saved it (the same objects)."""
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0")]))
    held = state.holdings_of(state.store.load().data)
    state.prepare(make_claim(UID2, [result("m", MIG_A)]))
    assert state.holdings_of(state.store.load().data) is held and list(held.parts) == [UID1, UID2]
    assert holders(held) == {"gpu-0": [UID1], MIG_A: [UID2]}
    state.unprepare(UID1)
    rebuilt = state.holdings_of(state.store.load().data)
    assert rebuilt is not held and holders(rebuilt) == {MIG_A: [UID2]} and list(rebuilt.parts) == [UID2]
    with pytest.raises(
        ClaimError, match=f"requested device {MIG_A} is already allocated to different claim {UID2}"
    ):
        state.prepare(make_claim(UID1, [result("m", MIG_A)]))


def test_corrupt_checkpoint_recovery(state: DeviceState, tmp_path: Path) -> None:
    reasons: list[str] = []
    claim = make_claim(UID1, [result("gpu", "gpu-0"), result("m", MIG_A)])
    first = state.prepare(claim)
    state.store.path.write_text('{"version": 1, "checksum": "sha256:0", "data": {}}')

    restarted = make_state(tmp_path, on_checkpoint_error=reasons.append)
    report = restarted.startup()  # no exception
    assert reasons == ["checksum"]
    assert report.checkpoint_status == "corrupt" and report.recovered == (UID1,)
    assert list(state.data_dir.glob("checkpoint.json.corrupt-*"))
    entry = checkpoint(state).claims[UID1]
    assert (entry.state, entry.recovered) == ("PrepareStarted", True)
    assert [d.deviceName for d in entry.preparedDevices] == ["gpu-0", MIG_A]
    assert state.cdi.claim_uids() == [UID1]  # kept: containers may still need it
    # devices stay reserved while the claim is unknown
    with pytest.raises(ClaimError, match="already allocated to different claim"):
        restarted.prepare(make_claim(UID2, [result("gpu", "gpu-0")]))
    # the kubelet's retry re-prepares it: same devices, same MIG UUID
    assert restarted.prepare(claim) == first
    assert checkpoint(state).claims[UID1].state == "PrepareCompleted"
    assert [m.uuid for m in restarted.dynamic_mig_devices()] == [mig_uuid(NODE, 3, P1_0, nonce=UID1)]


def test_corrupt_checkpoint_then_unprepare(state: DeviceState, tmp_path: Path) -> None:
    state.prepare(make_claim(UID1, [result("gpu", "gpu-0")]))
    state.store.path.write_text("not json")
    restarted = make_state(tmp_path, on_checkpoint_error=lambda reason: None)
    restarted.unprepare(UID1)  # recovery happens on any load
    assert restarted.prepared_claims() == {} and restarted.cdi.claim_uids() == []


# --- the node lock -------------------------------------------------------------------------------


def read_line(stream: IO[str], deadline: float) -> str:
    remaining = deadline - time.monotonic()
    ready, _, _ = select.select([stream], [], [], max(remaining, 0))
    if not ready:
        raise AssertionError("subprocess did not answer before the deadline")
    return stream.readline().strip()


def test_lock_excludes_another_process(tmp_path: Path) -> None:
    data_dir = tmp_path / "plugin"
    holder = subprocess.Popen(
        [sys.executable, str(HELPER), str(tmp_path), "hold-lock"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    assert holder.stdin is not None and holder.stdout is not None
    try:
        deadline = time.monotonic() + 30
        assert read_line(holder.stdout, deadline) == "locked"
        assert stat.S_IMODE((data_dir / "pu.lock").stat().st_mode) == 0o600
        with pytest.raises(LockTimeoutError, match=r"timed out after 0\.2s waiting for lock"):
            PrepareUnprepareLock(data_dir, timeout=0.2).acquire()
        state = make_state(tmp_path, lock_timeout=0.2)
        with pytest.raises(ClaimError, match="waiting for lock"):
            state.prepare(make_claim(UID1, [result("gpu", "gpu-0")]))
        holder.stdin.write("release\n")
        holder.stdin.flush()
        assert read_line(holder.stdout, deadline) == "released"
        with PrepareUnprepareLock(data_dir, timeout=10):
            pass
        assert holder.wait(timeout=30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_concurrent_threads_are_serialized(state: DeviceState) -> None:
    claims = [
        make_claim(f"e{i}000000-0000-0000-0000-000000000000", [result("g", f"gpu-{i}")]) for i in (0, 1)
    ]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def run(claim: dict[str, Any]) -> None:
        start.wait()
        try:
            state.prepare(claim)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in claims]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert sorted(state.prepared_claims().values()) == ["PrepareCompleted", "PrepareCompleted"]


def test_lock_excludes_within_a_process(tmp_path: Path) -> None:
    with PrepareUnprepareLock(tmp_path), pytest.raises(LockTimeoutError):
        PrepareUnprepareLock(tmp_path, timeout=0.05).acquire()
    with PrepareUnprepareLock(tmp_path, timeout=0.05):
        pass


# --- crash safety ------------------------------------------------------------------------------

CRASH_CLAIM = make_claim(
    UID1,
    [result("gpu", "gpu-0"), result("mig/small", MIG_A)],
    [ts_config("Medium", ["gpu"])],
)


def run_helper(root: Path, args: list[str], crash_at: str | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(CRASH_ENV, None)
    if crash_at:
        env[CRASH_ENV] = crash_at
    return subprocess.run(
        [sys.executable, str(HELPER), str(root), *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_consistent(state: DeviceState) -> None:
    """Every CDI spec has a PrepareCompleted entry and vice versa; no partial entries, no temp files;
    "created" MIG devices belong to completed claims only."""
    data = state.store.peek() or CheckpointData()
    completed = {uid for uid, e in data.claims.items() if e.state == "PrepareCompleted"}
    assert set(data.claims) == completed, f"partial entries left: {data.claims}"
    assert set(state.cdi.claim_uids()) == completed
    assert not [p for p in state.cdi.root.glob(".*.tmp")] if state.cdi.root.exists() else True
    assert not list(state.data_dir.glob(".*.tmp"))


@pytest.mark.parametrize("point", [p for p in CRASH_POINTS if p.startswith("prepare:")])
def test_crash_during_prepare(tmp_path: Path, point: str) -> None:
    claim_file = tmp_path / "claim.json"
    claim_file.write_text(json.dumps(CRASH_CLAIM))
    make_state(tmp_path)  # writes the boot ID file
    if point == "prepare:after-rollback":  # needs a partial prepare to roll back first
        assert (
            run_helper(tmp_path, ["prepare", str(claim_file)], "prepare:after-started").returncode
            == -signal.SIGKILL
        )
    crashed = run_helper(tmp_path, ["prepare", str(claim_file)], point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    state = make_state(tmp_path)
    state.startup()
    assert_consistent(state)
    devices = state.prepare(CRASH_CLAIM)
    assert [d.device_name for d in devices] == ["gpu-0", MIG_A]
    assert [d.request_names for d in devices] == [("gpu",), ("mig",)]
    assert_consistent(state)
    assert state.prepared_claims() == {UID1: "PrepareCompleted"}
    assert [m.uuid for m in state.dynamic_mig_devices()] == [mig_uuid(NODE, 3, P1_0, nonce=UID1)]


PLAIN_CLAIM = make_claim(UID1, [result("gpu", "gpu-0")])  # nothing to undo: unprepared in one step
UNPREPARE_CRASHES = [(CRASH_CLAIM, p) for p in CRASH_POINTS if p.startswith("unprepare:")] + [
    (PLAIN_CLAIM, p)
    for p in ("unprepare:after-lock", "unprepare:after-cdi-removed", "unprepare:after-dropped")
]


@pytest.mark.parametrize(
    ("claim", "point"),
    UNPREPARE_CRASHES,
    ids=[f"{'two' if c is CRASH_CLAIM else 'one'}-step-{p}" for c, p in UNPREPARE_CRASHES],
)
def test_crash_during_unprepare(tmp_path: Path, claim: dict[str, Any], point: str) -> None:
    """Two steps for a claim with something to undo (a dynamic MIG device, a time-slice interval),
    one for a claim without; after a crash at any point, start-up leaves a consistent state (a
    one-step claim killed before its drop is still prepared, its spec restored)."""
    make_state(tmp_path).prepare(claim)
    crashed = run_helper(tmp_path, ["unprepare", UID1], point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    state = make_state(tmp_path)
    state.startup()
    assert_consistent(state)
    state.unprepare(UID1)
    assert_consistent(state)
    assert state.prepared_claims() == {} and state.cdi.claim_uids() == []
    assert state.dynamic_mig_devices() == []


SHARE_CLAIMS = [
    make_claim(
        uid,
        [
            result("gpu", "gpu-4", shareID=share_id, consumedCapacity={"memory": "20Gi"}),
            result("mig", "gpu-5-mig-1g10gb-19-0", shareID=share_id, consumedCapacity={"memory": "4Gi"}),
        ],
        [ts_config("Long", ["gpu"])],
        name=f"share-{i}",
    )
    for i, (uid, share_id) in enumerate(
        [(UID1, "5a7e0000-0000-4000-8000-000000000001"), (UID2, "5a7e0000-0000-4000-8000-000000000002")]
    )
]


@pytest.mark.parametrize("point", [p for p in CRASH_POINTS if p.startswith("unprepare:")])
def test_crash_during_one_shares_unprepare_leaves_the_other_share(
    tmp_path: Path, point: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two claims share a GPU (with a time slice) and a dynamic MIG device (created for the first);
    a SIGKILL at any point of the first one's unprepare, then start-up: the second claim, its spec
    and the MIG device are intact, and once the kubelet's retry unprepares the first, the checkpoint
    lists exactly the second (docs/sharing-design.md#14-state-and-checkpoint-keyed-by-share)."""
    first, second = SHARE_CLAIMS
    before = make_state(tmp_path)
    before.prepare(first)
    before.prepare(second)
    (mig,) = before.dynamic_mig_devices()
    assert mig.uuid == mig_uuid(NODE, 5, P1_0, nonce=UID1)
    second_spec = before.cdi.path(UID2).read_bytes()
    crashed = run_helper(tmp_path, ["unprepare", UID1], point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    caplog.set_level(logging.INFO, logger="dra_fake.gpu.state")
    destroyed = f"dynamic MIG device destroyed claim={UID1}"
    state = make_state(tmp_path)
    state.startup()
    assert_consistent(state)
    assert state.prepared_claims().get(UID2) == "PrepareCompleted"
    assert state.cdi.path(UID2).read_bytes() == second_spec
    assert [m.uuid for m in state.dynamic_mig_devices()] == [mig.uuid]
    state.unprepare(UID1)  # the kubelet retries the unprepare it got no answer to
    assert_consistent(state)
    assert state.prepared_claims() == {UID2: "PrepareCompleted"} and state.cdi.claim_uids() == [UID2]
    assert [m.uuid for m in state.dynamic_mig_devices()] == [mig.uuid]
    assert state.prepare(second) == before.prepare(second)  # idempotent: what it answered before
    assert destroyed not in caplog.text and "time-slice interval reset" not in caplog.text
    state.unprepare(UID2)
    assert state.prepared_claims() == {} and state.dynamic_mig_devices() == []
    assert (
        f"dynamic MIG device destroyed claim={UID2} device=gpu-5-mig-1g10gb-19-0 uuid={mig.uuid}"
        in caplog.text
    )


OWNER_CLAIM = make_claim(UID1, [result("gpu", "gpu-0")], name="owner")
SPOT_CLAIM = make_claim(UID2, [result("gpu", "gpu-0-spot")], name="spot")


@pytest.mark.parametrize("point", [p for p in CRASH_POINTS if p.startswith("prepare:")])
def test_crash_during_a_spot_claims_prepare_leaves_the_owner_and_the_lending_state(
    tmp_path: Path, point: str
) -> None:
    """Idle-GPU lending (docs/sharing.md): an owner on gpu-0, gpu-0 lent (the lending state the
    plugin keeps); a SIGKILL at any point of a spot claim's prepare on gpu-0-spot, then start-up:
    the owner's claim and spec intact, the kept state as it was, and the kubelet's retry prepares
    the spot claim since the restarted plugin still knows gpu-0 is lendable."""
    lent = Lending(LendingSettings(idle_for=0), 1_800_000_000.0)
    lent.observe(1_800_000_005.0, {"gpu-0": Owners(True, 3)})
    make_lending_state(tmp_path).prepare(OWNER_CLAIM)
    kept = tmp_path / "plugin" / LENDING_FILE
    kept.write_text(json.dumps(lent.saved()))
    kept_state = kept.read_bytes()
    owner_spec = make_lending_state(tmp_path).cdi.path(UID1).read_bytes()
    claim_file = tmp_path / "spot.json"
    claim_file.write_text(json.dumps(SPOT_CLAIM))
    if point == "prepare:after-rollback":  # needs a partial prepare to roll back first
        first = run_helper(tmp_path, ["prepare-spot", str(claim_file)], "prepare:after-started")
        assert first.returncode == -signal.SIGKILL, first.stderr
    crashed = run_helper(tmp_path, ["prepare-spot", str(claim_file)], point)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr

    state = make_lending_state(tmp_path)
    state.startup()
    assert_consistent(state)
    assert state.prepared_claims()[UID1] == "PrepareCompleted"
    assert state.cdi.path(UID1).read_bytes() == owner_spec
    assert kept.read_bytes() == kept_state
    assert [d.device_name for d in state.prepare(SPOT_CLAIM)] == ["gpu-0-spot"]
    assert state.prepared_claims() == {UID1: "PrepareCompleted", UID2: "PrepareCompleted"}


def test_a_claim_without_undo_is_unprepared_with_one_checkpoint_write(
    state: DeviceState, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As NVIDIA's plugin unprepares (spec removed, entry dropped); a claim with something to undo
    is marked partial first (two writes), so that a crash in its undo rolls it back."""
    saves: list[set[str]] = []
    save = state.store.save
    monkeypatch.setattr(
        state.store, "save", lambda data, **kw: (saves.append(set(data.claims)), save(data, **kw))
    )
    state.prepare(PLAIN_CLAIM)
    state.prepare(make_claim(UID2, [result("mig", MIG_B)], name="dynamic-mig"))  # destroyed on undo
    saves.clear()
    state.unprepare(UID1)
    assert saves == [{UID2}]
    state.unprepare(UID2)
    assert saves == [{UID2}, {UID2}, set()]
    assert state.prepared_claims() == {} and state.cdi.claim_uids() == []


def test_every_crash_point_is_reachable(tmp_path: Path) -> None:
    """Each named crash point is actually checked on the code path (none is dead)."""
    import dra_fake.core.state as core_state
    import dra_fake.gpu.state as gpu_state

    seen: list[str] = []
    originals = gpu_state.crash_point, core_state.crash_point
    gpu_state.crash_point = core_state.crash_point = seen.append  # type: ignore[assignment]
    try:
        state = make_state(tmp_path)
        leave_started(state, UID1, [result("m", MIG_A)])
        state.prepare(CRASH_CLAIM)
        state.unprepare(UID1)
    finally:
        gpu_state.crash_point, core_state.crash_point = originals
    assert set(seen) == set(CRASH_POINTS)


def test_crash_points_are_read_from_a_comma_separated_list() -> None:
    from dra_fake.core.crashpoints import crash_point, crash_points_wanted

    assert crash_points_wanted({}) == frozenset()
    assert crash_points_wanted({CRASH_ENV: ""}) == frozenset()
    wanted = crash_points_wanted({CRASH_ENV: "prepare:after-cdi,,unprepare:after-lock"})
    assert wanted == {"prepare:after-cdi", "unprepare:after-lock"}
    crash_point("prepare:after-cdi")  # the suite's own environment names none: returns
