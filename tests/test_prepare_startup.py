"""DeviceState after a partial prepare, at startup (reconciliation, reboot, corrupt checkpoints), its
conflict check across prepares, and the node lock between processes and threads
(dra_fake.gpu.state on dra_fake.core.state, dra_fake.core.locking; tests/statebed.py)."""

from __future__ import annotations

import select
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest
from crash_helper import NODE, P1_0, make_claim, make_state, result

from dra_fake.core.claims import ClaimError
from dra_fake.core.locking import LockTimeoutError, PrepareUnprepareLock
from dra_fake.gpu.claimdata import GpuClaimData
from dra_fake.gpu.devices import mig_uuid
from dra_fake.gpu.state import DeviceState
from tests.statebed import HELPER, MIG_A, REPO, UID1, UID2, checkpoint, leave_started


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
