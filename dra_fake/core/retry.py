"""One way to retry: every failure is caught and logged (nothing a loop does may end it silently),
with exponential backoff between attempts, and a stop event ends the wait at once."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")

INITIAL_DELAY = 0.5
MAX_DELAY = 30.0


class Backoff:
    """0.5 s, 1 s, 2 s, ... up to `limit`; `reset` after a success."""

    def __init__(self, initial: float = INITIAL_DELAY, limit: float = MAX_DELAY) -> None:
        self.initial, self.limit = initial, limit
        self.delay = initial

    def next(self) -> float:
        delay = self.delay
        self.delay = min(self.delay * 2, self.limit)
        return delay

    def reset(self) -> None:
        self.delay = self.initial


def with_backoff(what: str, fn: Callable[[], T], stop: threading.Event, limit: float = MAX_DELAY) -> T:
    """Retry fn until it succeeds (the API server may be starting or restarting). When `stop` is
    set the last error is raised instead of waiting again."""
    backoff = Backoff(limit=limit)
    while True:
        try:
            return fn()
        except Exception as err:
            if stop.is_set():
                raise
            delay = backoff.next()
            log.warning("%s failed, retrying", what, extra={"error": str(err), "retryIn": delay})
            stop.wait(delay)


def run_forever(
    what: str,
    step: Callable[[], object],
    stop: threading.Event,
    interval: float,
    wake: threading.Event | None = None,
) -> None:
    """A background loop that only ends with `stop`: `step` every `interval` seconds (sooner when
    `wake` is set); a failing step is logged and retried with backoff instead of ending the loop."""
    backoff = Backoff()
    while not stop.is_set():
        try:
            step()
            backoff.reset()
            pause = interval
        except Exception as err:
            pause = backoff.next()
            log.warning("%s failed, retrying", what, extra={"error": str(err), "retryIn": pause})
        if wake is None:
            stop.wait(pause)
        else:
            wake.wait(pause)
            wake.clear()
