"""A kubelet plugin's checkpoint: which claims are prepared, what to return to the kubelet, and
what to undo. Per driver, `<plugin data dir>/checkpoint.json`, a versioned format:

    {"checksum": "sha256:<hex>", "data": {"nodeBootID": ..., "claims": {<uid>: ClaimEntry}}, "version": 3}

and beside it `checkpoint.journal`, the entries changed since that file was written
(dra_fake.core.journal): a save appends what changed; now and then a compaction rewrites the file
and starts an empty journal (docs/prepare.md#the-journal).

Format 3 (written): format 2 and its journal. Format 2 (read; written from 0.2 until the journal):
each ClaimEntry carries the driver's typed payload in `driverData` (a DriverData subclass:
dra_fake.gpu.state.GpuClaimData, computedomain.plugin.state.DomainClaimData); it has no journal.
Format 1 (read, written before 0.2): the same entry with the payload as `undo` holding both drivers'
fields (migDevices, timeSlicing, mpsDaemons, computeDomain); it is converted on load. Either is
written back as format 3. A binary that knows only older formats treats a newer file as corrupt
and recovers from the CDI specs (it must not read a format-3 file without its journal).

The checksum is the sha256 of the canonical JSON (sorted keys, no spaces) of `data` exactly as
stored, so a newer binary's extra fields neither break the checksum nor the decoding (unknown
fields are ignored). Loading never raises: a corrupt file or journal is reported, moved aside and
replaced by an empty checkpoint (dra_fake.core.state rebuilds what it can from the CDI specs).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, Literal, NamedTuple, Self, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_fake.core import journal, metrics
from dra_fake.core.atomic import atomic_write, file_identity, fsync_dir, remove_durably, stale_temp_files

_log = logging.getLogger(__name__)

FORMAT_VERSION = 3
V2 = 2  # read, its journal (there is none) ignored: see the module docstring
V1 = 1  # read and converted
READABLE_VERSIONS = (FORMAT_VERSION, V2, V1)
CHECKPOINT_FILE_NAME = "checkpoint.json"
# Compaction: a save rewrites the whole checkpoint (and starts an empty journal) once the journal
# is larger than the checkpoint and than this (a start-up replays at most about that much: ~10 ms
# here). A compaction costs two file writes and four fsyncs; an 8-device prepare appends ~15 KB,
# so at 256 KiB one prepare in 17 paid for one
# (docs/benchmarks/history.md#ninth-round-less-python-per-device-fewer-compactions).
COMPACT_MIN_BYTES = 1024 * 1024
CHECKPOINT_FILE_MODE = 0o600
KEEP_CORRUPT = 5  # quarantined corrupt checkpoints kept beside the live one
DEFAULT_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")

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
    object: the codec reuses an entry's serialisation while those three are unchanged, and the
    rest's while its fields hold the same objects (Codec.entry_json); the journal records an entry
    again only when one of the three changed or the object was replaced."""

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


_Key = tuple[ClaimState, bool, bool]  # an entry's changeable fields: state, unpreparing, recovered


def _key(entry: ClaimEntry[Any]) -> _Key:
    return (entry.state, entry.unpreparing, entry.recovered)


# The changeable fields sort after every other field of an entry, so its canonical JSON is the
# rest's ("body") followed by these three: a change of state re-serialises three values, not the
# claim's CDI spec and devices again.
_FLAGS = ("recovered", "state", "unpreparing")
_BODY_FIELDS = tuple(sorted(set(ClaimEntry.model_fields) - set(_FLAGS)))
if sorted(ClaimEntry.model_fields)[-len(_FLAGS) :] != list(_FLAGS):
    raise AssertionError("ClaimEntry's changeable fields must sort last (Codec.entry_json)")


class _Serialised(NamedTuple):
    """An entry as last serialised: the object, its changeable fields, the canonical uid and
    entry, the entry's body (without the changeable fields and the closing brace) and the field
    values the body was made from."""

    entry: ClaimEntry[Any]
    key: _Key
    uid: bytes
    json: bytes
    body: bytes
    values: tuple[object, ...]


def _with_flags(body: bytes, entry: ClaimEntry[Any]) -> bytes:
    return body + b'%s"recovered":%s,"state":%s,"unpreparing":%s}' % (
        b"," if len(body) > 1 else b"",
        b"true" if entry.recovered else b"false",
        canonical_json(entry.state),
        b"true" if entry.unpreparing else b"false",
    )


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


