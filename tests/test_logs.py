"""Structured log lines (dra_fake.core.logs): the text and JSON formats, and their time stamps
formatted once per second but always the record's own."""

from __future__ import annotations

import json
import logging
import time

from dra_fake.core import logs


def record(created: float, **extra: object) -> logging.LogRecord:
    rec = logging.makeLogRecord(
        {"name": "dra_fake.x", "levelname": "INFO", "msg": "claim %s", "args": ("a",)}
    )
    rec.created, rec.msecs = created, (created - int(created)) * 1000
    rec.__dict__.update(extra)
    return rec


def test_text_lines_carry_the_time_level_logger_message_and_fields() -> None:
    fmt = logs.TextFormatter()
    for created in (1_700_000_000.25, 1_700_000_000.75, 1_700_000_001.5, 1_699_999_999.0):
        line = fmt.format(record(created, claim="ns/c", error="no such device"))
        when = time.strftime("%H:%M:%S", time.localtime(created))
        assert line == f"{when} I dra_fake.x: claim a claim=ns/c error='no such device'"


def test_json_lines_carry_a_utc_time_to_the_millisecond_and_the_fields() -> None:
    fmt = logs.JsonFormatter()
    for created, ts in (
        (1_700_000_000.25, "2023-11-14T22:13:20.250Z"),
        (1_700_000_000.75, "2023-11-14T22:13:20.750Z"),
        (1_700_000_001.5, "2023-11-14T22:13:21.500Z"),
        (1_699_999_999.0, "2023-11-14T22:13:19.000Z"),
    ):
        entry = json.loads(fmt.format(record(created, devices=["gpu-0"])))
        assert entry == {
            "ts": ts,
            "level": "info",
            "logger": "dra_fake.x",
            "msg": "claim a",
            "devices": ["gpu-0"],
        }
