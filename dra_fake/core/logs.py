"""Structured logging: key=value text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable
from typing import Literal

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class _SecondClock:
    """A record's time to the second, formatted once per second (a plugin logs a line or two per
    claim: strftime per line was a tenth of a line's cost)."""

    def __init__(self, fmt: str, convert: Callable[[float], time.struct_time]) -> None:
        self.fmt, self.convert = fmt, convert
        self._last: tuple[int, str] = (-1, "")

    def __call__(self, created: float) -> str:
        second = int(created)
        last = self._last
        if last[0] != second:
            last = self._last = (second, time.strftime(self.fmt, self.convert(created)))
        return last[1]


class JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._clock = _SecondClock("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": self._clock(record.created) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_fields(record))
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._clock = _SecondClock("%H:%M:%S", time.localtime)

    def format(self, record: logging.LogRecord) -> str:
        when = self._clock(record.created)
        base = f"{when} {record.levelname[0]} {record.name}: {record.getMessage()}"
        extra = " ".join(
            f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}"
            for k, v in _fields(record).items()
        )
        text = f"{base} {extra}" if extra else base
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def setup(level: str = "info", fmt: Literal["text", "json"] = "text") -> None:
    # What no formatter here prints is not gathered per record: the caller's file and line (a
    # walk of the stack), the thread and the process (the logging HOWTO's "Optimization").
    logging._srcfile = None
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("kubernetes", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
