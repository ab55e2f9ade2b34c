"""Group commit (dra_fake.core.groupcommit): callers queued behind the node lock are served in one
batch, each with its own outcome; the GPU state prepares and unprepares such batches with one
checkpoint write per step."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from crash_helper import make_claim, make_state, opaque, result
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_fake.core.claims import ClaimError
from dra_fake.core.groupcommit import GroupCommit
from dra_fake.core.locking import LockTimeoutError, NodeSerializer, PrepareUnprepareLock
from dra_fake.gpu.devnodes import DeviceNodes
from dra_fake.gpu.state import DeviceState


def uid(i: int) -> str:
    return f"{i:08x}-0000-0000-0000-000000000000"


def wait_until(what: str, check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


Started = tuple[list[threading.Thread], list[Any]]


def in_threads(calls: Sequence[Callable[[], Any]]) -> Started:
    """Start each call in its own thread (`join` gives their results)."""
    out: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        try:
            out[i] = calls[i]()
        except BaseException as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    return threads, out


def join(started: Started) -> list[Any]:
    """Each call's return value or exception, in order."""
    threads, out = started
    for t in threads:
        t.join(timeout=60)
        assert not t.is_alive()
    return list(out)


def queued(group: GroupCommit[Any]) -> int:
    with group._queue_lock:
        return len(group._queue)


def behind_a_leader(
    serializer: NodeSerializer, group: GroupCommit[Any], calls: Sequence[Callable[[], Any]]
) -> list[Any]:
    """Run `calls` while another process holds the node lock: the first leads a batch of its own
    (it has taken its batch and waits for the flock) before the others start, so that they all
    queue for the next batch. Their outcomes, in order."""
    with PrepareUnprepareLock(serializer.data_dir):
        leader = in_threads(calls[:1])
        wait_until("the first caller leads", lambda: serializer._mutex.locked() and queued(group) == 0)
        others = in_threads(calls[1:])
        wait_until("the others queued", lambda: queued(group) == len(calls) - 1)
    return join(leader) + join(others)


def test_callers_queued_behind_the_lock_run_as_one_batch(tmp_path: Path) -> None:
    batches: list[list[int]] = []
    serializer = NodeSerializer(tmp_path)
    group: GroupCommit[int] = GroupCommit(serializer, batches.append)
    calls = [functools.partial(group.submit, i) for i in range(6)]
    assert behind_a_leader(serializer, group, calls) == [None] * 6
    assert [len(b) for b in batches] == [1, 5]
    assert sorted(i for b in batches for i in b) == list(range(6))


def test_a_failing_batch_fails_every_caller_in_it_and_no_other(tmp_path: Path) -> None:
    def run(items: list[int]) -> None:
        if len(items) > 1:
            raise RuntimeError(f"batch {sorted(items)} failed")

    serializer = NodeSerializer(tmp_path)
    group: GroupCommit[int] = GroupCommit(serializer, run)
    outcomes = behind_a_leader(serializer, group, [functools.partial(group.submit, i) for i in range(3)])
    failed = [o for o in outcomes if isinstance(o, RuntimeError)]
    assert outcomes[0] is None and len(failed) == 2
    assert all("failed" in str(f) for f in failed)
    group.submit(7)  # the group works on after a failed batch


def test_a_caller_that_times_out_is_not_run_later(tmp_path: Path) -> None:
    ran: list[int] = []
    group: GroupCommit[int] = GroupCommit(NodeSerializer(tmp_path, timeout=0.2), ran.extend)
    with PrepareUnprepareLock(tmp_path), pytest.raises(LockTimeoutError):
        group.submit(1)
    assert queued(group) == 0
    group.submit(2)
    assert ran == [2]


# --- the GPU state's batches ----------------------------------------------------------------------


def counting_saves(state: DeviceState) -> list[int]:
    saves: list[int] = []
    real = state.store.save

    def save(data: Any, **options: Any) -> None:
        saves.append(len(data.claims))
        real(data, **options)

    state.store.save = save  # type: ignore[method-assign,assignment]
    return saves


