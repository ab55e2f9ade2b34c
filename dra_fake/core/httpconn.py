"""One kept-alive HTTP/1.1 connection to the API server, for requests whose answer is read whole
(dra_fake.core.kube.DirectJson keeps one per thread). The request goes out in one write; the
answer is parsed by httptools (llhttp, Node.js's HTTP parser). http.client spent ~150 us of CPU
more per request, most of it parsing headers through the email package: half the CPU of a claim
GET, and of each of fleet mode's three requests per node
(docs/benchmarks/history.md#scale-mode-dra-fake-fleet)."""

from __future__ import annotations

import http.client
import select
import socket
import ssl
from collections.abc import Mapping
from typing import cast

import httptools


class ConnectionLost(ConnectionError):
    """The server closed the connection, or answered what is not HTTP, before a whole answer."""


class _Answer:
    """httptools' callbacks for one response: status reason, body parts, completion."""

    __slots__ = ("body", "close", "complete", "framed", "headers_done", "reason")

    def __init__(self) -> None:
        self.reason = ""
        self.body: list[bytes] = []
        self.complete = False
        self.headers_done = False
        self.framed = False  # a Content-Length or Transfer-Encoding: else the body ends at EOF
        self.close = False  # Connection: close

    def on_status(self, reason: bytes) -> None:
        self.reason += reason.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name in (b"content-length", b"transfer-encoding"):
            self.framed = True
        elif name == b"connection" and b"close" in value.lower():
            self.close = True

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_body(self, data: bytes) -> None:
        self.body.append(data)

    def on_message_complete(self) -> None:
        self.complete = True


class Connection:
    """`exchange` opens the connection when it has none (within `timeouts[0]` seconds, TLS
    handshake included) and waits at most `timeouts[1]` seconds for each read."""

    def __init__(
        self, host: str, port: int, tls: ssl.SSLContext | None, timeouts: tuple[float, float]
    ) -> None:
        self._address = (host, port)
        self._tls = tls
        self._timeouts = timeouts
        default_port = 443 if tls is not None else 80
        name = f"[{host}]" if ":" in host else host  # an IPv6 address
        self._host_header = name if port == default_port else f"{name}:{port}"
        self._sock: socket.socket | None = None

    @property
    def open(self) -> bool:
        return self._sock is not None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def closed_by_peer(self) -> bool:
        """An idle kept-alive connection that reads as ready has been closed (or broken) by the
        server (urllib3 checks the same before reusing one)."""
        return _ready(self._sock)

    def exchange(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, str, bytes]:
        """Send one request; (status, reason, body) of its answer. The connection is closed after
        an answer that says so, and on any error (the caller decides whether to send again)."""
        try:
            return self._exchange(method, target, headers, body)
        except BaseException:
            self.close()
            raise

    def _exchange(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, str, bytes]:
        sock = self._sock if self._sock is not None else self._connect()
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        sock.sendall("\r\n".join(lines).encode("latin-1") + b"\r\n\r\n" + (body or b""))
        answer = _Answer()
        parser = httptools.HttpResponseParser(answer)
        while not answer.complete:
            data = sock.recv(65536)
            if not data:
                if answer.headers_done and not answer.framed:  # a body that ends with the connection
                    answer.close = True
                    break
                raise ConnectionLost(f"{method} {target}: the server closed the connection mid-answer")
            try:
                parser.feed_data(data)
            except httptools.HttpParserError as err:
                raise ConnectionLost(f"{method} {target}: not an HTTP answer ({err})") from None
        # (llhttp's should_keep_alive() no longer knows once the message is complete)
        if answer.close or parser.get_http_version() != "1.1":
            self.close()
        return parser.get_status_code(), answer.reason, b"".join(answer.body)

    def _connect(self) -> socket.socket:
        sock = socket.create_connection(self._address, timeout=self._timeouts[0])
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client does
            if self._tls is not None:
                sock = self._tls.wrap_socket(sock, server_hostname=self._address[0])
            sock.settimeout(self._timeouts[1])
        except BaseException:
            sock.close()
            raise
        self._sock = sock
        return sock


def _ready(sock: socket.socket | None) -> bool:
    """An idle connection's socket reads as ready (or fails to be polled): closed or broken."""
    if sock is None:
        return False
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class ClientConnection:
    """`Connection`'s interface over http.client, as DirectJson sent before this module
    (DRA_FAKE_WITHOUT=httpconn, dra_fake.core.trials): the same requests and answers, only the
    transport and its parser differ."""

    def __init__(
        self, host: str, port: int, tls: ssl.SSLContext | None, timeouts: tuple[float, float]
    ) -> None:
        self._timeouts = timeouts
        self._conn = (
            http.client.HTTPSConnection(host, port, timeout=timeouts[0], context=tls)
            if tls is not None
            else http.client.HTTPConnection(host, port, timeout=timeouts[0])
        )

    @property
    def open(self) -> bool:
        return self._conn.sock is not None

    def close(self) -> None:
        self._conn.close()

    def closed_by_peer(self) -> bool:
        return _ready(self._conn.sock)

    def exchange(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, str, bytes]:
        conn = self._conn
        try:
            if conn.sock is None:
                conn.connect()  # within the connect timeout; answers within the read timeout
                cast(socket.socket, conn.sock).settimeout(self._timeouts[1])
            conn.request(method, target, body=body, headers=dict(headers))
            resp = conn.getresponse()
            data = resp.read()
        except http.client.HTTPException as err:
            conn.close()
            raise ConnectionLost(f"{method} {target}: {err!r}") from None
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        return resp.status, resp.reason, data
