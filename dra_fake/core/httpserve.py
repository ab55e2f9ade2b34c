"""The one HTTP server of every metrics and health endpoint (dcgm-exporter's :9400, the plugins'
and the controller's Prometheus :8080/:8081): bounded, so that whoever reaches the port cannot
exhaust the process that serves it (docs/security.md).

- A connection costs a thread only once its request has started to arrive: idle connections wait
  in one selector, and a fixed pool of WORKERS threads answers.
- At most MAX_CONNECTIONS are open at once; past that, the oldest idle one is closed (a scraper
  sends its request at once, a connection that holds a slot without a word goes first).
- A connection has DEADLINE seconds from its accept to its first byte, and DEADLINE seconds from
  a worker taking it to its last byte: one that sends a byte now and then (slowloris) is cut
  there, whatever it does.
- The address it binds: the caller's, else $METRICS_BIND_ADDRESS (BIND_ADDRESS_ENV), else every
  interface (in a pod: the pod's own network; the chart's NetworkPolicy says who reaches it).
- One request a connection (HTTP/1.0 semantics, as dcgm-exporter's Go server without keep-alive),
  request lines and headers capped by http.server's own limits.

Threads: the accept/select loop and the worker pool, nothing per connection.
"""

from __future__ import annotations

import contextlib
import http.server
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

log = logging.getLogger(__name__)

WORKERS = 4  # threads answering requests
MAX_CONNECTIONS = 64  # open at once, idle and in progress
DEADLINE = 10.0  # seconds to the first byte of a request, and again to the last of its answer
BIND_ADDRESS_ENV = "METRICS_BIND_ADDRESS"  # every metrics/health server of the process binds it
POLL = 0.5  # seconds between checks of the deadlines and of shutdown

# A path's answer: (status, body). The server's content type applies to every answer.
Route = Callable[[], tuple[int, str]]
NOT_FOUND = (404, "404 page not found\n")


class BoundedHTTPServer:
    """GET `routes` on addr:port (port 0: any free port, see `server_port`)."""

    def __init__(
        self,
        routes: Mapping[str, Route],
        port: int,
        addr: str | None = None,
        *,
        content_type: str = "text/plain; charset=utf-8",
        workers: int = WORKERS,
        max_connections: int = MAX_CONNECTIONS,
        deadline: float = DEADLINE,
        name: str = "http",
    ) -> None:
        self.routes, self.content_type, self.name = dict(routes), content_type, name
        self.max_connections, self.deadline = max_connections, deadline
        if addr is None:
            addr = os.environ.get(BIND_ADDRESS_ENV, "")
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self.socket = socket.create_server((addr, port), family=family, backlog=max_connections)
        self.socket.setblocking(False)
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self.server_port: int = self.server_address[1]
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=f"{name}-worker")
        self._waiting: dict[socket.socket, float] = {}  # idle, oldest first -> deadline
        self._active: dict[socket.socket, float] = {}  # queued or with a worker -> deadline
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stopped = threading.Event()

    # ---- the loop -------------------------------------------------------------------------------

    def serve_forever(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.socket, selectors.EVENT_READ)
        try:
            while not self._stop.is_set():
                for key, _ in sel.select(POLL):
                    if key.fileobj is self.socket:
                        self._accept(sel)
                    else:
                        conn: socket.socket = key.fileobj  # type: ignore[assignment]
                        sel.unregister(conn)
                        del self._waiting[conn]
                        with self._lock:
                            self._active[conn] = float("inf")  # queued: its time starts with a worker
                        self._pool.submit(self._answer, conn)
                self._expire(sel)
        finally:
            for conn in list(self._waiting):
                self._drop(sel, conn)
            sel.close()
            self._stopped.set()

    def _accept(self, sel: selectors.BaseSelector) -> None:
        try:
            conn, _ = self.socket.accept()
        except OSError:  # gone before accept, or out of descriptors: the next select retries
            return
        with self._lock:
            open_now = len(self._waiting) + len(self._active)
        if open_now >= self.max_connections:
            if not self._waiting:  # every slot is answering: this one waits for no one
                conn.close()
                return
            self._drop(sel, next(iter(self._waiting)))  # the oldest idle one
        conn.setblocking(False)
        self._waiting[conn] = time.monotonic() + self.deadline
        sel.register(conn, selectors.EVENT_READ)

    def _expire(self, sel: selectors.BaseSelector) -> None:
        now = time.monotonic()
        for conn, deadline in list(self._waiting.items()):
            if deadline < now:
                self._drop(sel, conn)
        with self._lock:
            late = [conn for conn, deadline in self._active.items() if deadline < now]
        for conn in late:  # wakes the worker blocked on it; the worker closes it
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def _drop(self, sel: selectors.BaseSelector, conn: socket.socket) -> None:
        self._waiting.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            sel.unregister(conn)
        conn.close()

    def _answer(self, conn: socket.socket) -> None:
        with self._lock:
            self._active[conn] = time.monotonic() + self.deadline
        try:
            conn.setblocking(True)
            conn.settimeout(self.deadline)
            _Handler(conn, ("", 0), self)  # type: ignore[arg-type]
        except Exception as err:  # a broken connection is that connection's problem
            log.debug("HTTP connection failed", extra={"server": self.name, "error": str(err)})
        finally:
            with self._lock:
                self._active.pop(conn, None)
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    # ---- lifecycle ------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the loop (from another thread) and wait for it."""
        self._stop.set()
        self._stopped.wait(POLL * 4 + 1)

    def server_close(self) -> None:
        self._stop.set()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.socket.close()

    def start(self, stop: threading.Event | None = None) -> threading.Thread:
        """serve_forever in a daemon thread; with `stop`, shut down when it is set."""
        thread = threading.Thread(target=self.serve_forever, name=self.name, daemon=True)
        thread.start()
        if stop is not None:

            def shut_down() -> None:
                stop.wait()
                self.shutdown()
                self.server_close()

            threading.Thread(target=shut_down, name=f"{self.name}-stop", daemon=True).start()
        return thread


class _Handler(http.server.BaseHTTPRequestHandler):
    server: BoundedHTTPServer  # type: ignore[assignment]

    def do_GET(self) -> None:
        route = self.server.routes.get(self.path.split("?", 1)[0])
        status, body = route() if route is not None else NOT_FOUND
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", self.server.content_type)
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:
        return  # scrapes are not worth a log line each
