"""The informer's watch stream reader: one event per line, wherever the chunks break."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from dra_fake.core.informer import json_body, stream_events


class FakeResponse:
    def __init__(self, chunks: list[bytes]) -> None:
        self.chunks = chunks
        self.released = False
        self.data = b"".join(chunks)

    def stream(self, amt: int) -> Iterator[bytes]:
        yield from self.chunks

    def release_conn(self) -> None:
        self.released = True


def events(n: int) -> list[dict[str, Any]]:
    return [
        {"type": "ADDED", "object": {"metadata": {"name": f"n{i}", "resourceVersion": str(i)}}}
        for i in range(n)
    ]


@pytest.mark.parametrize("size", [1, 7, 64, 10_000])
def test_events_split_anywhere_come_out_whole(size: int) -> None:
    want = events(20)
    stream = b"".join(orjson.dumps(e) + b"\n" for e in want)
    resp = FakeResponse([stream[i : i + size] for i in range(0, len(stream), size)])
    got = list(stream_events(lambda **kw: resp))
    assert got == want
    assert resp.released


def test_blank_lines_skipped_and_a_torn_last_line_dropped() -> None:
    resp = FakeResponse([b"\n", orjson.dumps(events(1)[0]) + b"\n\n", b'{"type": "ADD'])
    assert list(stream_events(lambda **kw: resp)) == events(1)


def test_a_list_body_that_is_not_an_object_is_refused() -> None:
    resp = FakeResponse([b"[1, 2]"])
    with pytest.raises(TypeError, match="JSON object"):
        json_body(resp)
