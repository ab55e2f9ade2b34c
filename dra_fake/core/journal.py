"""The checkpoint's journal: the changes since the last full checkpoint file, appended (with an
fdatasync for a durable save), so a save costs what changed instead of every claim held
(docs/prepare.md#the-journal).

`checkpoint.journal` beside `checkpoint.json`, lines of `<sha256 hex of body> <body>\\n`, each body
one compact JSON object:

    {"base":"sha256:<hex>"}                first line: the checksum of the checkpoint it follows
    {"entry":{...},"uid":"<uid>"}          a claim's entry is now this
    {"uid":"<uid>"}                        the claim is gone

After the last line the file holds zeros, written ahead: a record is written over them (`write`),
so the file's size and blocks stay the same and the fdatasync that makes the record durable
flushes its data, not the file system's own journal (fdatasync(2): a change of the size needs
the metadata flushed, a change of the modification time does not); where the zeros run out, the
record brings GROW_BYTES more (docs/prepare.md#the-journal).

A journal whose first line names another checkpoint is stale (a compaction wrote a new
checkpoint, then crashed before replacing the journal) and is ignored: that checkpoint already
holds its records. The last line may be torn by a crash during its write (its call never
returned, so nothing relied on it): it is ignored. A bad line before a good one is corruption.

It keeps its place: in the machinery trials of `make bench` (with it and with every save
rewriting the whole checkpoint, one after the other, three repetitions of four cases) the
prepare median was better with it in 10, 11, 10 and 11 of 12 pairs in four runs (56f6e0b,
6a7d5d4, ee22336, 7c5f52a); at 56f6e0b the medians were 0.58x, 0.82x, 0.72x and 0.90x of the
rewrites' (1x1, 1x16, 8x1, 8x16 devices x callers) (docs/benchmarks/history.md#machinery-on-trial).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

JOURNAL_FILE_NAME = "checkpoint.journal"
# Zeros a record brings when it does not fit in those ahead: a write that changes the file's size
# commits the file system's journal (as every append did), so one in every GROW_BYTES of records
# does. An 8-device prepare writes 9-15 KB: one in 17-30.
GROW_BYTES = 256 * 1024


class JournalError(ValueError):
    """A journal that cannot be trusted (not a torn last line)."""


def _line(body: bytes) -> bytes:
    return hashlib.sha256(body).hexdigest().encode() + b" " + body + b"\n"


def header(base_checksum: str) -> bytes:
    return _line(b'{"base":' + json.dumps(base_checksum).encode() + b"}")


def put(uid_json: bytes, entry_json: bytes) -> bytes:
    """The record of a claim's new entry, from their canonical JSON."""
    return _line(b'{"entry":' + entry_json + b',"uid":' + uid_json + b"}")


def drop(uid_json: bytes) -> bytes:
    return _line(b'{"uid":' + uid_json + b"}")


@dataclass
class Replay:
    base: str  # the checksum of the checkpoint the journal follows
    # (uid, entry or None: gone)
    changes: list[tuple[str, dict[str, Any] | None]] = field(default_factory=list)


def _body(line: bytes) -> dict[str, Any] | None:
    digest, sep, body = line.partition(b" ")
    if not sep or hashlib.sha256(body).hexdigest().encode() != digest:
        return None
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def parse(raw: bytes) -> Replay:
    """The journal's records in order; JournalError if it cannot be trusted."""
    # The zeros written ahead go; then the part after the last newline (b"" when the file ends
    # with one) is a line torn by a crash during its write: ignored.
    bodies = [_body(line) for line in raw.rstrip(b"\0").split(b"\n")[:-1]]
    if bodies and bodies[-1] is None:  # a failing last line: the torn append zero-filled it
        bodies.pop()
    if not bodies:
        raise JournalError("no header line")
    first = bodies[0]
    if first is None or not isinstance(first.get("base"), str):
        raise JournalError("the first line is not a valid header")
    replay = Replay(base=first["base"])
    for n, body in enumerate(bodies[1:], start=2):
        uid = body.get("uid") if body is not None else None
        entry = body.get("entry") if body is not None else None
        if not isinstance(uid, str) or not (entry is None or isinstance(entry, dict)):
            raise JournalError(f"line {n} is not a valid record")
        replay.changes.append((uid, entry))
    return replay


def write(path: Path, offset: int, size: int, records: bytes, durable: bool = True) -> tuple[int, int, int]:
    """Write `records` at `offset` (the end of the last record) of the journal of `size` bytes and
    (`durable`) fdatasync it, which makes every earlier write durable too; GROW_BYTES of zeros
    follow records that do not fit. Returns the file's identity now (atomic.file_identity: what
    a stat would say, without one). FileNotFoundError if it is gone."""
    if offset + len(records) > size:
        records += bytes(GROW_BYTES)
    fd = os.open(path, os.O_WRONLY)
    try:
        view = memoryview(records)
        while view:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
        # Readers tell the files apart by (inode, size, mtime) (atomic.file_identity), and a write
        # in place keeps inode and size; a coarse clock (a kernel tick, 1-10 ms, before Linux
        # 6.13's fine-grained timestamps) may keep the mtime too. So each write sets a later one.
        st = os.fstat(fd)
        mtime = max(time.time_ns(), st.st_mtime_ns + 1)
        os.utime(fd, ns=(st.st_atime_ns, mtime))
        if durable:
            os.fdatasync(fd)
    finally:
        os.close(fd)
    # A file system that keeps coarser times stores another mtime: the next load re-reads the
    # files (the identity only saves reads), never trusts a stale one.
    return (st.st_ino, st.st_size, mtime)