class Codec(Generic[P]):
    """Encodes and decodes the checkpoint of a driver whose per-claim payload is `payload`."""

    def __init__(self, payload: type[P]) -> None:
        self.payload = payload
        self.model: type[CheckpointData[P]] = CheckpointData[payload]  # type: ignore[valid-type]
        # uid -> the entry as last serialised: after a successful write, what the files hold
        # (CheckpointStore appends what differs)
        self._entries: dict[str, _Serialised] = {}

    def empty(self, boot_id: str = "") -> CheckpointData[P]:
        return self.model(nodeBootID=boot_id)

    def encode(self, data: CheckpointData[P]) -> bytes:
        return self.encode_with_checksum(data)[0]

    def encode_with_checksum(self, data: CheckpointData[P]) -> tuple[bytes, str]:
        """`{"checksum":…,"data":…,"version":…}` (keys sorted), compact, the checksum over the same
        canonical bytes that go into the file; and that checksum. The payload is serialised
        compactly (`canonical_json`), and only the entries that changed since they were last
        serialised are: see `entry_json`."""
        payload = self._payload(data)
        digest = "sha256:" + hashlib.sha256(payload).hexdigest()
        raw = (
            b'{"checksum":"' + digest.encode() + b'","data":' + payload + b',"version":%d}\n' % FORMAT_VERSION
        )
        return raw, digest

    def entry_json(self, uid: str, entry: ClaimEntry[P]) -> tuple[bytes, bytes]:
        """The canonical JSON of `uid` and of `entry`, reused while the entry is the same object
        with the same `state`, `unpreparing` and `recovered`: the only fields changed on a saved
        entry (see ClaimEntry). A checkpoint holds every prepared claim's CDI spec; serialising
        all of them at each write made a prepare's cost grow with the claims held. When only
        those three changed (the other fields hold the same objects), the rest is not
        serialised again: a prepare's PrepareCompleted and an unprepare's first step."""
        key = _key(entry)
        hit = self._entries.get(uid)
        if hit is not None and hit.entry is entry and hit.key == key:
            return hit.uid, hit.json
        values = tuple(getattr(entry, name) for name in _BODY_FIELDS)
        if (
            hit is not None
            and hit.entry is entry
            and all(a is b for a, b in zip(values, hit.values, strict=True))
        ):
            body = hit.body
        else:
            dumped = entry.model_dump(mode="json", exclude_none=True, exclude=set(_FLAGS))
            body = canonical_json(dumped)[:-1]
        hit = _Serialised(entry, key, canonical_json(uid), _with_flags(body, entry), body, values)
        self._entries[uid] = hit
        return hit.uid, hit.json

    def changes(
        self, data: CheckpointData[P], touched: Collection[str] | None = None
    ) -> tuple[list[str], list[str]]:
        """What differs in `data` from the entries last serialised: the uids of new or changed
        entries (serialised by `entry_json` when written) and the uids no longer held (forgotten).
        Called at every save: one pass over the claims held, without a call per entry; or, when
        the caller names the only claims it `touched` since, over those (a save that adds or
        drops a claim it did not name still finds the counts differ and makes the whole pass)."""
        claims, entries = data.claims, self._entries
        names = claims if touched is None else dict.fromkeys(touched)  # once each, in order
        changed = [
            uid
            for uid in names
            if (entry := claims.get(uid)) is not None
            and (
                (hit := entries.get(uid)) is None
                or hit.entry is not entry
                or hit.key != (entry.state, entry.unpreparing, entry.recovered)  # _key, inlined
            )
        ]
        if touched is None:
            gone = list(entries.keys() - claims.keys())
        else:
            gone = [uid for uid in names if uid not in claims and uid in entries]
            if len(entries) + sum(uid not in entries for uid in changed) - len(gone) != len(claims):
                return self.changes(data)  # a claim added or dropped that the caller did not name
        for uid in gone:
            del entries[uid]
        return changed, gone

    def states(self) -> dict[str, tuple[ClaimState, int]]:
        """Claim UID -> (state, devices) of the entries as last serialised: after a successful
        save, what the files hold. Safe without the lock (one atomic copy of the map; each
        entry's state is the one serialised, whatever the object's fields have become since)."""
        return {uid: (hit.key[0], len(hit.entry.preparedDevices)) for uid, hit in list(self._entries.items())}

    def _payload(self, data: CheckpointData[P]) -> bytes:
        """canonical_json(data), assembled from per-entry serialisations kept between calls."""
        parts = []
        for uid in sorted(data.claims):
            uid_json, entry_json = self.entry_json(uid, data.claims[uid])
            parts.append(uid_json + b":" + entry_json)
        for gone in self._entries.keys() - data.claims.keys():
            del self._entries[gone]
        return b'{"claims":{' + b",".join(parts) + b'},"nodeBootID":' + canonical_json(data.nodeBootID) + b"}"

    def decode(self, raw: bytes) -> CheckpointData[P]:
        """Parse a checkpoint file (format 3, 2 or 1) without its journal;
        CorruptCheckpointError(reason) if it cannot be trusted."""
        version, _, data = decode_document(raw)
        return self.validate(data, version)

    def validate(self, data: dict[str, Any], version: int = FORMAT_VERSION) -> CheckpointData[P]:
        try:
            if version == V1:
                data = self._from_v1(data)
            return self.model.model_validate(data)
        except (ValidationError, TypeError, AttributeError) as exc:
            raise CorruptCheckpointError(REASON_SCHEMA, str(exc).replace("\n", " ")) from None

    def _from_v1(self, data: dict[str, Any]) -> dict[str, Any]:
        claims = {}
        for uid, entry in (data.get("claims") or {}).items():
            entry = dict(entry)
            undo = entry.pop("undo", None) or {}
            entry["driverData"] = self.payload.from_v1_undo(undo).model_dump(mode="json", exclude_none=True)
            claims[uid] = entry
        return {**data, "claims": claims}


