"""Structured logging: key=value text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Literal

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


def _fields(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(_fields(record))
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = self.formatTime(record, "%H:%M:%S")
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
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("kubernetes", "urllib3"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
