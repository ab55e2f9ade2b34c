"""The checkpoint's journal (dra_fake.core.journal, CheckpointStore.save/load): a save appends what
changed; a fresh store (a restarted plugin) reads the same state back, whatever the sequence of
changes, a torn last append, a stale journal left by an interrupted compaction."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dra_fake.core import checkpoint, checkpointstore, journal
from dra_fake.core.checkpoint import CheckpointData, ClaimEntry
from dra_fake.core.checkpointstore import CheckpointStore
from dra_fake.gpu.claimdata import GpuClaimData, TimeSliceRecord

Data = CheckpointData[GpuClaimData]
Entry = ClaimEntry[GpuClaimData]
BOOT = "boot-a"


def entry(name: str, state: str = "PrepareStarted") -> Entry:
    return Entry.model_validate(
        {
            "state": state,
            "name": name,
            "namespace": "ns",
            "driverData": {"timeSlicing": [{"uuid": f"GPU-{name}", "interval": "Long"}]},
            "cdiSpec": {"cdiVersion": "0.6.0", "kind": "k8s.gpu.nvidia.com/claim", "devices": []},
        }
    )


def new_store(directory: Path) -> CheckpointStore[GpuClaimData]:
    boot = directory / "boot_id"
    if not boot.exists():
        directory.mkdir(parents=True, exist_ok=True)
        boot.write_text(BOOT)
    return CheckpointStore(
        directory / "plugin", GpuClaimData, boot, on_corrupt=lambda _: None, clock=lambda: 0.0
    )


def reread(directory: Path) -> Data:
    """What a restarted plugin reads."""
    result = new_store(directory).load()
    assert result.status == "ok"
    return result.data


def add(store: CheckpointStore[GpuClaimData], *uids: str) -> Data:
    """Load, add a PrepareStarted entry per uid, save: one save's worth of changes."""
    data = store.load().data
    for uid in uids:
        data.claims[uid] = entry(uid)
    store.save(data)
    return data


def written(store: CheckpointStore[GpuClaimData]) -> bytes:
    """The journal's records, without the zeros written ahead after them."""
    return store.journal_path.read_bytes().rstrip(b"\0")


def lines(store: CheckpointStore[GpuClaimData]) -> list[dict[str, object]]:
    return [json.loads(line.split(b" ", 1)[1]) for line in written(store).splitlines()]


