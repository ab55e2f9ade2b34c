"""A kubelet plugin's checkpoint: which claims are prepared, what to return to the kubelet, and
what to undo. Per driver, `<plugin data dir>/checkpoint.json`, a versioned format:

    {"checksum": "sha256:<hex>", "data": {"nodeBootID": ..., "claims": {<uid>: ClaimEntry}}, "version": 3}

and beside it `checkpoint.journal`, the entries changed since that file was written
(dra_fake.core.journal): a save appends what changed; now and then a compaction rewrites the file
and starts an empty journal (docs/prepare.md#the-journal).

Format 3 (written): format 2 and its journal. Format 2 (read; written from 0.2 until the journal):
each ClaimEntry carries the driver's typed payload in `driverData` (a DriverData subclass:
dra_fake.gpu.claimdata.GpuClaimData, computedomain.plugin.state.DomainClaimData); it has no journal.
Format 1 (read, written before 0.2): the same entry with the payload as `undo` holding both drivers'
fields (migDevices, timeSlicing, mpsDaemons, computeDomain); it is converted on load. Either is
written back as format 3. A binary that knows only older formats treats a newer file as corrupt
and recovers from the CDI specs (it must not read a format-3 file without its journal).

The checksum is the sha256 of the canonical JSON (sorted keys, no spaces) of `data` exactly as
stored, so a newer binary's extra fields neither break the checksum nor the decoding (unknown
fields are ignored). Loading never raises: a corrupt file or journal is reported, moved aside and
replaced by an empty checkpoint (dra_fake.core.state rebuilds what it can from the CDI specs).

This module is the format: the models, the checksum, decoding a file and its journal. The codec
that writes it is dra_fake.core.checkpointcodec; the files, loads and saves,
dra_fake.core.checkpointstore.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, Literal, Self, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field

from dra_fake.core import journal

FORMAT_VERSION = 3
V2 = 2  # read, its journal (there is none) ignored: see the module docstring
V1 = 1  # read and converted
READABLE_VERSIONS = (FORMAT_VERSION, V2, V1)
CHECKPOINT_FILE_NAME = "checkpoint.json"


PREPARE_STARTED: Final = "PrepareStarted"
PREPARE_COMPLETED: Final = "PrepareCompleted"
ClaimState = Literal["PrepareStarted", "PrepareCompleted"]

LoadStatus = Literal["ok", "missing", "boot-id-changed", "corrupt"]
# Corruption reasons (the `reason` label of dra_fake_checkpoint_errors_total).
REASON_UNREADABLE = "unreadable"
REASON_JSON = "json"
REASON_FORMAT = "format"
REASON_VERSION = "version"
REASON_CHECKSUM = "checksum"
REASON_SCHEMA = "schema"
REASON_JOURNAL = "journal"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class CheckpointedDevice(_Model):
    """One prepared device as returned to the kubelet (+ whether it was admin access)."""

    requests: list[str]
    poolName: str
    deviceName: str
    cdiDeviceIDs: list[str]
    shareID: str | None = None
    adminAccess: bool = False


class DriverData(_Model):
    """What a driver records per claim to undo its preparation (its typed payload). Subclassed
    by each driver; `from_v1_undo` reads the same facts from a format-1 file's `undo` object."""

    @classmethod
    def from_v1_undo(cls, undo: dict[str, Any]) -> Self:
        return cls.model_validate(undo)


P = TypeVar("P", bound=DriverData)


class ClaimEntry(_Model, Generic[P]):
    """One claim. Once saved, an entry is changed only in `state`, `unpreparing` and `recovered`
    (other fields at most replaced at the same time, never changed in place), or replaced by a new
    object: the journal records an entry again only when one of the three changed or the object
    was replaced (Codec.changes)."""

    state: ClaimState
    name: str = ""
    namespace: str = ""
    preparedDevices: list[CheckpointedDevice] = Field(default_factory=list)
    driverData: P
    cdiSpec: dict[str, Any] | None = None  # the spec written for the claim (to restore a lost file)
    recovered: bool = False  # rebuilt from a CDI spec file after the checkpoint was lost
    unpreparing: bool = False  # unprepare has begun (a prepare racing it must back off)


class CheckpointData(_Model, Generic[P]):
    nodeBootID: str = ""
    claims: dict[str, ClaimEntry[P]] = Field(default_factory=dict)


@dataclass
class LoadResult(Generic[P]):
    data: CheckpointData[P]
    status: LoadStatus
    reason: str | None = None  # corruption reason
    quarantined: Path | None = None  # where a corrupt file was moved


