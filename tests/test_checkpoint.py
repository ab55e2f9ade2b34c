"""Checkpoint format (2, and 1 as written before), boot-ID invalidation and corruption handling
(dra_fake.core.checkpoint)."""

from __future__ import annotations

import hashlib
import json
import logging
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from computedomain.plugin.state import DomainClaimData
from dra_fake.core import checkpoint, checkpointstore, metrics
from dra_fake.core.checkpoint import CheckpointData, CheckpointedDevice, ClaimEntry
from dra_fake.core.checkpointcodec import Codec
from dra_fake.core.checkpointstore import CheckpointStore
from dra_fake.gpu.claimdata import GpuClaimData, MigDeviceRecord, TimeSliceRecord

DATA = Path(__file__).with_name("data")
Data = CheckpointData[GpuClaimData]
Entry = ClaimEntry[GpuClaimData]
CODEC = Codec(GpuClaimData)

BOOT_A = "aaaaaaaa-0000-0000-0000-000000000000"
BOOT_B = "bbbbbbbb-0000-0000-0000-000000000000"


def sample() -> Data:
    return Data(
        claims={
            "uid-1": Entry(
                state="PrepareCompleted",
                name="c1",
                namespace="ns",
                preparedDevices=[
                    CheckpointedDevice(
                        requests=["gpu"],
                        poolName="node-a",
                        deviceName="gpu-0",
                        cdiDeviceIDs=["k8s.gpu.nvidia.com/claim=uid-1-gpu-0"],
                    )
                ],
                driverData=GpuClaimData(
                    migDevices=[
                        MigDeviceRecord(
                            device="gpu-3-mig-1g10gb-19-0",
                            uuid="MIG-x",
                            parentUUID="GPU-p",
                            gpuIndex=3,
                            profile="1g.10gb",
                            giProfileID=19,
                            placementStart=0,
                            placementSize=1,
                        )
                    ]
                ),
                cdiSpec={"cdiVersion": "0.3.0"},
            ),
            "uid-2": Entry(state="PrepareStarted", name="c2", namespace="ns", driverData=GpuClaimData()),
        }
    )


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "plugin"
        self.boot = tmp_path / "boot_id"
        self.boot.write_text(BOOT_A + "\n")
        self.reports: list[str] = []
        self.store = CheckpointStore(
            self.dir, GpuClaimData, self.boot, on_corrupt=self.reports.append, clock=lambda: 0.0
        )

    @property
    def path(self) -> Path:
        return self.dir / "checkpoint.json"

    def write_document(self, document: Any) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(document))


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return Env(tmp_path)


def test_missing_is_empty(env: Env) -> None:
    result = env.store.load()
    assert result.status == "missing"
    assert result.data == Data(nodeBootID=BOOT_A)
    assert not env.path.exists()  # nothing written by a load


