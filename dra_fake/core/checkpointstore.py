"""A kubelet plugin's checkpoint files: `CheckpointStore` loads the checkpoint with its journal
(reusing the decoded object while the files are unchanged), saves by appending to the journal or
compacting, and quarantines a corrupt file (dra_fake.core.checkpoint: the format)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any, Generic, NamedTuple

from dra_fake.core import journal, metrics, trials
from dra_fake.core.atomic import atomic_write, file_identity, fsync_dir, remove_durably, stale_temp_files
from dra_fake.core.checkpoint import (
    CHECKPOINT_FILE_NAME,
    REASON_UNREADABLE,
    CheckpointData,
    ClaimState,
    CorruptCheckpointError,
    LoadResult,
    P,
    canonical_json,
    read_document,
)
from dra_fake.core.checkpointcodec import Codec

_log = logging.getLogger(__name__)

# Compaction: a save rewrites the whole checkpoint (and starts an empty journal) once the journal
# is larger than the checkpoint and than this (a start-up replays at most about that much: ~10 ms
# here). A compaction costs two file writes and four fsyncs; an 8-device prepare appends ~15 KB,
# so at 256 KiB one prepare in 17 paid for one
# (docs/benchmarks/history.md#ninth-round-less-python-per-device-fewer-compactions).
COMPACT_MIN_BYTES = 1024 * 1024
CHECKPOINT_FILE_MODE = 0o600
KEEP_CORRUPT = 5  # quarantined corrupt checkpoints kept beside the live one
DEFAULT_BOOT_ID_PATH = Path("/proc/sys/kernel/random/boot_id")


def read_boot_id(path: Path) -> str:
    try:
        return path.read_text(encoding="ascii").strip()
    except OSError as exc:
        _log.warning("boot ID unreadable path=%s error=%s", path, exc)
        return ""


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
            and not trials.without("journal")
            and current.journal_end <= max(COMPACT_MIN_BYTES, current.identity[0][1])
            else None
        )
        try:
            if appendable is not None:
                end, identity = self._append(data, appendable, durable, touched)
            else:
                end, identity = self._rewrite(data), self._identity()
        except FileNotFoundError:  # the journal was removed under us
            if appendable is None:
                raise
            end, identity = self._rewrite(data), self._identity()
        self._current = _Files(identity, data, True, end)

    def _rewrite(self, data: CheckpointData[P]) -> int:
        """The whole checkpoint, then a journal that follows it. In this order: a crash between
        the two leaves the new checkpoint with the old journal, which names the old one (stale,
        ignored); the checkpoint's rename is made durable before the journal is replaced.
        Returns the journal's end."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        raw, digest = self.codec.encode_with_checksum(data)
        atomic_write(self.path, raw, CHECKPOINT_FILE_MODE)
        if trials.without("journal"):  # as format 2 saved: the one file (its journal, if any, gone)
            self.journal_path.unlink(missing_ok=True)
            return 0
        head = journal.header(digest)
        atomic_write(self.journal_path, head, CHECKPOINT_FILE_MODE)
        return len(head)

    def _append(
        self, data: CheckpointData[P], files: _Files, durable: bool, touched: Collection[str] | None
    ) -> tuple[int, Identity]:
        """The journal records of what changed in `data` since the files were written; returns
        the journal's end and the files' identity (the checkpoint's as it was)."""
        changed, gone = self.codec.changes(data, touched)
        records = [journal.put(*self.codec.entry_json(uid, data.claims[uid])) for uid in changed]
        records += [journal.drop(canonical_json(uid)) for uid in gone]
        if not records:
            return files.journal_end, files.identity
        journal_file = files.identity[1]  # its size as this store left it
        if journal_file is None:
            raise FileNotFoundError(self.journal_path)
        record_bytes = b"".join(records)
        written = journal.write(self.journal_path, files.journal_end, journal_file[1], record_bytes, durable)
        return files.journal_end + len(record_bytes), (files.identity[0], written)

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