def read_boot_id(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError as exc:
        _log.warning("boot ID unreadable path=%s error=%s", path, exc)
        return ""


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


Identity = tuple[tuple[int, int, int], tuple[int, int, int] | None]  # checkpoint's and journal's


class _Files(NamedTuple):
    """The files as a store last read or wrote them, and the object they decode to."""

    identity: Identity
    data: CheckpointData[Any]
    written: bool  # this store wrote them: the codec's entries are what they hold
    journal_end: int = 0  # written: where the journal's next record goes (zeros after it)


class CheckpointStore(Generic[P]):
    """Reads and writes the checkpoint file and its journal. Callers hold the prepare/unprepare
    lock (peek and states excepted)."""

    def __init__(
        self,
        data_dir: Path,
        payload: type[P],
        boot_id_path: Path = DEFAULT_BOOT_ID_PATH,
        on_corrupt: Callable[[str], None] = metrics.record_checkpoint_error,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(data_dir) / CHECKPOINT_FILE_NAME
        self.journal_path = Path(data_dir) / journal.JOURNAL_FILE_NAME
        self.codec = Codec(payload)
        self.boot_id_path = Path(boot_id_path)
        self._on_corrupt = on_corrupt
        self._clock = clock
        self._boot_id = ""  # read once: a node's boot ID cannot change under a running process
        # The files as this store last read or wrote them (their identity: a compaction puts new
        # inodes in place, a record changes the journal's modification time) and the object they
        # decode to: load() returns that object again while the files are the same (two stats,
        # not a read and a decode). The same for peek(). `written`: this store wrote them, so the
        # next save of that object may add what changed to the journal; files it read (another
        # process's, a torn journal, an older format) are rewritten at the next save. Another
        # process's first save is such a rewrite: its new inodes cannot be ours (ours still
        # existed when it created them), so a store never writes records after another's.
        self._current: _Files | None = None
        self._peeked: tuple[Identity, CheckpointData[P]] | None = None

    def boot_id(self) -> str:
        if not self._boot_id:  # unreadable ("") is asked again
            self._boot_id = read_boot_id(self.boot_id_path)
        return self._boot_id

    def _identity(self) -> Identity:
        """FileNotFoundError if there is no checkpoint."""
        base = file_identity(self.path)
        try:
            return base, file_identity(self.journal_path)
        except FileNotFoundError:
            return base, None

    def _read(self, identity: Identity) -> CheckpointData[P]:
        """The checkpoint with its journal applied. Raises OSError, CorruptCheckpointError."""
        version, data = read_document(self.path, self.journal_path if identity[1] is not None else None)
        return self.codec.validate(data, version)

    def load(self) -> LoadResult[P]:
        """The current checkpoint. Never raises for a bad file: see the module docstring."""
        current_boot = self.boot_id()
        try:
            identity = self._identity()  # before reading: a newer file shows at the next load
            current = self._current
            if current is not None and current.identity == identity:
                data = current.data
            else:
                self.forget()
                data = self._read(identity)
                self._current = _Files(identity, data, False)
        except FileNotFoundError:
            self.forget()
            return LoadResult(self.codec.empty(current_boot), "missing")
        except OSError as exc:
            return self._corrupt(CorruptCheckpointError(REASON_UNREADABLE, str(exc)), current_boot)
        except CorruptCheckpointError as exc:
            return self._corrupt(exc, current_boot)
        if data.nodeBootID and current_boot and data.nodeBootID != current_boot:
            _log.warning(
                "checkpoint from an earlier boot discarded path=%s storedBootID=%s bootID=%s claims=%d",
                self.path,
                data.nodeBootID,
                current_boot,
                len(data.claims),
            )
            return LoadResult(self.codec.empty(current_boot), "boot-id-changed")
        if not data.nodeBootID:
            data.nodeBootID = current_boot  # no boot ID recorded: assume valid, stamp it
        return LoadResult(data, "ok")

    def forget(self) -> None:
        """A caller changed a loaded object without saving it (an error path), or a save failed:
        the next load decodes the files again, the next save rewrites them."""
        self._current = None

    def peek(self) -> CheckpointData[P] | None:
        """Read without locking, repairing or reporting (for metrics); None if absent or bad.
        The result is shared between calls while the files stay the same (each scrape of the
        gauges may peek): treat it as read-only."""
        try:
            identity = self._identity()
            cached = self._peeked
            if cached is not None and cached[0] == identity:
                return cached[1]
            data = self._read(identity)
        except (OSError, CorruptCheckpointError):
            return None
        self._peeked = (identity, data)
        return data

    def save(
        self,
        data: CheckpointData[P],
        compact: bool = False,
        durable: bool = True,
        touched: Collection[str] | None = None,
    ) -> None:
        """Make `data` the checkpoint: add the entries that changed since this store wrote the
        files to the journal (one write, one fdatasync); or, when it did not write them (they
        were read: another process's, an older format, a torn journal), the journal has grown
        past the checkpoint, or `compact` is asked, rewrite the checkpoint and start an empty
        journal.

        `durable=False` (a write-ahead record: PrepareStarted, an unprepare's mark) appends
        without the fdatasync. The record is in the file for every reader and survives a crash
        of this process; only a crash of the machine loses it, and after that reboot the
        checkpoint of the earlier boot is discarded whole (`load`), so nothing could use it. The
        next durable save's fdatasync makes it durable (docs/prepare.md#crash-safety).

        `touched`: the claims whose entries the caller added, changed or dropped since the object
        was loaded or saved, when it knows them (a prepare, an unprepare): what changed is looked
        for there, not in every entry held (`Codec.changes`)."""
        self._peeked = None  # a caller may have changed a peeked object to save it
        current, self._current = self._current, None  # until the new files are in place
        current_boot = self.boot_id()
        if current_boot:
            data.nodeBootID = current_boot
        appendable = (  # the files this store wrote for `data`, while the journal is short enough
            current
            if current is not None
            and current.data is data
            and current.written
            and not compact
            and current.journal_end <= max(COMPACT_MIN_BYTES, current.identity[0][1])
            else None
        )
        try:
            if appendable is not None:
                end = self._append(data, appendable, durable, touched)
            else:
                end = self._rewrite(data)
        except FileNotFoundError:  # the journal was removed under us
            if appendable is None:
                raise
            end = self._rewrite(data)
        self._current = _Files(self._identity(), data, True, end)

    def _rewrite(self, data: CheckpointData[P]) -> int:
        """The whole checkpoint, then a journal that follows it. In this order: a crash between
        the two leaves the new checkpoint with the old journal, which names the old one (stale,
        ignored); the checkpoint's rename is made durable before the journal is replaced.
        Returns the journal's end."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        raw, digest = self.codec.encode_with_checksum(data)
        atomic_write(self.path, raw, CHECKPOINT_FILE_MODE)
        head = journal.header(digest)
        atomic_write(self.journal_path, head, CHECKPOINT_FILE_MODE)
        return len(head)

    def _append(
        self, data: CheckpointData[P], files: _Files, durable: bool, touched: Collection[str] | None
    ) -> int:
        """The journal records of what changed in `data` since the files were written; returns
        the journal's end."""
        changed, gone = self.codec.changes(data, touched)
        records = [journal.put(*self.codec.entry_json(uid, data.claims[uid])) for uid in changed]
        records += [journal.drop(canonical_json(uid)) for uid in gone]
        if not records:
            return files.journal_end
        journal_file = files.identity[1]  # its size as this store left it
        if journal_file is None:
            raise FileNotFoundError(self.journal_path)
        record_bytes = b"".join(records)
        journal.write(self.journal_path, files.journal_end, journal_file[1], record_bytes, durable)
        return files.journal_end + len(record_bytes)

    def states(self) -> dict[str, tuple[ClaimState, int]]:
        """Claim UID -> (state, devices), without locking (for metrics, at each scrape): what
        this store's last save serialised while the files are still the ones it wrote (two stats),
        else the files as they are. (A save in progress or failed has set `_current` aside.)"""
        try:
            identity = self._identity()
        except OSError:
            return {}
        current = self._current
        if current is not None and current.written and current.identity == identity:
            return self.codec.states()
        data = self.peek()
        return (
            {} if data is None else {uid: (e.state, len(e.preparedDevices)) for uid, e in data.claims.items()}
        )

    def remove_temp_files(self) -> list[Path]:
        leftovers = (
            stale_temp_files(self.path) + stale_temp_files(self.journal_path)
            if self.path.parent.is_dir()
            else []
        )
        for p in leftovers:
            p.unlink(missing_ok=True)
            _log.info("stale checkpoint temp file removed path=%s", p)
        return leftovers

    def _corrupt(self, exc: CorruptCheckpointError, current_boot: str) -> LoadResult[P]:
        quarantined = self._quarantine()
        _log.error(
            "checkpoint corrupt, starting from an empty one path=%s reason=%s detail=%s movedTo=%s",
            self.path,
            exc.reason,
            exc.detail,
            quarantined,
        )
        try:
            self._on_corrupt(exc.reason)
        except Exception as hook_exc:
            _log.warning("checkpoint corruption hook failed error=%s", hook_exc)
        return LoadResult(self.codec.empty(current_boot), "corrupt", exc.reason, quarantined)

    def _quarantine(self) -> Path | None:
        """Move the checkpoint aside, and its journal beside it (`<moved name>.journal`)."""
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._clock()))
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}Z")
        n = 1
        while target.exists():
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}Z.{n}")
            n += 1
        try:
            os.replace(self.path, target)
            with contextlib.suppress(FileNotFoundError):
                os.replace(self.journal_path, _journal_of(target))
            fsync_dir(self.path.parent)
        except OSError as exc:
            _log.error("corrupt checkpoint could not be moved aside path=%s error=%s", self.path, exc)
            return None
        self._drop_old_quarantined()
        return target

    def _drop_old_quarantined(self) -> None:
        """Keep the newest KEEP_CORRUPT quarantined checkpoints (and their journals): enough to
        debug, bounded on a node whose disk keeps corrupting them."""
        try:
            quarantined = sorted(
                (
                    p
                    for p in self.path.parent.glob(f"{self.path.name}.corrupt-*")
                    if not p.name.endswith(_QUARANTINED_JOURNAL)
                ),
                key=lambda p: (p.stat().st_mtime, p.name),
            )
            for old in quarantined[:-KEEP_CORRUPT]:
                remove_durably(old, sync_dir=False)
                _journal_of(old).unlink(missing_ok=True)
            fsync_dir(self.path.parent)
        except OSError as exc:
            _log.warning("old corrupt checkpoints not removed dir=%s error=%s", self.path.parent, exc)


_QUARANTINED_JOURNAL = ".journal"


def _journal_of(quarantined: Path) -> Path:
    return quarantined.with_name(quarantined.name + _QUARANTINED_JOURNAL)
