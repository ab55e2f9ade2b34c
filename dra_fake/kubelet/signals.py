"""Serving until SIGTERM or SIGINT, then stopping what was started, in reverse order."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Protocol

log = logging.getLogger(__name__)

SIGNAL_POLL_INTERVAL = 0.5  # seconds; bounds the delay between SIGTERM and the start of shutdown


class Stoppable(Protocol):
    def stop(self, grace: float | None = ...) -> None: ...


def install_signal_handlers(
    stop: threading.Event, signals: Sequence[signal.Signals] = (signal.SIGTERM, signal.SIGINT)
) -> Callable[[], None]:
    """Make ``signals`` set ``stop``; returns a function restoring the previous handlers.
    Main thread only (a Python restriction)."""
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        log.info("signal received, shutting down", extra={"signal": signal.Signals(signum).name})
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in signals}

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore


def serve_forever(
    *components: Stoppable,
    grace: float = 10.0,
    stop_event: threading.Event | None = None,
    ready: threading.Event | None = None,
) -> None:
    """Block until SIGTERM/SIGINT (or ``stop_event``), then stop the already started ``components``
    in reverse order, each with ``grace`` seconds for in-flight calls. ``ready`` is set once the
    signal handlers are installed. Call from the main thread."""
    stop = stop_event if stop_event is not None else threading.Event()
    restore = install_signal_handlers(stop)
    try:
        if ready is not None:
            ready.set()
        # Wake up periodically: a process-directed signal may be delivered to a gRPC thread, and the
        # Python-level handler only runs once the main thread returns to the interpreter loop.
        while not stop.wait(SIGNAL_POLL_INTERVAL):
            pass
    finally:
        try:
            for component in reversed(components):
                component.stop(grace)
        finally:
            restore()
