"""Socket paths and unix-socket housekeeping for the kubelet-facing gRPC servers.

Naming follows the Go ``kubeletplugin`` library (docs/reference/kubernetes-dra.md#socket-names): the
registration socket is
``<registrar_dir>/<driver>-reg.sock`` and the DRA socket ``<plugins_dir>/<driver>/dra.sock``; with a
rolling update (pod UID from the downward API) ``<driver>-<podUID>-reg.sock`` and ``dra-<podUID>.sock``.
For the rolling-update registration socket the master (expected 1.37) fallbacks keep the full path
within the AF_UNIX limit.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import secrets
import stat
from dataclasses import dataclass

log = logging.getLogger(__name__)

# sun_path is 108 bytes on Linux. Go may use all 108 (no terminator); grpc-core needs the NUL
# terminator, so the longest path it can bind is 107 bytes ("Path name should not have more than
# 107 characters"). Go's fallback rule is "<= 108"; we stop at 107 so the chosen path is bindable.
UNIX_PATH_MAX = 107

DIR_MODE = 0o750
SOCKET_MODE = 0o660


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _fits(path: str, max_len: int) -> bool:
    return len(os.fsencode(path)) <= max_len


def registration_socket_path(
    registrar_dir: str, driver_name: str, pod_uid: str | None = None, max_len: int = UNIX_PATH_MAX
) -> str:
    """Absolute path of the registration socket.

    Without ``pod_uid``: ``<driver>-reg.sock``. With it, the first candidate that fits ``max_len``:
    ``<driver>-<podUID>-reg.sock``, ``<driver>-<b64url(sha256(podUID)[:8])>-reg.sock``,
    ``dra-<b64url(sha256(driver + "\\0" + podUID)[:16])>-reg.sock``. Names never start with ``.``
    (the kubelet's plugin watcher ignores those).
    """
    base = os.path.abspath(registrar_dir)
    if not pod_uid:
        candidates = [f"{driver_name}-reg.sock"]
    else:
        short = _b64(hashlib.sha256(pod_uid.encode()).digest()[:8])
        both = _b64(hashlib.sha256(f"{driver_name}\x00{pod_uid}".encode()).digest()[:16])
        candidates = [
            f"{driver_name}-{pod_uid}-reg.sock",
            f"{driver_name}-{short}-reg.sock",
            f"dra-{both}-reg.sock",
        ]
    for name in candidates:
        path = os.path.join(base, name)
        if _fits(path, max_len):
            return path
    raise ValueError(
        f"registration socket path {os.path.join(base, candidates[-1])!r} exceeds {max_len} bytes; "
        "use a shorter registrar directory"
    )


def dra_socket_path(
    plugins_dir: str, driver_name: str, pod_uid: str | None = None, max_len: int = UNIX_PATH_MAX
) -> str:
    """Absolute path of the DRA socket: ``<plugins_dir>/<driver>/dra.sock`` or ``dra-<podUID>.sock``."""
    name = f"dra-{pod_uid}.sock" if pod_uid else "dra.sock"
    path = os.path.join(os.path.abspath(plugins_dir), driver_name, name)
    if not _fits(path, max_len):
        raise ValueError(f"DRA socket path {path!r} exceeds {max_len} bytes; use a shorter plugins directory")
    return path


def ensure_dir(path: str, mode: int = DIR_MODE) -> None:
    """Create ``path`` and missing parents with ``mode`` (umask-independent).

    Directories that already exist keep their mode: the kubelet's own directories are not ours.
    """
    missing: list[str] = []
    cur = os.path.abspath(path)
    while not os.path.isdir(cur):
        missing.append(cur)
        parent = os.path.dirname(cur)
        if parent == cur:
            break
        cur = parent
    for d in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(d, mode)
            os.chmod(d, mode)
            log.debug("created directory", extra={"path": d, "mode": oct(mode)})


def temporary_socket_path(path: str) -> str:
    """A free hidden name next to ``path`` to bind before renaming into place.

    ``.`` + 7 hex digits: 8 bytes, no longer than any final name (the shortest is ``dra.sock``), so it
    fits whenever ``path`` does; the leading dot hides it from the kubelet's plugin watcher.
    """
    directory = os.path.dirname(path)
    while True:
        candidate = os.path.join(directory, "." + secrets.token_hex(4)[:7])
        if not os.path.lexists(candidate):
            return candidate


def remove_stale_socket(path: str) -> bool:
    """Remove a leftover socket at ``path``; True if one was removed.

    A non-socket at the path is not deleted (ValueError): it is not ours to remove.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        raise ValueError(f"{path!r} exists and is not a socket; refusing to replace it")
    os.unlink(path)
    log.info("removed stale socket", extra={"path": path})
    return True


@dataclass(frozen=True)
class SocketIdentity:
    """Device and inode of a bound socket, so cleanup never removes a successor's socket."""

    dev: int
    ino: int

    @classmethod
    def of(cls, path: str) -> SocketIdentity:
        st = os.lstat(path)
        return cls(st.st_dev, st.st_ino)


def remove_own_socket(path: str, identity: SocketIdentity | None) -> bool:
    """Remove ``path`` if it is still the socket we bound (same inode); True if removed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISSOCK(st.st_mode):
        return False
    if identity is not None and (st.st_dev, st.st_ino) != (identity.dev, identity.ino):
        log.warning("socket was replaced by another process; leaving it", extra={"path": path})
        return False
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return True


def grpc_unix_target(path: str) -> str:
    """gRPC address for a unix socket. ``unix:<abs path>`` (not ``unix://``: grpc-core rejects long
    paths in that form two bytes earlier)."""
    return "unix:" + os.path.abspath(path)
