"""The prepare/unprepare lock shared by every plugin instance on a node.

NVIDIA's GPU plugin serializes all prepare and unprepare work under an exclusive flock on
`<plugin data dir>/pu.lock`, waiting at most 10 s. During a rolling update the old and new plugin
pods share the plugin data dir, so the flock (not an in-process mutex) is what keeps them from
interleaving. flock locks belong to an open file description, so two threads of one process that
each open the file exclude each other as well.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

LOCK_FILE_NAME = "pu.lock"
DEFAULT_TIMEOUT_SECONDS = 10.0
_POLL_MIN = 0.005
_POLL_MAX = 0.1

_log = logging.getLogger(__name__)


class LockTimeoutError(TimeoutError):
    """The lock was not acquired within the timeout."""


class PrepareUnprepareLock:
    """Exclusive, cross-process lock; use as a context manager.

    `with PrepareUnprepareLock(data_dir):` blocks until the lock is held (or raises
    LockTimeoutError after `timeout` seconds). The lock file is created with mode 0600.
    """

    def __init__(
        self,
        data_dir: Path,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.path = Path(data_dir) / LOCK_FILE_NAME
        self.timeout = timeout
        self._clock = clock
        self._sleep = sleep
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            raise RuntimeError(f"lock already held by this object path={self.path}")
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except FileNotFoundError:  # no data directory yet (checked only then: once per call)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            deadline = self._clock() + self.timeout
            delay = _POLL_MIN
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                        raise
                remaining = deadline - self._clock()
                if remaining <= 0:
                    raise LockTimeoutError(f"timed out after {self.timeout:g}s waiting for lock {self.path}")
                self._sleep(min(delay, remaining))
                delay = min(delay * 2, _POLL_MAX)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd
        _log.debug("lock acquired path=%s", self.path)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        _log.debug("lock released path=%s", self.path)

    def __enter__(self) -> PrepareUnprepareLock:
        self.acquire()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class NodeSerializer:
    """Serialises prepare/unprepare: threads of this process queue on a mutex, then the process
    takes the node-wide flock (other plugin instances). One timeout bounds both waits."""

    def __init__(self, data_dir: Path, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        self.data_dir = data_dir
        self.timeout = timeout
        self._mutex = threading.Lock()

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """Raises LockTimeoutError when either lock is not had within the timeout."""
        with self.in_process() as remaining, self.across_processes(remaining):
            yield

    @contextlib.contextmanager
    def in_process(self) -> Iterator[float]:
        """The process mutex; yields the seconds of the timeout left for the flock."""
        start = time.monotonic()
        if not self._mutex.acquire(timeout=self.timeout):
            raise LockTimeoutError(f"timed out after {self.timeout:g}s waiting for the in-process lock")
        try:
            yield max(self.timeout - (time.monotonic() - start), 0.0)
        finally:
            self._mutex.release()

    def across_processes(self, timeout: float) -> PrepareUnprepareLock:
        """The node-wide flock (hold the process mutex first)."""
        return PrepareUnprepareLock(self.data_dir, timeout=timeout)
