"""dra_fake.core.kube.DirectJson: get_json/send_json on kept-alive connections
(dra_fake.core.httpconn), with the ApiClient's credentials, against a small local HTTP server."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar
from unittest import mock

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.core import httpconn, kube


class Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    seen: ClassVar[list[dict[str, Any]]] = []
    close_after: ClassVar[set[int]] = set()  # request numbers after which the server closes the connection

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        number = len(self.seen)
        self.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "headers": self.headers,  # names case-insensitive
                "body": body,
                "client_port": self.client_address[1],
            }
        )
        status = 404 if "missing" in self.path else 200
        answer = json.dumps(
            {"kind": "Status", "path": self.path} if status == 404 else {"ok": number}
        ).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        if "chunked" in self.path:  # as the API server sends larger answers, in two chunks
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            half = len(answer) // 2
            for part in (answer[:half], answer[half:], b""):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                self.wfile.flush()
        elif "unframed" in self.path:  # no length: the body ends with the connection
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(answer)
            self.close_connection = True
        elif "cut" in self.path:  # the connection breaks mid-answer
            self.send_header("Content-Length", str(len(answer) + 10))
            self.end_headers()
            self.wfile.write(answer)
            self.close_connection = True
        else:
            if "goodbye" in self.path:
                self.send_header("Connection", "close")
                self.close_connection = True
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)
        if number in self.close_after:
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[ThreadingHTTPServer]:
    Recorder.seen, Recorder.close_after = [], set()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def api_for(srv: ThreadingHTTPServer, prefix: str = "") -> kube.TimeoutApiClient:
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{srv.server_address[1]}{prefix}"
    configuration.api_key = {"BearerToken": "Bearer secret-token"}
    return kube.TimeoutApiClient(configuration)


def test_requests_carry_the_clients_identity_and_reuse_one_connection(server: ThreadingHTTPServer) -> None:
    api = api_for(server, prefix="/base")
    methods: list[str] = []
    api.on_request = methods.append
    got = kube.get_json(
        api,
        "/api/v1/namespaces/{ns}/pods/{name}",
        {"label_selector": "a=b c", "watch": False},
        ns="x y",
        name="p/1",
    )
    stored = kube.send_json(
        api, "PATCH", "/api/v1/nodes/{name}", [{"op": "add"}], "application/json-patch+json", name="n"
    )
    assert got == {"ok": 0} and stored == {"ok": 1}
    first, second = Recorder.seen
    assert first["path"] == "/base/api/v1/namespaces/x%20y/pods/p%2F1?labelSelector=a%3Db+c&watch=false"
    assert first["headers"]["Authorization"] == "Bearer secret-token"
    assert first["headers"]["Accept"] == "application/json"
    assert first["headers"]["User-Agent"] == api.default_headers["User-Agent"]
    assert second["method"] == "PATCH" and json.loads(second["body"]) == [{"op": "add"}]
    assert second["headers"]["Content-Type"] == "application/json-patch+json"
    assert first["client_port"] == second["client_port"]  # one keep-alive connection
    assert methods == ["GET", "PATCH"]
    kube.release(kube.request(api, "DELETE", "/api/v1/nodes/{name}", {"name": "n"}))  # the client's path
    assert methods == ["GET", "PATCH", "DELETE"]  # on_request hears of both


def test_an_error_status_raises_as_the_typed_client_does(server: ThreadingHTTPServer) -> None:
    api = api_for(server)
    with pytest.raises(ApiException) as err:
        kube.get_json(api, "/api/v1/nodes/{name}", name="missing")
    assert err.value.status == 404 and err.value.reason == "Not Found"
    assert '"kind": "Status"' in err.value.body
    assert kube.get_json(api, "/api/v1/nodes/{name}", name="there") == {"ok": 1}  # connection still usable


def test_a_connection_the_server_closed_is_replaced(server: ThreadingHTTPServer) -> None:
    Recorder.close_after = {0}
    api = api_for(server)
    kube.get_json(api, "/api/v1/nodes/{name}", name="a")
    kube.get_json(api, "/api/v1/nodes/{name}", name="b")
    kube.send_json(api, "POST", "/api/v1/nodes", {"metadata": {"name": "c"}})
    ports = [r["client_port"] for r in Recorder.seen]
    assert len(ports) == 3 and ports[0] != ports[1] == ports[2]


def test_configurations_it_cannot_reproduce_use_the_client() -> None:
    configuration = client.Configuration()
    configuration.host = "https://10.0.0.1:6443"
    assert kube.DirectJson.supports(configuration)
    for field, value in (
        ("proxy", "http://proxy:3128"),
        ("tls_server_name", "kubernetes"),
        ("assert_hostname", False),
    ):
        other = client.Configuration()
        other.host = configuration.host
        setattr(other, field, value)
        assert not kube.DirectJson.supports(other), field
    assert not kube.DirectJson.supports(mock.MagicMock())


def test_a_connection_closed_as_a_request_goes_out_is_retried_if_idempotent(
    server: ThreadingHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close is not seen before sending (the race the check before reuse cannot rule out)."""
    monkeypatch.setattr(httpconn.Connection, "closed_by_peer", lambda conn: False)
    Recorder.close_after = {0, 1}
    api = api_for(server)
    kube.get_json(api, "/api/v1/nodes/{name}", name="a")
    assert kube.get_json(api, "/api/v1/nodes/{name}", name="b") == {"ok": 1}  # sent again
    with pytest.raises(OSError):
        kube.send_json(api, "POST", "/api/v1/nodes", {"metadata": {"name": "c"}})  # not sent twice
    assert [r["method"] for r in Recorder.seen] == ["GET", "GET"]


def test_chunked_unframed_and_closing_answers(server: ThreadingHTTPServer) -> None:
    """Whether the connection stays open is decided by the answer, before the server's close
    could be seen (the check before reuse would otherwise hide a kept connection)."""
    conn = httpconn.Connection("127.0.0.1", server.server_address[1], None, (1.0, 1.0))
    for path, body, kept in (
        ("/chunked", {"ok": 0}, True),
        ("/chunked", {"ok": 1}, True),  # the connection is still good after one
        ("/goodbye", {"ok": 2}, False),  # Connection: close
        ("/unframed", {"ok": 3}, False),  # a body that ends with the connection
        ("/after", {"ok": 4}, True),
    ):
        status, reason, data = conn.exchange("GET", path, {}, None)
        assert (status, reason, json.loads(data), conn.open) == (200, "OK", body, kept), path
    ports = [r["client_port"] for r in Recorder.seen]
    assert ports[0] == ports[1] == ports[2] != ports[3] != ports[4]


def test_a_connection_broken_mid_answer_fails_the_request_and_is_replaced(
    server: ThreadingHTTPServer,
) -> None:
    api = api_for(server)
    with pytest.raises(httpconn.ConnectionLost, match="mid-answer"):
        kube.send_json(api, "POST", "/cut", {})  # not idempotent: not sent again
    assert kube.get_json(api, "/after") == {"ok": 1}
    assert len(Recorder.seen) == 2


def test_what_is_not_http_fails_the_request() -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def answer_garbage() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        conn.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    conn = httpconn.Connection("127.0.0.1", listener.getsockname()[1], None, (1.0, 1.0))
    with pytest.raises(httpconn.ConnectionLost, match="not an HTTP answer"):
        conn.exchange("POST", "/x", {}, b"{}")
    assert not conn.open
    listener.close()
