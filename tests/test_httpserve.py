"""The bounded HTTP server of every metrics and health endpoint (dra_fake.core.httpserve): whoever
reaches the port cannot exhaust the process (issue 46, docs/security.md)."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from dra_fake.core import httpserve
from dra_fake.core.httpserve import BoundedHTTPServer


@pytest.fixture
def server() -> Iterator[BoundedHTTPServer]:
    s = BoundedHTTPServer(
        {"/metrics": lambda: (200, "up 1\n")}, 0, "127.0.0.1", max_connections=32, deadline=2
    )
    stop = threading.Event()
    s.start(stop)
    try:
        yield s
    finally:
        stop.set()


def get(server: BoundedHTTPServer, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.server_port}{path}", timeout=10) as r:
        return str(r.read().decode())


def threads() -> int:
    return threading.active_count()


def test_serves_its_routes_and_404(server: BoundedHTTPServer) -> None:
    assert get(server) == "up 1\n"
    with pytest.raises(urllib.error.HTTPError, match="404"):
        get(server, "/nope")


def test_500_idle_connections_hold_no_thread_and_a_scrape_still_answers(server: BoundedHTTPServer) -> None:
    """Before: a thread per connection without a timeout (500 idle connections, 500 threads)."""
    get(server)  # the worker pool exists
    before = threads()
    idle = []
    try:
        for _ in range(500):
            idle.append(socket.create_connection(("127.0.0.1", server.server_port), timeout=10))
        started = time.monotonic()
        assert get(server) == "up 1\n"
        assert time.monotonic() - started < 5
        assert threads() <= before + 1, threads()  # at most one more pool worker
    finally:
        for s in idle:
            s.close()


def test_a_slow_client_is_cut_at_the_deadline(server: BoundedHTTPServer) -> None:
    """A request started and never finished (slowloris) holds a worker at most `deadline` seconds."""
    slow = [socket.create_connection(("127.0.0.1", server.server_port), timeout=10) for _ in range(8)]
    try:
        for s in slow:  # more than WORKERS: every worker is held
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
        started = time.monotonic()
        assert get(server) == "up 1\n"  # answered once the deadline frees a worker
        assert time.monotonic() - started < 2 * 2 + 3
        deadline = time.monotonic() + 10
        for s in slow:  # each was closed by the server: recv sees the end
            s.settimeout(max(0.1, deadline - time.monotonic()))
            assert s.recv(1024) == b""
    finally:
        for s in slow:
            s.close()


def test_bind_address_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(httpserve.BIND_ADDRESS_ENV, "127.0.0.1")
    s = BoundedHTTPServer({}, 0)
    try:
        assert s.server_address[0] == "127.0.0.1"
    finally:
        s.server_close()
