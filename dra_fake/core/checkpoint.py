"""A kubelet plugin's checkpoint: which claims are prepared, what to return to the kubelet, and
what to undo. One file per driver, `<plugin data dir>/checkpoint.json`, a versioned format:

    {"checksum": "sha256:<hex>", "data": {"nodeBootID": ..., "claims": {<uid>: ClaimEntry}}, "version": 2}

Format 2 (written): each ClaimEntry carries the driver's typed payload in `driverData` (a
DriverData subclass: dra_fake.gpu.state.GpuClaimData, computedomain.plugin.state.DomainClaimData).
Format 1 (read, written before 0.2): the same entry with the payload as `undo` holding both drivers'
fields (migDevices, timeSlicing, mpsDaemons, computeDomain); it is converted on load and written
back as format 2. A binary that only knows format 1 treats a format-2 file as corrupt and
recovers from the CDI specs.

The checksum is the sha256 of the canonical JSON (sorted keys, no spaces) of `data` exactly as
stored, so a newer binary's extra fields neither break the checksum nor the decoding (unknown
fields are ignored). Loading never raises: a corrupt file is reported, moved aside and replaced
by an empty checkpoint (dra_fake.core.state rebuilds what it can from the CDI specs).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Generic, Literal, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dra_fake.core import metrics
from dra_fake.core.atomic import atomic_write, file_identity, fsync_dir, remove_durably, stale_temp_files

_log = logging.getLogger(__name__)

FORMAT_VERSION = 2
V1 = 1  # read and converted: see the module docstring
CHECKPOINT_FILE_NAME = "checkpoint.json"
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
    (with other fields at the same time at most), or replaced by a new object: the codec reuses
    an entry's serialisation while those three are unchanged (Codec._payload)."""

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


class Codec(Generic[P]):
    """Encodes and decodes the checkpoint of a driver whose per-claim payload is `payload`."""

    def __init__(self, payload: type[P]) -> None:
        self.payload = payload
        self.model: type[CheckpointData[P]] = CheckpointData[payload]  # type: ignore[valid-type]
        # uid -> (entry, its changeable fields, `"<uid>":<entry>` canonical bytes) of the last encode
        self._entries: dict[str, tuple[ClaimEntry[P], tuple[str, bool, bool], bytes]] = {}

    def empty(self, boot_id: str = "") -> CheckpointData[P]:
        return self.model(nodeBootID=boot_id)

    def encode(self, data: CheckpointData[P]) -> bytes:
        """`{"checksum":…,"data":…,"version":…}` (keys sorted), compact, the checksum over the same
        canonical bytes that go into the file. The payload is serialised by the C encoder
        (`indent` would switch json to its pure-Python encoder), and only the entries that changed
        since the last call are: see `_payload`."""
        payload = self._payload(data)
        digest = "sha256:" + hashlib.sha256(payload).hexdigest()
        return (
            b'{"checksum":"' + digest.encode() + b'","data":' + payload + b',"version":%d}\n' % FORMAT_VERSION
        )

    def _payload(self, data: CheckpointData[P]) -> bytes:
        """canonical_json(data), assembled from per-entry serialisations kept between calls.

        A prepare changes one entry of a checkpoint holding every prepared claim's CDI spec;
        serialising all of them each time made the cost of a prepare grow with the claims held.
        An entry is reused while it is the same object with the same `state`, `unpreparing` and
        `recovered`: the only fields changed on a saved entry (see ClaimEntry)."""
        fields = set(type(data).model_fields)
        if fields != {"claims", "nodeBootID"}:  # a subclass with more fields: the plain way
            return canonical_json(data.model_dump(mode="json", exclude_none=True))
        cache: dict[str, tuple[ClaimEntry[P], tuple[str, bool, bool], bytes]] = {}
        parts = []
        for uid in sorted(data.claims):
            entry = data.claims[uid]
            key = (entry.state, entry.unpreparing, entry.recovered)
            hit = self._entries.get(uid)
            if hit is None or hit[0] is not entry or hit[1] != key:
                member = (
                    canonical_json(uid)
                    + b":"
                    + canonical_json(entry.model_dump(mode="json", exclude_none=True))
                )
                hit = (entry, key, member)
            cache[uid] = hit
            parts.append(hit[2])
        self._entries = cache
        return b'{"claims":{' + b",".join(parts) + b'},"nodeBootID":' + canonical_json(data.nodeBootID) + b"}"

    def _decode_fast(self, raw: bytes) -> CheckpointData[P] | None:
        """A file exactly as `encode` writes it: the checksum is over the data bytes as stored
        (they are the canonical serialisation), so it is checked without re-serialising the data.
        Anything else (format 1, an indented file, a checksum mismatch, odd bytes) returns None:
        the full path decides."""
        start = _FAST_DIGEST_END + len(_FAST_DATA)
        if not (
            raw.startswith(_FAST_HEAD)
            and raw[_FAST_DIGEST_END:start] == _FAST_DATA
            and raw.endswith(_FAST_TAIL)
        ):
            return None
        payload = raw[start : -len(_FAST_TAIL)]
        if hashlib.sha256(payload).hexdigest().encode() != raw[len(_FAST_HEAD) : _FAST_DIGEST_END]:
            return None
        try:
            data = json.loads(payload)
            if not isinstance(data, dict):
                return None
            return self.model.model_validate(data)
        except (UnicodeDecodeError, json.JSONDecodeError, ValidationError):
            return None

    def decode(self, raw: bytes) -> CheckpointData[P]:
        """Parse a checkpoint file (format 2, or 1); CorruptCheckpointError(reason) if it cannot be
        trusted."""
        fast = self._decode_fast(raw)
        if fast is not None:
            return fast
        try:
            document = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise CorruptCheckpointError(REASON_JSON, str(exc)) from None
        if not isinstance(document, dict) or not {"version", "checksum", "data"} <= document.keys():
            raise CorruptCheckpointError(REASON_FORMAT, "expected an object with version, checksum and data")
        if document["version"] not in (FORMAT_VERSION, V1):
            raise CorruptCheckpointError(
                REASON_VERSION,
                f"unknown format version {document['version']!r}, expected {FORMAT_VERSION} or {V1}",
            )
        expected = checksum(document["data"])
        if document["checksum"] != expected:
            raise CorruptCheckpointError(
                REASON_CHECKSUM, f"checksum mismatch: stored {document['checksum']!r}, computed {expected!r}"
            )
        data = document["data"]
        try:
            if document["version"] == V1:
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