def canonical_json(value: object) -> bytes:
    """Sorted keys, no whitespace, UTF-8: what `json.dumps(value, sort_keys=True,
    separators=(",", ":"), ensure_ascii=False)` writes, for what a checkpoint holds (strings,
    integers, booleans, null, lists, objects; no floats, whose digits orjson writes its own way),
    written by orjson: an 8-device entry in ~8 us instead of ~50 (tests/test_checkpoint.py
    compares the two)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # what orjson refuses, such as an integer past 64 bits
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def checksum(data: object) -> str:
    return "sha256:" + hashlib.sha256(canonical_json(data)).hexdigest()


class CorruptCheckpointError(ValueError):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


_FAST_HEAD = b'{"checksum":"sha256:'
_FAST_DIGEST_END = len(_FAST_HEAD) + 64
_FAST_DATA = b'","data":'
_FAST_TAIL = b',"version":%d}\n' % FORMAT_VERSION


def _decode_fast(raw: bytes) -> tuple[str, dict[str, Any]] | None:
    """A file exactly as `encode` writes it: the checksum is over the data bytes as stored
    (they are the canonical serialisation), so it is checked without re-serialising the data.
    Anything else (an older format, an indented file, a checksum mismatch, odd bytes) returns
    None: the full path decides."""
    start = _FAST_DIGEST_END + len(_FAST_DATA)
    if not (
        raw.startswith(_FAST_HEAD) and raw[_FAST_DIGEST_END:start] == _FAST_DATA and raw.endswith(_FAST_TAIL)
    ):
        return None
    payload = raw[start : -len(_FAST_TAIL)]
    digest = raw[len(_FAST_HEAD) : _FAST_DIGEST_END]
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        return None
    try:
        data = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return ("sha256:" + digest.decode(), data) if isinstance(data, dict) else None


def decode_document(raw: bytes) -> tuple[int, str, dict[str, Any]]:
    """(format version, checksum, data) of a checkpoint file whose checksum holds;
    CorruptCheckpointError(reason) otherwise."""
    fast = _decode_fast(raw)
    if fast is not None:
        return FORMAT_VERSION, fast[0], fast[1]
    try:
        document = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptCheckpointError(REASON_JSON, str(exc)) from None
    except RecursionError:  # the C decoder's depth limit: no checkpoint of ours nests that deep
        raise CorruptCheckpointError(REASON_JSON, "nested too deeply") from None
    if not isinstance(document, dict) or not {"version", "checksum", "data"} <= document.keys():
        raise CorruptCheckpointError(REASON_FORMAT, "expected an object with version, checksum and data")
    if document["version"] not in READABLE_VERSIONS:
        raise CorruptCheckpointError(
            REASON_VERSION,
            f"unknown format version {document['version']!r}, expected one of {READABLE_VERSIONS}",
        )
    try:
        expected = checksum(document["data"])
    except RecursionError:
        raise CorruptCheckpointError(REASON_JSON, "nested too deeply") from None
    if document["checksum"] != expected:
        raise CorruptCheckpointError(
            REASON_CHECKSUM, f"checksum mismatch: stored {document['checksum']!r}, computed {expected!r}"
        )
    if not isinstance(document["data"], dict):
        raise CorruptCheckpointError(REASON_SCHEMA, "data is not an object")
    return document["version"], expected, document["data"]


def read_document(path: Path, journal_path: Path | None) -> tuple[int, dict[str, Any]]:
    """(format version, data) of the checkpoint at `path` with the journal at `journal_path` (if
    any) applied: see dra_fake.core.journal for which journal counts. Raises OSError,
    CorruptCheckpointError."""
    version, base, data = decode_document(path.read_bytes())
    if version != FORMAT_VERSION or journal_path is None:
        return version, data  # an older format has no journal: one beside it is older than the file
    try:
        raw = journal_path.read_bytes()
    except FileNotFoundError:
        return version, data
    try:
        replay = journal.parse(raw)
    except journal.JournalError as exc:
        raise CorruptCheckpointError(REASON_JOURNAL, str(exc)) from None
    if replay.base != base:
        return version, data  # a compaction's new checkpoint, which holds this stale journal's records
    claims = data.setdefault("claims", {})
    if not isinstance(claims, dict):
        raise CorruptCheckpointError(REASON_SCHEMA, "claims is not an object")
    for uid, entry in replay.changes:
        if entry is None:
            claims.pop(uid, None)
        else:
            claims[uid] = entry
    return version, data


def read_claims(data_dir: Path) -> dict[str, Any]:
    """Claim UID -> checkpoint entry as plain JSON, for observers outside a plugin (the soak
    test's checks); {} without a checkpoint. Raises OSError, CorruptCheckpointError."""
    try:
        _, data = read_document(data_dir / CHECKPOINT_FILE_NAME, data_dir / journal.JOURNAL_FILE_NAME)
    except FileNotFoundError:
        return {}
    claims = data.get("claims") or {}
    return claims if isinstance(claims, dict) else {}
