"""Checkpoint format, boot-ID invalidation and corruption handling (dra_fake.checkpoint)."""

from __future__ import annotations

import hashlib
import json
import logging
import stat
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from dra_fake import checkpoint
from dra_fake.checkpoint import (
    CheckpointData,
    CheckpointedDevice,
    CheckpointStore,
    ClaimEntry,
    MigDeviceRecord,
    UndoData,
)

BOOT_A = "aaaaaaaa-0000-0000-0000-000000000000"
BOOT_B = "bbbbbbbb-0000-0000-0000-000000000000"


def sample() -> CheckpointData:
    return CheckpointData(
        claims={
            "uid-1": ClaimEntry(
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
                undo=UndoData(
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
            "uid-2": ClaimEntry(state="PrepareStarted", name="c2", namespace="ns"),
        }
    )


class Env:
    def __init__(self, tmp_path: Path) -> None:
        self.dir = tmp_path / "plugin"
        self.boot = tmp_path / "boot_id"
        self.boot.write_text(BOOT_A + "\n")
        self.reports: list[str] = []
        self.store = CheckpointStore(self.dir, self.boot, on_corrupt=self.reports.append, clock=lambda: 0.0)

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
    assert result.data == CheckpointData(nodeBootID=BOOT_A)
    assert not env.path.exists()  # nothing written by a load


def test_round_trip_format_and_mode(env: Env) -> None:
    env.store.save(sample())
    assert stat.S_IMODE(env.path.stat().st_mode) == 0o600
    assert [p.name for p in env.dir.iterdir()] == ["checkpoint.json"]  # no temp files
    document = json.loads(env.path.read_text())
    assert document["version"] == 1
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
    with caplog.at_level(logging.WARNING, logger="dra_fake.checkpoint"):
        result = env.store.load()
    assert result.status == "boot-id-changed"
    assert result.data == CheckpointData(nodeBootID=BOOT_B)
    assert "checkpoint from an earlier boot discarded" in caplog.text
    assert f"storedBootID={BOOT_A}" in caplog.text
    assert env.reports == []  # not an error


def test_checkpoint_without_boot_id_is_stamped(env: Env) -> None:
    data = sample()
    payload = data.model_dump(mode="json", exclude_none=True)
    payload["nodeBootID"] = ""
    env.write_document({"version": 1, "checksum": checkpoint.checksum(payload), "data": payload})
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
    return {"version": 1, "checksum": checkpoint.checksum(payload), "data": payload}


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
    "not an object": ("[1, 2]", "format"),
    "missing data": (json.dumps({"version": 1, "checksum": "x"}), "format"),
    "unknown version": (json.dumps({**valid_document(), "version": 2}), "version"),
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
    with caplog.at_level(logging.ERROR, logger="dra_fake.checkpoint"):
        result = env.store.load()  # never raises
    assert result.status == "corrupt"
    assert result.reason == reason
    assert result.data == CheckpointData(nodeBootID=BOOT_A)
    assert env.reports == [reason]
    assert not env.path.exists()
    assert result.quarantined == env.dir / "checkpoint.json.corrupt-19700101T000000Z"
    assert result.quarantined.exists()
    assert f"reason={reason}" in caplog.text
    # a second corruption in the same second does not overwrite the first quarantined file
    env.path.write_text("{")
    again = env.store.load()
    assert again.quarantined == env.dir / "checkpoint.json.corrupt-19700101T000000Z.1"


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

    store = CheckpointStore(env.dir, env.boot, on_corrupt=boom)
    env.dir.mkdir()
    env.path.write_text("{")
    assert store.load().status == "corrupt"


def test_report_to_metrics_without_module(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dra_fake.metrics", None)  # import fails
    checkpoint.report_to_metrics("json")  # no exception


def test_report_to_metrics_hook_function(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    module = types.ModuleType("dra_fake.metrics")
    module.record_checkpoint_error = seen.append  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dra_fake.metrics", module)
    checkpoint.report_to_metrics("checksum")
    assert seen == ["checksum"]


def test_report_to_metrics_counter(monkeypatch: pytest.MonkeyPatch) -> None:
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    counter = Counter("dra_fake_checkpoint_errors_total", "errors", ["reason"], registry=registry)
    module = types.ModuleType("dra_fake.metrics")
    module.CHECKPOINT_ERRORS = counter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dra_fake.metrics", module)
    checkpoint.report_to_metrics("version")
    assert registry.get_sample_value("dra_fake_checkpoint_errors_total", {"reason": "version"}) == 1.0


def test_stale_temp_files_removed(env: Env) -> None:
    env.store.save(sample())
    leftover = env.dir / ".checkpoint.json.0123abcd.tmp"
    leftover.write_text("partial")
    assert env.store.remove_temp_files() == [leftover]
    assert not leftover.exists()


def test_encode_is_compact_canonical_and_older_indented_files_still_decode() -> None:
    data = CheckpointData.model_validate(
        {
            "nodeBootID": "b",
            "claims": {"u": {"state": "PrepareCompleted", "name": "n\u00e9", "namespace": "x"}},
        }
    )
    raw = checkpoint.encode(data)
    document = json.loads(raw)
    payload = checkpoint.canonical_json(document["data"])
    assert (
        raw == b'{"checksum":"' + document["checksum"].encode() + b'","data":' + payload + b',"version":1}\n'
    )
    assert checkpoint.decode(raw) == data
    # The layout the encoder used before (indented, keys sorted) decodes through the full path.
    older = (json.dumps(document, indent=2, sort_keys=True) + "\n").encode()
    assert checkpoint._decode_fast(older) is None
    assert checkpoint.decode(older) == data
    # A flipped byte inside the data fails the fast path and is then reported as corrupt.
    tampered = raw.replace(b'"x"', b'"y"')
    assert checkpoint._decode_fast(tampered) is None
    with pytest.raises(checkpoint.CorruptCheckpointError) as err:
        checkpoint.decode(tampered)
    assert err.value.reason == checkpoint.REASON_CHECKSUM
