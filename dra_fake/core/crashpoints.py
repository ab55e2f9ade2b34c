"""Crash points: where tests SIGKILL a plugin to prove each step of a prepare or an unprepare is
safe (docs/prepare.md#crash-safety). A step calls `crash_point(name)`; the process dies there when
`name` is in $DRA_FAKE_CRASH_AT."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Mapping

_log = logging.getLogger(__name__)

CRASH_ENV = "DRA_FAKE_CRASH_AT"
CRASH_POINTS = (
    "prepare:after-lock",
    "prepare:after-rollback",
    "prepare:after-started",
    "prepare:after-apply",
    "prepare:after-cdi",
    "prepare:after-completed",
    "unprepare:after-lock",
    "unprepare:after-started",
    "unprepare:after-undo",
    "unprepare:after-cdi-removed",
    "unprepare:after-dropped",
)


def crash_points_wanted(environ: Mapping[str, str] = os.environ) -> frozenset[str]:
    return frozenset(environ.get(CRASH_ENV, "").split(",")) - {""}


# Read once: a test sets it in the environment of the process it will kill (several points are
# passed on every call, and os.environ is a lookup with an encoding each time).
_CRASH_AT = crash_points_wanted()


def crash_point(name: str) -> None:
    """SIGKILL this process if `name` is listed (comma-separated) in $DRA_FAKE_CRASH_AT as it
    was when the process started."""
    if name in _CRASH_AT:
        _log.warning("crash point reached, killing the process point=%s", name)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)
