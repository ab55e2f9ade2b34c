"""DeviceState's crash safety: a plugin killed at every crash point of prepare and unprepare (in a
subprocess, tests/crash_helper.py) leaves a state the next start makes consistent, shares and the
lending state included (dra_fake.core.crashpoints; tests/statebed.py)."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from crash_helper import NODE, P1_0, make_claim, make_lending_state, make_state, result

from dra_fake.core.checkpoint import CheckpointData
from dra_fake.core.crashpoints import CRASH_ENV, CRASH_POINTS
from dra_fake.gpu.devices import mig_uuid
from dra_fake.gpu.lending import Lending, LendingSettings, Owners
from dra_fake.gpu.lendingfile import FILE_NAME as LENDING_FILE
from dra_fake.gpu.state import DeviceState
from tests.statebed import HELPER, MIG_A, MIG_B, REPO, UID1, UID2, leave_started, ts_config

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
