"""Crash-safe file replacement: temp file in the same directory, fsync, rename, fsync the directory.

A reader (the container runtime's CDI cache, another plugin instance) sees either the old file or
the new one, never a partial write; after return the new content survives a power cut.
"""

from __future__ import annotations

import itertools
import os
import secrets
from pathlib import Path

TEMP_SUFFIX = ".tmp"
# Temp names: a random start per process, then a count (one random draw per name was a getrandom
# call in every prepare's serial part); O_EXCL still refuses a name another process has.
_TEMP_NAMES = itertools.count(int.from_bytes(secrets.token_bytes(6), "big"))


def temp_name_prefix(final: Path) -> str:
    """Temp files start with '.' and end with '.tmp': CDI loaders (only *.json/*.yaml) ignore them."""
    return f".{final.name}."


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int, durable: bool = True, sync_dir: bool = True) -> None:
    """Replace `path` with `data` atomically and (unless not `durable`: readers never see a partial
    file, but a crash may lose it) durably; the file gets exactly `mode`. `sync_dir=False`: the
    caller fsyncs the directory itself (once for a batch of files)."""
    directory = path.parent
    while True:
        tmp = directory / f"{temp_name_prefix(path)}{next(_TEMP_NAMES) & 0xFFFFFFFFFFFF:012x}{TEMP_SUFFIX}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
            break
        except FileExistsError:
            continue
    try:
        os.fchmod(fd, mode)  # independent of the umask
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        if durable:
            os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable and sync_dir:
        fsync_dir(directory)


def file_identity(path: str | Path) -> tuple[int, int, int]:
    """(inode, size, mtime): differs for every file atomic_write puts in place (a new inode each
    time) and after a write in place; lets a reader skip re-reading a file it already knows."""
    st = os.stat(path)
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def remove_durably(path: Path, sync_dir: bool = True) -> bool:
    """Remove `path` (missing is fine) and fsync its directory (unless the caller does, once for
    a batch). Returns whether a file was removed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    if sync_dir:
        fsync_dir(path.parent)
    return True


def stale_temp_files(final: Path) -> list[Path]:
    """Temp files an interrupted atomic_write(final) may have left behind."""
    prefix = temp_name_prefix(final)
    return sorted(
        p for p in final.parent.glob(f"{prefix}*{TEMP_SUFFIX}") if p.name.startswith(prefix) and p.is_file()
    )
