"""One kept-alive HTTP/1.1 connection to the API server over http.client, for requests whose
answer is read whole (dra_fake.core.kube.DirectJson keeps one per thread)."""

from __future__ import annotations

import http.client
import select
import socket
import ssl
from collections.abc import Mapping
from typing import cast


class ConnectionLost(ConnectionError):
    """The server closed the connection, or answered what is not HTTP, before a whole answer."""


class Connection:
    """`exchange` opens the connection when it has none (within `timeouts[0]` seconds, TLS
    handshake included) and waits at most `timeouts[1]` seconds for each read."""

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
        """An idle kept-alive connection that reads as ready has been closed (or broken) by the
        server (urllib3 checks the same before reusing one)."""
        return _ready(self._conn.sock)

    def exchange(
        self, method: str, target: str, headers: Mapping[str, str], body: bytes | None
    ) -> tuple[int, str, bytes]:
        """Send one request; (status, reason, body) of its answer. The connection is closed after
        an answer that says so, and on any error (the caller decides whether to send again)."""
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
            cut = isinstance(err, http.client.IncompleteRead | http.client.RemoteDisconnected)
            what = "the server closed the connection mid-answer" if cut else "not an HTTP answer"
            raise ConnectionLost(f"{method} {target}: {what} ({err!r})") from None
        except BaseException:
            conn.close()
            raise
        if resp.will_close:
            conn.close()
        return resp.status, resp.reason, data


def _ready(sock: socket.socket | None) -> bool:
    """An idle connection's socket reads as ready (or fails to be polled): closed or broken."""
    if sock is None:
        return False
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True
