"""Start, track and stop the local cluster's processes (by PID, in their own process groups)."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("localcluster")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for(
    what: str,
    check: Callable[[], bool],
    timeout: float,
    every: float = 0.2,
    alive: Callable[[], None] | None = None,
) -> None:
    """Poll check() until it returns True; raise TimeoutError naming what was awaited."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while True:
        if alive is not None:
            alive()
        try:
            if check():
                return
        except Exception as err:
            last = err
        else:
            last = None
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"timed out after {timeout:.0f}s waiting for {what}" + (f": {last}" if last else "")
            )
        time.sleep(every)


@dataclass
class Process:
    name: str
    pid: int
    log: str

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        # A zombie (exited child not yet reaped) counts as dead.
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                return f.read().split(")")[-1].split()[0] != "Z"
        except OSError:
            return False

    def tail(self, lines: int = 30) -> str:
        """The last lines this run wrote (the log keeps earlier runs' before spawn's `====` line)."""
        try:
            text = Path(self.log).read_text(errors="replace").splitlines()
        except OSError:
            return ""
        starts = [i for i, line in enumerate(text) if line.startswith("==== ")]
        return "\n".join(text[starts[-1] + 1 if starts else 0 :][-lines:])

    def check_alive(self) -> None:
        if not self.alive():
            raise RuntimeError(f"{self.name} exited; last log lines of {self.log}:\n{self.tail()}")

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM the process group, then SIGKILL what is left after the timeout."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                _reap(self.pid)
                if not self.alive():
                    return
                time.sleep(0.1)
        log.warning("process %s (pid %d) did not stop", self.name, self.pid)

    def kill(self) -> None:
        """SIGKILL only the process itself (crash simulation)."""
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            return

        def dead() -> bool:
            _reap(self.pid)
            return not self.alive()

        wait_for(f"{self.name} to die", dead, 10)


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def spawn(
    name: str, argv: Sequence[str], log_dir: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Process:
    """Start argv in its own session, appending stdout and stderr to <log_dir>/<name>.log."""
    log_dir.mkdir(parents=True, exist_ok=True)
    path = log_dir / f"{name}.log"
    with open(path, "ab") as out:
        out.write(f"\n==== {time.strftime('%H:%M:%S')} starting {name}: {' '.join(argv)}\n".encode())
        out.flush()
        proc = subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
            cwd=cwd,
        )
    log.info("started %s pid=%d log=%s", name, proc.pid, path)
    return Process(name=name, pid=proc.pid, log=str(path))