def _states(data: CheckpointData[P]) -> dict[str, tuple[ClaimState, int]]:
    return {uid: (e.state, len(e.preparedDevices)) for uid, e in data.claims.items()}


class CheckpointStore(Generic[P]):
    """Reads and writes the checkpoint file. Callers hold the prepare/unprepare lock."""

    def __init__(
        self,
        data_dir: Path,
        payload: type[P],
        boot_id_path: Path = DEFAULT_BOOT_ID_PATH,
        on_corrupt: Callable[[str], None] = metrics.record_checkpoint_error,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(data_dir) / CHECKPOINT_FILE_NAME
        self.codec = Codec(payload)
        self.boot_id_path = Path(boot_id_path)
        self._on_corrupt = on_corrupt
        self._clock = clock
        self._boot_id = ""  # read once: a node's boot ID cannot change under a running process
        # The file as this store last read or wrote it (its file_identity: every save puts a new
        # inode in place) and the object it decodes to: load() returns that object again while the
        # file is the same (a stat per call, not a read and a decode). The same for peek().
        self._current: tuple[tuple[int, int, int], CheckpointData[P]] | None = None
        self._peeked: tuple[tuple[int, int, int], CheckpointData[P]] | None = None
        # The last save: the file's identity (inode, size, mtime) and each claim's state and device
        # count (for metrics, asked after every call: a stat instead of reading the whole file).
        self._saved_states: tuple[tuple[int, int, int] | None, dict[str, tuple[ClaimState, int]]] = (None, {})

    def boot_id(self) -> str:
        if not self._boot_id:  # unreadable ("") is asked again
            self._boot_id = read_boot_id(self.boot_id_path)
        return self._boot_id

    def load(self) -> LoadResult[P]:
        """The current checkpoint. Never raises for a bad file: see the module docstring."""
        current_boot = self.boot_id()
        try:
            identity = file_identity(self.path)  # before reading: a newer file shows at the next load
            current = self._current
            if current is not None and current[0] == identity:
                data = current[1]
            else:
                self._current = None
                data = self.codec.decode(self.path.read_bytes())
                self._current = (identity, data)
        except FileNotFoundError:
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
        """A caller changed a loaded object without saving it (an error path): the next load
        decodes the file again."""
        self._current = None

    def peek(self) -> CheckpointData[P] | None:
        """Read without locking, repairing or reporting (for metrics); None if absent or bad.
        The result is shared between calls while the file stays the same (metrics peek after
        every call): treat it as read-only."""
        try:
            identity = file_identity(self.path)
            cached = self._peeked
            if cached is not None and cached[0] == identity:
                return cached[1]
            data = self.codec.decode(self.path.read_bytes())
        except (OSError, CorruptCheckpointError):
            return None
        self._peeked = (identity, data)
        return data

    def save(self, data: CheckpointData[P]) -> None:
        self._peeked = None  # a caller may have changed a peeked object to save it
        self._current = None  # until the new file is in place
        current_boot = self.boot_id()
        if current_boot:
            data.nodeBootID = current_boot
        self.path.parent.mkdir(parents=True, exist_ok=True)
        raw = self.codec.encode(data)
        atomic_write(self.path, raw, CHECKPOINT_FILE_MODE)
        identity = file_identity(self.path)
        self._current = (identity, data)
        self._saved_states = (identity, _states(data))

    def states(self) -> dict[str, tuple[ClaimState, int]]:
        """Claim UID -> (state, devices), without locking (for metrics): this store's last save
        while the file is still the one it wrote (a stat), else the file as it is."""
        try:
            identity = file_identity(self.path)
        except OSError:
            return {}
        saved_identity, saved = self._saved_states
        if identity == saved_identity:
            return saved
        data = self.peek()
        return {} if data is None else _states(data)

    def remove_temp_files(self) -> list[Path]:
        leftovers = stale_temp_files(self.path) if self.path.parent.is_dir() else []
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
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self._clock()))
        target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}Z")
        n = 1
        while target.exists():
            target = self.path.with_name(f"{self.path.name}.corrupt-{stamp}Z.{n}")
            n += 1
        try:
            os.replace(self.path, target)
            fsync_dir(self.path.parent)
        except OSError as exc:
            _log.error("corrupt checkpoint could not be moved aside path=%s error=%s", self.path, exc)
            return None
        self._drop_old_quarantined()
        return target

    def _drop_old_quarantined(self) -> None:
        """Keep the newest KEEP_CORRUPT quarantined files: enough to debug, bounded on a node whose
        disk keeps corrupting them."""
        try:
            quarantined = sorted(
                self.path.parent.glob(f"{self.path.name}.corrupt-*"),
                key=lambda p: (p.stat().st_mtime, p.name),
            )
            for old in quarantined[:-KEEP_CORRUPT]:
                remove_durably(old)
        except OSError as exc:
            _log.warning("old corrupt checkpoints not removed dir=%s error=%s", self.path.parent, exc)