def test_round_trip_format_and_mode(env: Env) -> None:
    env.store.save(sample())
    assert stat.S_IMODE(env.path.stat().st_mode) == 0o600
    assert stat.S_IMODE((env.dir / "checkpoint.journal").stat().st_mode) == 0o600
    assert sorted(p.name for p in env.dir.iterdir()) == [
        "checkpoint.journal",
        "checkpoint.json",
    ]  # no temp files
    document = json.loads(env.path.read_text())
    assert document["version"] == 3
    assert (
        document["checksum"]
        == "sha256:"
        + hashlib.sha256(
            json.dumps(document["data"], sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()
    )
    assert document["data"]["nodeBootID"] == BOOT_A
    entry = document["data"]["claims"]["uid-1"]
    assert entry["state"] == "PrepareCompleted"
    assert entry["preparedDevices"][0] == {
        "requests": ["gpu"],
        "poolName": "node-a",
        "deviceName": "gpu-0",
        "cdiDeviceIDs": ["k8s.gpu.nvidia.com/claim=uid-1-gpu-0"],
        "adminAccess": False,
    }
    result = env.store.load()
    assert result.status == "ok"
    expected = sample()
    expected.nodeBootID = BOOT_A
    assert result.data == expected
    assert env.reports == []


def test_boot_id_change_discards(env: Env, caplog: pytest.LogCaptureFixture) -> None:
    env.store.save(sample())
    env.boot.write_text(BOOT_B)
    assert env.store.load().status == "ok"  # the boot ID is read once: a reboot ends the process
    after_reboot = CheckpointStore(env.dir, GpuClaimData, env.boot, on_corrupt=env.reports.append)
    with caplog.at_level(logging.WARNING, logger="dra_fake.core.checkpointstore"):
        result = after_reboot.load()
    assert result.status == "boot-id-changed"
    assert result.data == Data(nodeBootID=BOOT_B)
    assert "checkpoint from an earlier boot discarded" in caplog.text
    assert f"storedBootID={BOOT_A}" in caplog.text
    assert env.reports == []  # not an error


def test_checkpoint_without_boot_id_is_stamped(env: Env) -> None:
    data = sample()
    payload = data.model_dump(mode="json", exclude_none=True)
    payload["nodeBootID"] = ""
    env.write_document({"version": 2, "checksum": checkpoint.checksum(payload), "data": payload})
    result = env.store.load()
    assert result.status == "ok"
    assert result.data.nodeBootID == BOOT_A
    assert set(result.data.claims) == {"uid-1", "uid-2"}


def test_unreadable_boot_id_keeps_checkpoint(env: Env) -> None:
    env.store.save(sample())
    env.boot.unlink()
    assert env.store.load().status == "ok"


def valid_document() -> dict[str, Any]:
    payload = sample().model_dump(mode="json", exclude_none=True)
    payload["nodeBootID"] = BOOT_A
    return {"version": 2, "checksum": checkpoint.checksum(payload), "data": payload}


def tampered() -> dict[str, Any]:
    doc = valid_document()
    doc["data"]["claims"]["uid-1"]["state"] = "PrepareStarted"
    return doc


def bad_schema() -> dict[str, Any]:
    doc = valid_document()
    doc["data"]["claims"]["uid-1"]["state"] = "Prepared"
    doc["checksum"] = checkpoint.checksum(doc["data"])
    return doc


CORRUPT: dict[str, tuple[Any, str]] = {
    "bad JSON": ('{"version": 1, "checksum": "sha256:', "json"),
    "binary garbage": (b"\xff\xfe\x00garbage", "json"),
    "empty file": ("", "json"),
    "nested too deeply": ("[" * 100_000, "json"),  # the JSON decoder's RecursionError
    "not an object": ("[1, 2]", "format"),
    "missing data": (json.dumps({"version": 1, "checksum": "x"}), "format"),
    "unknown version": (json.dumps({**valid_document(), "version": 4}), "version"),
    "checksum mismatch": (json.dumps(tampered()), "checksum"),
    "invalid state": (json.dumps(bad_schema()), "schema"),
}


@pytest.mark.parametrize("content,reason", CORRUPT.values(), ids=CORRUPT.keys())
def test_corrupt_checkpoint_is_reported_and_moved_aside(
    env: Env, caplog: pytest.LogCaptureFixture, content: str | bytes, reason: str
) -> None:
    env.dir.mkdir(parents=True)
    if isinstance(content, bytes):
        env.path.write_bytes(content)
    else:
        env.path.write_text(content)
    with caplog.at_level(logging.ERROR, logger="dra_fake.core.checkpointstore"):
        result = env.store.load()  # never raises
    assert result.status == "corrupt"
    assert result.reason == reason
    assert result.data == Data(nodeBootID=BOOT_A)
    assert env.reports == [reason]
    assert not env.path.exists()
    assert result.quarantined == env.dir / "checkpoint.json.corrupt-19700101T000000Z"
    assert result.quarantined.exists()
    assert f"reason={reason}" in caplog.text
    # a second corruption in the same second does not overwrite the first quarantined file
    env.path.write_text("{")
    again = env.store.load()
    assert again.quarantined == env.dir / "checkpoint.json.corrupt-19700101T000000Z.1"


def test_only_the_newest_corrupt_checkpoints_are_kept(env: Env) -> None:
    env.dir.mkdir()
    moved = []
    for _ in range(checkpointstore.KEEP_CORRUPT + 3):
        env.path.write_text("{")
        result = env.store.load()
        assert result.quarantined is not None
        moved.append(result.quarantined)
    left = sorted(env.dir.glob("checkpoint.json.corrupt-*"))
    assert len(left) == checkpointstore.KEEP_CORRUPT
    assert moved[-1] in left  # the oldest went, not the one just moved aside


def test_unknown_fields_from_newer_binaries_are_tolerated(env: Env) -> None:
    doc = valid_document()
    doc["data"]["futureField"] = {"x": 1}
    doc["data"]["claims"]["uid-1"]["futureEntryField"] = True
    doc["checksum"] = checkpoint.checksum(doc["data"])
    env.write_document(doc)
    result = env.store.load()
    assert result.status == "ok"
    assert set(result.data.claims) == {"uid-1", "uid-2"}


def test_peek_has_no_side_effects(env: Env) -> None:
    assert env.store.peek() is None
    env.dir.mkdir()
    env.path.write_text("{")
    assert env.store.peek() is None
    assert env.path.exists() and env.reports == []


def test_failing_hook_does_not_break_load(env: Env) -> None:
    def boom(reason: str) -> None:
        raise RuntimeError("metrics down")

    store = CheckpointStore(env.dir, GpuClaimData, env.boot, on_corrupt=boom)
    env.dir.mkdir()
    env.path.write_text("{")
    assert store.load().status == "corrupt"


def test_a_corrupt_checkpoint_is_counted_by_default(tmp_path: Path) -> None:
    counter = metrics.CHECKPOINT_ERRORS_TOTAL.labels(reason="json")
    before = counter._value.get()
    store = CheckpointStore(tmp_path, GpuClaimData, tmp_path / "no-boot-id")
    (tmp_path / "checkpoint.json").write_text("{")
    assert store.load().status == "corrupt"
    assert counter._value.get() == before + 1


def test_stale_temp_files_removed(env: Env) -> None:
    env.store.save(sample())
    leftover = env.dir / ".checkpoint.json.0123abcd.tmp"
    leftover.write_text("partial")
    assert env.store.remove_temp_files() == [leftover]
    assert not leftover.exists()


def test_encode_is_compact_canonical_and_older_indented_files_still_decode() -> None:
    data = Data.model_validate(
        {
            "nodeBootID": "b",
            "claims": {
                "u": {"state": "PrepareCompleted", "name": "n\u00e9", "namespace": "x", "driverData": {}}
            },
        }
    )
    raw = CODEC.encode(data)
    document = json.loads(raw)
    payload = checkpoint.canonical_json(document["data"])
    assert (
        raw == b'{"checksum":"' + document["checksum"].encode() + b'","data":' + payload + b',"version":3}\n'
    )
    assert CODEC.decode(raw) == data
    # The layout the encoder used before (indented, keys sorted) decodes through the full path.
    older = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    assert checkpoint._decode_fast(older) is None
    assert CODEC.decode(older) == data
    # A flipped byte inside the data fails the fast path and is then reported as corrupt.
    tampered = raw.replace(b'"x"', b'"y"')
    assert checkpoint._decode_fast(tampered) is None
    with pytest.raises(checkpoint.CorruptCheckpointError) as err:
        CODEC.decode(tampered)
    assert err.value.reason == checkpoint.REASON_CHECKSUM


def test_the_entry_by_entry_payload_gives_the_canonical_bytes_after_every_kind_of_change() -> None:
    """Codec assembles the payload entry by entry and records what it wrote; every change the
    plugins make must still give canonical JSON."""
    codec = Codec(GpuClaimData)
    data = sample()

    def canonical() -> bytes:
        return checkpoint.canonical_json(data.model_dump(mode="json", exclude_none=True))

    steps = [
        lambda: None,
        lambda: setattr(data.claims["uid-2"], "state", "PrepareCompleted"),
        lambda: setattr(data.claims["uid-1"], "unpreparing", True),
        lambda: setattr(data.claims["uid-1"], "recovered", True),
        lambda: setattr(data.claims["uid-1"], "state", "PrepareStarted"),
        lambda: setattr(data.claims["uid-1"], "unpreparing", False),
        # The ComputeDomain plugin completes an entry with its device and spec at the same time.
        lambda: (
            setattr(data.claims["uid-1"], "state", "PrepareCompleted"),
            setattr(data.claims["uid-1"], "preparedDevices", []),
            setattr(data.claims["uid-1"], "cdiSpec", {"kind": "k8s.gpu.nvidia.com/claim", "\u00e9": [1]}),
        ),
        lambda: (  # not done by the plugins
            setattr(data.claims["uid-1"], "name", "renamed"),
            setattr(data.claims["uid-1"], "unpreparing", True),
        ),
        lambda: data.claims.__setitem__("uid-0", Entry(state="PrepareStarted", driverData=GpuClaimData())),
        lambda: data.claims.__setitem__(
            "uid-2", Entry(state="PrepareCompleted", name="new", driverData=GpuClaimData())
        ),
        lambda: data.claims.pop("uid-1"),
        lambda: setattr(data, "nodeBootID", "b\u00e9"),
        lambda: data.claims.__setitem__("\u00fcid", Entry(state="PrepareStarted", driverData=GpuClaimData())),
    ]
    for step in steps:
        step()
        assert codec._payload(data) == canonical()
        assert codec.decode(codec.encode(data)) == data


def test_load_returns_the_saved_object_until_the_file_changes(env: Env) -> None:
    data = sample()
    env.store.save(data)
    assert env.store.load().data is data  # no decode while the bytes are those this store wrote
    other = CheckpointStore(env.dir, GpuClaimData, env.boot)  # another plugin instance
    theirs = other.load().data
    del theirs.claims["uid-2"]
    other.save(theirs)
    reloaded = env.store.load().data
    assert reloaded is not data
    assert set(reloaded.claims) == {"uid-1"}


def test_forget_makes_the_next_load_decode_the_file(env: Env) -> None:
    env.store.save(sample())
    changed = env.store.load().data
    changed.claims.clear()  # an error path changed the object and did not save it
    env.store.forget()
    assert set(env.store.load().data.claims) == {"uid-1", "uid-2"}


def test_states_follow_the_file_whoever_wrote_it(env: Env) -> None:
    assert env.store.states() == {}
    mine = sample()
    env.store.save(mine)
    assert env.store.states() == {"uid-1": ("PrepareCompleted", 1), "uid-2": ("PrepareStarted", 0)}
    mine.claims["uid-2"].state = "PrepareCompleted"  # the next call's change, not saved yet
    assert env.store.states()["uid-2"] == ("PrepareStarted", 0)  # what the files hold
    other = CheckpointStore(env.dir, GpuClaimData, env.boot)
    theirs = other.load().data
    del theirs.claims["uid-1"]
    other.save(theirs)
    assert env.store.states() == {"uid-2": ("PrepareStarted", 0)}


# --- format 1: the files written before the versioned payload -------------------------------------


def test_a_gpu_checkpoint_of_format_1_is_read_and_written_back_as_format_3(tmp_path: Path) -> None:
    """tests/data/checkpoint-v1-gpu.json was written by the previous code (full GPU, time-slicing,
    dynamic MIG with MPS, admin access, a PrepareStarted entry)."""
    (tmp_path / "checkpoint.json").write_bytes((DATA / "checkpoint-v1-gpu.json").read_bytes())
    boot = tmp_path / "boot_id"
    boot.write_text("11111111-2222-3333-4444-555555555555\n")  # the boot ID the file recorded
    store = CheckpointStore(tmp_path, GpuClaimData, boot)
    result = store.load()
    assert result.status == "ok"
    claims = result.data.claims
    assert len(claims) == 5
    shared = claims["2b222222-2222-2222-2222-222222222222"]
    assert shared.driverData.timeSlicing == [
        TimeSliceRecord(uuid=shared.driverData.timeSlicing[0].uuid, interval="Long")
    ]
    assert shared.preparedDevices[0].shareID == "5e2b3c4d-0000-0000-0000-000000000001"
    dynamic = claims["3c333333-3333-3333-3333-333333333333"].driverData
    assert [m.device for m in dynamic.migDevices] == ["gpu-3-mig-1g10gb-19-0", "gpu-3-mig-1g10gb-19-1"]
    assert len(dynamic.mpsDaemons) == 1
    assert claims["4d444444-4444-4444-4444-444444444444"].preparedDevices[0].adminAccess
    assert claims["5e555555-5555-5555-5555-555555555555"].state == "PrepareStarted"
    store.save(result.data)
    rewritten = json.loads((tmp_path / "checkpoint.json").read_text())
    assert rewritten["version"] == 3
    assert "undo" not in json.dumps(rewritten) and store.load().data == result.data


def test_a_compute_domain_checkpoint_of_format_1_is_read(tmp_path: Path) -> None:
    (tmp_path / "checkpoint.json").write_bytes((DATA / "checkpoint-v1-compute-domain.json").read_bytes())
    store = CheckpointStore(tmp_path, DomainClaimData, tmp_path / "no-boot-id")
    result = store.load()
    assert result.status == "ok"
    channel = result.data.claims["claim-channel-0"]
    assert channel.driverData == DomainClaimData(
        type="channel", domainID="2f9c6a4e-0000-4000-8000-000000000001", allocationMode="Single"
    )
    assert result.data.claims["claim-daemon-0"].driverData.type == "daemon"
    assert channel.state == "PrepareCompleted" and channel.cdiSpec


JSON_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),  # past 64 bits: orjson refuses, json writes them
        st.text(st.characters(exclude_categories=["Cs"])),  # any character but a lone surrogate
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(st.characters(exclude_categories=["Cs"])), inner, max_size=4),
    ),
    max_leaves=25,
)


@settings(max_examples=500, deadline=None)
@given(JSON_VALUES)
def test_canonical_json_is_json_dumps_sorted_and_compact(value: Any) -> None:
    """canonical_json (orjson) writes exactly the bytes json.dumps wrote before it: the checksums
    of checkpoints written by earlier versions, over their canonical bytes, still hold."""
    expected = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert checkpoint.canonical_json(value) == expected