def test_concurrent_prepares_share_their_checkpoint_writes(tmp_path: Path) -> None:
    state = make_state(tmp_path)
    saves = counting_saves(state)
    claims = [
        make_claim(uid(0), [result("gpu", "gpu-0")]),
        make_claim(uid(1), [result("gpu", "gpu-1")]),
        make_claim(uid(2), [result("gpu", "gpu-1")]),  # the device uid(1) gets: fails alone
        make_claim(uid(3), [result("mig", "gpu-2-mig-1g10gb-19-0")]),
        make_claim(uid(3), [result("mig", "gpu-2-mig-1g10gb-19-0")]),  # the same claim twice
    ]
    calls = [functools.partial(state.prepare, c) for c in claims]
    outcomes = behind_a_leader(state._serializer, state._prepares, calls)

    errors = [o for o in outcomes if isinstance(o, ClaimError)]
    assert len(errors) == 1
    assert "already allocated to different claim" in str(errors[0])
    assert outcomes[3] == outcomes[4] and not isinstance(outcomes[3], BaseException)
    prepared = state.prepared_claims()
    assert uid(0) in prepared and uid(3) in prepared
    assert (uid(1) in prepared) != (uid(2) in prepared)
    assert set(prepared.values()) == {"PrepareCompleted"}
    assert state.cdi.claim_uids() == sorted(state.prepared_claims())
    # Two batches (the leader alone, then the other four): PrepareStarted + PrepareCompleted each.
    assert len(saves) == 4


def test_a_batch_decides_the_device_nodes_once_for_all_its_claims(tmp_path: Path) -> None:
    """Reading /proc/devices costs the kernel ~70 us: once per batch, not per claim; every claim
    of the batch gets the nodes of that one decision."""
    decisions: list[DeviceNodes] = []

    def device_nodes() -> DeviceNodes:
        decisions.append(DeviceNodes(121))
        return decisions[-1]

    state = make_state(tmp_path, device_nodes=device_nodes)
    claims = [make_claim(uid(i), [result("gpu", f"gpu-{i}")]) for i in (0, 1, 3)]
    calls = [functools.partial(state.prepare, c) for c in claims]
    outcomes = behind_a_leader(state._serializer, state._prepares, calls)
    assert not any(isinstance(o, BaseException) for o in outcomes)
    assert len(decisions) == 2  # the leader's batch of one, then the other two
    for i in (0, 1, 3):
        spec = state.cdi.path(uid(i)).read_text()
        assert "/dev/nvidia-uvm" in spec and f"/dev/nvidia{i}\n" in spec


def test_a_lone_prepare_costs_one_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PrepareStarted is appended to the journal without an fdatasync (a write-ahead record: only
    a crash of the machine loses it, and the reboot discards the checkpoint), the CDI spec is
    written without an fsync (the entry holds it), PrepareCompleted is appended and fdatasynced:
    one fsync, the reference driver's count (docs/prepare.md#crash-safety)."""
    state = make_state(tmp_path)
    state.startup()  # its compaction out of the way: this store wrote the files
    synced: list[str] = []

    def counting(real: Callable[[int], None]) -> Callable[[int], None]:
        def sync(fd: int) -> None:
            synced.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name)
            real(fd)

        return sync

    monkeypatch.setattr(os, "fsync", counting(os.fsync))
    monkeypatch.setattr(os, "fdatasync", counting(os.fdatasync))
    journal = state.store.journal_path
    before = journal.read_bytes().rstrip(b"\0")  # the records, without the zeros after them
    state.prepare(make_claim(uid(0), [result("gpu", "gpu-0")]))
    assert synced == ["checkpoint.journal"]
    records = journal.read_bytes().rstrip(b"\0")[len(before) :].decode().splitlines()
    assert ['"PrepareStarted"' in r for r in records] == [True, False]  # both appended, in order
    assert state.cdi.exists(uid(0))
    synced.clear()
    state.unprepare(uid(0))
    assert synced == ["checkpoint.journal"]


MEDIUM_TIME_SLICES = opaque(
    {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Medium"}},
    }
)


@pytest.mark.parametrize("undo", [False, True], ids=["nothing-to-undo", "something-to-undo"])
def test_concurrent_unprepares_share_their_checkpoint_writes(tmp_path: Path, undo: bool) -> None:
    state = make_state(tmp_path)
    if undo:  # a time-slice interval to reset, a dynamic MIG device to destroy
        claims = [make_claim(uid(i), [result("gpu", f"gpu-{i}")], [MEDIUM_TIME_SLICES]) for i in range(2)]
        claims += [make_claim(uid(i), [result("mig", f"gpu-3-mig-1g10gb-19-{i - 2}")]) for i in (2, 3)]
    else:
        devices = ["gpu-0", "gpu-1", "gpu-3", "gpu-2-mig-1g10gb-19-0"]
        claims = [make_claim(uid(i), [result("gpu", device)]) for i, device in enumerate(devices)]
    for claim in claims:
        state.prepare(claim)
    saves = counting_saves(state)
    calls = [functools.partial(state.unprepare, uid(i)) for i in range(4)]
    assert behind_a_leader(state._serializer, state._unprepare_begin, calls) == [None] * 4
    assert state.prepared_claims() == {}
    assert state.cdi.claim_uids() == []
    if undo:
        # Marking (a save that drops nothing): the leader alone, then the three queued behind it, in
        # one save. Dropping: as the undos finish, the leader's maybe before the three are marked;
        # one to four saves, so 3 to 6 in all.
        markings = [count for before, count in zip([4, *saves], saves, strict=False) if count == before]
        assert markings == [4, 3] or markings == [4, 4], saves
        assert 3 <= len(saves) <= 6 and saves[-1] == 0, saves
    else:
        assert len(saves) == 2  # dropped in one step: the leader alone, then three