def test_a_save_appends_only_what_changed_and_a_fresh_store_reads_it_back(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    data = store.load().data
    data.claims["a"] = entry("a")
    store.save(data)  # the first save writes the checkpoint and an empty journal
    base = store.path.stat().st_ino
    assert lines(store) == [{"base": json.loads(store.path.read_bytes())["checksum"]}]

    data = store.load().data
    data.claims["b"] = entry("b")
    data.claims["a"].state = "PrepareCompleted"
    store.save(data)
    data = store.load().data
    del data.claims["b"]
    store.save(data)
    store.save(store.load().data)  # nothing changed: nothing written

    assert store.path.stat().st_ino == base  # the checkpoint itself was not rewritten
    records = lines(store)[1:]
    assert [(r["uid"], "entry" in r) for r in records] == [("a", True), ("b", True), ("b", False)]
    assert records[0]["entry"]["state"] == "PrepareCompleted"  # type: ignore[index]
    assert reread(tmp_path) == data
    assert set(reread(tmp_path).claims) == {"a"}


def test_a_torn_last_append_is_ignored_and_the_next_save_starts_a_new_journal(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    add(store, "a")
    saved = reread(tmp_path)
    torn = journal.put(b'"b"', entry("b").model_dump_json().encode())
    for tail in (torn[: len(torn) // 2], torn[:-1], b"\0" * len(torn) + b"\n"):
        end = len(written(store))
        with store.journal_path.open("r+b") as f:  # a crash in the middle of a record's write
            f.seek(end)
            f.write(tail)
        assert reread(tmp_path) == saved
        store = new_store(tmp_path)
        data = store.load().data
        data.claims["c"] = entry("c")
        base = store.path.stat().st_ino
        store.save(data)  # not appended after the torn line: a new checkpoint and journal
        assert store.path.stat().st_ino != base and len(lines(store)) == 1
        assert set(reread(tmp_path).claims) == {"a", "c"}
        del data.claims["c"]
        store.save(data)
        assert reread(tmp_path) == saved


def test_a_journal_that_names_another_checkpoint_is_ignored(tmp_path: Path) -> None:
    """A compaction wrote the new checkpoint and crashed before replacing the journal."""
    store = new_store(tmp_path)
    add(store, "a")
    data = store.load().data
    data.claims["b"] = entry("b")
    del data.claims["a"]
    store.save(data)  # journal: header, b, a gone
    old_journal = store.journal_path.read_bytes()
    data.claims["a"] = entry("a")
    store.path.write_bytes(store.codec.encode(data))  # the compaction's checkpoint: a and b
    store.journal_path.write_bytes(old_journal)  # header names the first checkpoint
    assert set(reread(tmp_path).claims) == {"a", "b"}


def test_a_bad_line_before_a_good_one_is_corruption_and_both_files_go_aside(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    add(store, "a")
    for uid in ("b", "c"):
        data = store.load().data
        data.claims[uid] = entry(uid)
        store.save(data)
    raw = store.journal_path.read_bytes().split(b"\n")
    raw[1] = raw[1].replace(b'"b"', b'"x"')  # the checksum of the middle record no longer holds
    store.journal_path.write_bytes(b"\n".join(raw))
    result = new_store(tmp_path).load()
    assert (result.status, result.reason) == ("corrupt", checkpoint.REASON_JOURNAL)
    assert result.quarantined is not None and result.quarantined.exists()
    assert Path(f"{result.quarantined}.journal").read_bytes() == b"\n".join(raw)
    assert not store.journal_path.exists()


def test_a_line_nested_too_deeply_is_a_bad_line(tmp_path: Path) -> None:
    """The JSON decoder's depth limit (a RecursionError) is a bad line like any other."""
    store = new_store(tmp_path)
    add(store, "a")
    deep = b"[" * 100_000
    with store.journal_path.open("ab") as f:
        f.write(hashlib.sha256(deep).hexdigest().encode() + b" " + deep + b"\n")
    assert set(reread(tmp_path).claims) == {"a"}  # the last line: taken for torn
    with store.journal_path.open("ab") as f:
        f.write(journal.put(b'"b"', entry("b").model_dump_json().encode()))
    result = new_store(tmp_path).load()  # now before a good line: corruption, not an exception
    assert (result.status, result.reason) == ("corrupt", checkpoint.REASON_JOURNAL)


def test_the_journal_is_compacted_once_larger_than_the_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpointstore, "COMPACT_MIN_BYTES", 4096)
    store = new_store(tmp_path)
    add(store, "a")
    inodes = {store.path.stat().st_ino}
    for n in range(60):
        data = store.load().data
        data.claims["a"].state = "PrepareCompleted" if n % 2 else "PrepareStarted"
        store.save(data)
        inodes.add(store.path.stat().st_ino)
        assert len(written(store)) <= 4096 + 1024  # one record past the limit at most
    assert len(inodes) > 2  # compacted more than once
    assert reread(tmp_path) == data


def test_records_go_over_zeros_written_ahead_and_the_file_grows_now_and_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record that fits in the zeros ahead changes neither the journal's size nor its blocks, so
    its fdatasync need not commit the file system's journal (docs/prepare.md#the-journal)."""
    monkeypatch.setattr(journal, "GROW_BYTES", 4096)
    store = new_store(tmp_path)
    add(store, "a")  # the first save: checkpoint and a journal of one header line
    sizes = []
    for n in range(40):
        data = add(store, f"u{n}")
        raw = store.journal_path.read_bytes()
        assert raw.endswith(b"\0") and set(raw[len(written(store)) :]) == {0}
        sizes.append(len(raw))
    assert sizes == sorted(sizes) and 3 <= len(set(sizes)) <= 10  # grown once per ~4 KiB of records
    assert reread(tmp_path) == data


def test_a_save_looks_for_changes_in_the_claims_it_names_and_everywhere_when_counts_differ(
    tmp_path: Path,
) -> None:
    store = new_store(tmp_path)
    add(store, "a", "b")
    data = store.load().data
    data.claims["a"].state = "PrepareCompleted"
    data.claims["b"].state = "PrepareCompleted"
    store.save(data, touched=["a"])  # "b" not named: not looked at
    assert [r["uid"] for r in lines(store)[1:]] == ["a"]
    data.claims["c"] = entry("c")
    store.save(data, touched=[])  # a claim more than the store knows of: the whole pass
    assert [r["uid"] for r in lines(store)[1:]] == ["a", "b", "c"]
    del data.claims["c"]
    store.save(data, touched=["c", "c"])
    assert [r.get("uid") for r in lines(store)[1:]] == ["a", "b", "c", "c"]
    assert reread(tmp_path) == data


def test_a_write_in_place_is_seen_by_a_store_that_read_the_files_even_with_a_coarse_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write in place keeps the journal's inode and size; a reader tells the files apart by
    their mtime alone, which a coarse clock (a kernel tick) leaves the same for writes within one
    tick. Here every write leaves it the same: the writer still moves it on."""
    store = new_store(tmp_path)
    add(store, "a")
    add(store, "b")  # the journal has zeros ahead now
    reader = new_store(tmp_path)
    assert set(reader.load().data.claims) == {"a", "b"}
    real_pwrite = os.pwrite

    def within_one_tick(fd: int, data: bytes, offset: int) -> int:
        before = os.fstat(fd)
        written = real_pwrite(fd, data, offset)
        os.utime(fd, ns=(before.st_atime_ns, before.st_mtime_ns))
        return written

    monkeypatch.setattr(os, "pwrite", within_one_tick)
    size = store.journal_path.stat().st_size
    add(store, "c")
    assert store.journal_path.stat().st_size == size  # written in place
    assert set(reader.load().data.claims) == {"a", "b", "c"}


def test_an_entry_saved_again_records_its_state_and_any_field_replaced_with_it(tmp_path: Path) -> None:
    """A prepare saves its entry twice (PrepareStarted, then PrepareCompleted): the second record
    reuses the first's serialised form for the fields that were not replaced (Codec.entry_json),
    and one replaced at the same time (allowed: ClaimEntry) is recorded as it is now."""
    store = new_store(tmp_path)
    data = store.load().data
    data.claims["u1"] = entry("u1")
    data.claims["u2"] = entry("u2")
    store.save(data, durable=False, touched=["u1", "u2"])
    data.claims["u1"].state = "PrepareCompleted"
    data.claims["u2"].state = "PrepareCompleted"
    respec = {"kind": "k8s.gpu.nvidia.com/claim", "devices": [{"name": "u2-gpu-0"}]}
    data.claims["u2"].cdiSpec = respec
    store.save(data, touched=["u1", "u2"])
    back = reread(tmp_path)
    assert back == data
    assert back.claims["u1"].state == "PrepareCompleted"
    assert back.claims["u2"].cdiSpec == {
        "kind": "k8s.gpu.nvidia.com/claim",
        "devices": [{"name": "u2-gpu-0"}],
    }


def test_a_format_2_checkpoint_ignores_a_journal_beside_it(tmp_path: Path) -> None:
    """A format-2 file was written by an older binary (after a downgrade): the journal beside it
    is older than that file."""
    store = new_store(tmp_path)
    add(store, "a")
    add(store, "b")
    payload = json.loads(store.path.read_bytes())["data"]  # holds only a
    store.path.write_text(
        json.dumps({"version": 2, "checksum": checkpoint.checksum(payload), "data": payload})
    )
    assert set(reread(tmp_path).claims) == {"a"}


def test_a_removed_journal_makes_the_next_save_rewrite_both(tmp_path: Path) -> None:
    store = new_store(tmp_path)
    add(store, "a")
    os.unlink(store.journal_path)
    add(store, "b")
    assert set(reread(tmp_path).claims) == {"a", "b"}


OPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "state", "unpreparing", "drop", "compact", "restart"]),
        st.sampled_from(["u1", "u2", "u3", "\u00fc4"]),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS, named=st.booleans())
def test_any_sequence_of_saves_reads_back_the_same(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, str]], named: bool
) -> None:
    """`named`: each save names the claim it touched, as a prepare or an unprepare does."""
    directory = tmp_path_factory.mktemp("journal")
    store = new_store(directory)
    data = store.load().data
    for op, uid in ops:
        if op == "restart":
            store = new_store(directory)
        data = store.load().data
        if op == "put":
            data.claims[uid] = entry(uid)
            data.claims[uid].driverData.timeSlicing.append(TimeSliceRecord(uuid="GPU-x", interval="Short"))
        elif op == "state" and uid in data.claims:
            data.claims[uid].state = "PrepareCompleted"
        elif op == "unpreparing" and uid in data.claims:
            data.claims[uid].unpreparing = True
        elif op == "drop":
            data.claims.pop(uid, None)
        store.save(data, compact=op == "compact", touched=[uid] if named else None)
        assert reread(directory) == data