# --- every save names what it changed ---------------------------------------------------------


def checking_touched(state: DeviceState, checked: list[tuple[list[str], bool]]) -> None:
    """Make every save that names the claims it `touched` prove it: the codec's changes found
    over those claims must be the changes the whole pass over every claim finds (a save writes
    only what it looks for: a claim changed but not named would be missing from the journal).
    Appends (touched, whether they matched) to `checked`: a failure inside a save would only fail
    its claims, which the state reports as a claim error."""
    codec = state.store.codec
    real = codec.changes

    def changes(data: Any, touched: Any = None) -> tuple[list[str], list[str]]:
        if touched is None:
            return real(data)
        before = dict(codec._entries)
        every = real(data)
        codec._entries = before  # the whole pass forgot the dropped claims: undo it
        named = real(data, touched)
        same = (sorted(named[0]), sorted(named[1])) == (sorted(every[0]), sorted(every[1]))
        checked.append((list(touched), same))
        return named

    codec.changes = changes  # type: ignore[method-assign]


# Claims on the test node's devices (crash_helper.make_devices): a full GPU, one with a
# time-slice interval to reset, static MIG, dynamic MIG to destroy, and two that conflict with
# others (gpu-0; the full gpu-3 under the dynamic MIG device).
TOUCH_CLAIMS = [
    [result("gpu", "gpu-0")],
    [result("gpu", "gpu-1")],
    [result("mig", "gpu-2-mig-1g10gb-19-0")],
    [result("mig", "gpu-3-mig-1g10gb-19-0")],
    [result("gpu", "gpu-3")],
    [result("gpu", "gpu-0")],
]
TOUCH_OPS: st.SearchStrategy[list[tuple[str, Any]]] = st.lists(
    st.one_of(
        st.tuples(st.just("prepare"), st.sets(st.integers(0, 5), min_size=1, max_size=3)),
        st.tuples(st.just("unprepare"), st.sets(st.integers(0, 5), min_size=1, max_size=3)),
        st.tuples(st.just("restart"), st.just(frozenset())),
    ),
    max_size=8,
)


def in_one_batch(state: DeviceState, op: str, indexes: list[int]) -> list[Any]:
    """Prepare or unprepare the claims of `indexes` at once: the first leads a batch of its own,
    the others queue behind the node lock and run as the next batch. Their outcomes."""
    configs = {1: [MEDIUM_TIME_SLICES]}

    def prepare(i: int) -> Any:
        return state.prepare(make_claim(uid(i), TOUCH_CLAIMS[i], configs.get(i)))

    def unprepare(i: int) -> Any:
        return state.unprepare(uid(i))

    calls = [functools.partial(prepare if op == "prepare" else unprepare, i) for i in indexes]
    group: GroupCommit[Any] = state._prepares if op == "prepare" else state._unprepare_begin
    return behind_a_leader(state._serializer, group, calls)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=TOUCH_OPS)
def test_every_save_names_the_claims_it_changed(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, frozenset[int]]]
) -> None:
    """Prepares and unprepares, alone and in batches (queued behind the node lock), succeeding,
    failing on a conflict, with and without something to undo, across restarts: each save's
    `touched` covers every claim it changed, and a restarted plugin reads back what was prepared."""
    root = tmp_path_factory.mktemp("touched")
    state = make_state(root)
    checked: list[tuple[list[str], bool]] = []
    checking_touched(state, checked)
    prepared_any = False
    for op, picked in ops:
        if op == "restart":
            state = make_state(root)
            state.startup()
            checking_touched(state, checked)
            continue
        outcomes = in_one_batch(state, op, sorted(picked))
        for outcome in outcomes:
            assert outcome is None or isinstance(outcome, (list, ClaimError)), outcome
            prepared_any = prepared_any or isinstance(outcome, list)
    held = state.prepared_claims()
    assert make_state(root).prepared_claims() == held
    assert sorted(held) == state.cdi.claim_uids()
    assert [touched for touched, same in checked if not same] == []
    assert checked or not prepared_any  # a prepare saves with the claims it touched
