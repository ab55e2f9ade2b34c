"""One way to build the Kubernetes client: --kubeconfig, else $KUBECONFIG, else the in-cluster
service account; every request gets a timeout, so a half-open connection cannot pin a worker."""

from __future__ import annotations

import json
import ssl
import threading
import urllib.parse
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn, cast

import orjson
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from dra_fake.core import yamlio
from dra_fake.core.httpconn import Connection
from dra_fake.core.kubeconfig import StartupError, kubeconfig_path

# (connect, read) seconds for every API call; watches pass their own.
REQUEST_TIMEOUT = (5.0, 30.0)


class TimeoutApiClient(client.ApiClient):
    """An ApiClient whose calls default to REQUEST_TIMEOUT (a call may still pass its own).
    `on_request(method)`, when set, hears of every request, whichever way it goes (fleet mode
    counts them)."""

    on_request: Callable[[str], None] | None = None

    def call_api(  # type: ignore[no-untyped-def]  # the client's signature is untyped
        self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None
    ):
        timeout = REQUEST_TIMEOUT if _request_timeout is None else _request_timeout
        if self.on_request is not None:
            self.on_request(method)
        return super().call_api(method, url, header_params, body, post_params, timeout)


def kube_configuration(kubeconfig: str = "") -> client.Configuration:
    """--kubeconfig, else $KUBECONFIG, else the in-cluster service account."""
    path = kubeconfig_path(kubeconfig)
    configuration = client.Configuration()
    try:
        if path:
            config.load_kube_config(config_file=path, client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except Exception as err:  # ConfigException, OSError, YAMLError, a malformed field...
        where = f"kubeconfig {path}" if path else "in-cluster configuration (set --kubeconfig or KUBECONFIG)"
        raise StartupError(f"{where}: {err}") from err
    if path and fixed_credentials(path):
        # The loader's hook re-applies the whole kubeconfig before every request (proxies read
        # from the environment again included): ~0.1 ms of CPU per request, for nothing when the
        # credentials cannot expire. (In-cluster, the hook re-reads the rotating token: kept.)
        configuration.refresh_api_key_hook = None
    return configuration


def fixed_credentials(path: str) -> bool:
    """Whether the current user of the kubeconfig at `path` (one file) authenticates with a fixed
    token or certificate: no `exec` plugin or `auth-provider`, whose tokens expire."""
    try:
        doc = yamlio.safe_load(Path(path).read_text(encoding="utf-8"))
        context = next(c["context"] for c in doc["contexts"] if c["name"] == doc["current-context"])
        user = next(u.get("user") or {} for u in doc["users"] if u["name"] == context["user"])
    except Exception:  # several files, an unusual layout: keep the hook
        return False
    return isinstance(user, dict) and not {"exec", "auth-provider"} & set(user)


def load_kube_client(kubeconfig: str = "", connections: int | None = None) -> client.ApiClient:
    """The API client of the plugins, the controller and the IMEX daemon (fleet mode counts its
    requests: TimeoutApiClient subclassed there). `connections`: how many kept-alive connections
    its pool holds (the client's default, 10, for None); a caller with more threads making
    requests at once sets it, or each request past the tenth opens a TLS connection and drops
    it after."""
    configuration = kube_configuration(kubeconfig)
    if connections is not None:
        configuration.connection_pool_maxsize = connections
    return TimeoutApiClient(configuration)


def read_node_uid(api: client.ApiClient, node: str) -> str:
    return str(read_node(api, node)["metadata"]["uid"])


def read_node(api: client.ApiClient, node: str) -> dict[str, Any]:
    """GET /api/v1/nodes/<node> as plain JSON. `client.CoreV1Api` would import the client's
    ~250 typed models on first use: 1.2-2 s of plugin start-up (bench/results/latest.md)."""
    return get_json(api, "/api/v1/nodes/{name}", name=node)


def get_json(
    api: client.ApiClient, path: str, query: Mapping[str, Any] | None = None, **path_params: str
) -> dict[str, Any]:
    """GET `path` (with `{name}`-style parameters and `query`, see `request`) as plain JSON."""
    return _json_call(api, "GET", path, path_params, query)


def merge_patch(api: client.ApiClient, path: str, patch: Mapping[str, Any], **path_params: str) -> None:
    """PATCH `path` with a JSON merge patch (RFC 7386: null removes a key)."""
    send_json(api, "PATCH", path, patch, "application/merge-patch+json", None, **path_params)


def send_json(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Any,
    content_type: str = "application/json",
    query: Mapping[str, Any] | None = None,
    **path_params: str,
) -> dict[str, Any]:
    """POST/PUT/PATCH/DELETE `body` (JSON-serialisable as is, or bytes sent as they are) to
    `path`; the answer (the stored object, or a Status) as JSON."""
    return _json_call(api, method, path, path_params, query, body=body, content_type=content_type)


def _json_call(
    api: client.ApiClient,
    method: str,
    path: str,
    path_params: Mapping[str, str],
    query: Mapping[str, Any] | None = None,
    body: Any = None,
    content_type: str | None = None,
) -> dict[str, Any]:
    """A request whose answer is read whole: on DirectJson's connections when the client's
    configuration allows, else through the client (`request`)."""
    direct = _direct(api)
    if direct is not None:
        return direct.json(api, method, _url(path, path_params, query), body, content_type)
    resp = request(api, method, path, path_params, query, body=body, content_type=content_type)
    try:
        return cast(dict[str, Any], json.loads(resp.read()))
    finally:
        release(resp)


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    path_params: Mapping[str, str] | None = None,
    query: Mapping[str, Any] | None = None,
    body: Any = None,
    content_type: str | None = None,
    timeout: Any = None,
    accept: str = "application/json",
) -> Any:
    """One API request through the client's connection pool, auth and timeouts, but none of its
    typed machinery: `client.CoreV1Api` imports ~250 models on first use (1-2 s of CPU at plugin
    start), and typed (de)serialisation costs more than the HTTP on hot paths. Query keys in
    snake case (`field_selector`) become the API's (`fieldSelector`). Returns the unread urllib3
    response (`.read()`, `.stream()`, `.release_conn()`); a non-2xx answer raises ApiException as
    the typed client does ("(403)\nReason: ...")."""
    headers = {"Accept": accept}
    if content_type:
        headers["Content-Type"] = content_type
    # The body goes to the REST layer as is (it json.dumps it once): param_serialize would walk
    # it in Python first (sanitize_for_serialization), the larger part of a slice write's cost.
    method, url, headers, _, _ = api.param_serialize(
        method,
        path,
        path_params=dict(path_params or {}),
        query_params=[(_camel(k), _query_value(v)) for k, v in (query or {}).items() if v is not None],
        header_params=headers,
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=headers, body=body, _request_timeout=timeout).response
    if not 200 <= resp.status < 300:
        data = resp.read() or b""
        release(resp)
        _raise_status(resp.status, resp.reason or "", data)
    return resp


def _raise_status(status: int, reason: str, data: bytes) -> NoReturn:
    """A non-2xx answer, raised as the typed client does ("(403)\nReason: ...")."""
    raise ApiException(status=status, reason=reason, body=data.decode(errors="replace"))


def _url(path: str, path_params: Mapping[str, str], query: Mapping[str, Any] | None = None) -> str:
    """What param_serialize makes of a path, its parameters and query (without the host)."""
    url = path.format(**{k: urllib.parse.quote(str(v), safe="") for k, v in path_params.items()})
    pairs = [(_camel(k), _query_value(v)) for k, v in (query or {}).items() if v is not None]
    return f"{url}?{urllib.parse.urlencode(pairs)}" if pairs else url


class DirectJson:
    """Requests whose answer is read whole (get_json, send_json) on kept-alive connections, one
    per thread (dra_fake.core.httpconn): the ApiClient's host, TLS files and credentials (its
    refresh hook included), without urllib3's pool and the client's call layers, which cost most
    of the CPU of a claim GET (docs/benchmarks/history.md). Only for configurations it
    reproduces exactly (`supports`); anything else (a proxy, a TLS server name, inline CA data)
    goes through the client."""

    def __init__(self, configuration: client.Configuration) -> None:
        url = urllib.parse.urlsplit(configuration.host)
        https = url.scheme == "https"
        self._host = url.hostname or ""
        self._port = url.port or (443 if https else 80)
        self._prefix = url.path.rstrip("/")
        self._configuration = configuration
        self._tls: ssl.SSLContext | None = None
        if https:
            self._tls = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
            if not configuration.verify_ssl:
                self._tls.check_hostname = False
                self._tls.verify_mode = ssl.CERT_NONE
            if configuration.cert_file:
                self._tls.load_cert_chain(configuration.cert_file, configuration.key_file)
        self._local = threading.local()

    @staticmethod
    def supports(configuration: Any) -> bool:
        if not isinstance(configuration, client.Configuration):
            return False
        scheme = urllib.parse.urlsplit(configuration.host).scheme
        return (
            scheme in ("http", "https")
            and not configuration.proxy
            and not configuration.tls_server_name
            and configuration.assert_hostname is None
            and configuration.ca_cert_data is None
            and configuration.socket_options is None
        )

    def json(
        self,
        api: client.ApiClient,
        method: str,
        url: str,
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any]:
        headers = {**api.default_headers, "Accept": "application/json"}
        auth: dict[str, Any]
        for auth in self._configuration.auth_settings().values():  # type: ignore[assignment]  # runs the refresh hook
            headers[auth["key"]] = auth["value"]
        payload = None
        if body is not None:
            if content_type == "application/json-patch+json" and not isinstance(body, list):
                content_type = "application/strategic-merge-patch+json"  # as the client does
            headers["Content-Type"] = content_type or "application/json"
            payload = body if isinstance(body, bytes) else orjson.dumps(body)
        on_request = getattr(api, "on_request", None)  # TimeoutApiClient's, when set
        if on_request is not None:
            on_request(method)
        status, reason, data = self._send(method, self._prefix + url, payload, headers)
        if not 200 <= status < 300:
            _raise_status(status, reason, data)
        return cast(dict[str, Any], orjson.loads(data))  # ~2x json's speed on a claim

    def _send(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str]
    ) -> tuple[int, str, bytes]:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = Connection(self._host, self._port, self._tls, REQUEST_TIMEOUT)
            self._local.conn = conn
        if conn.closed_by_peer():
            conn.close()
        while True:
            reused = conn.open
            try:
                return conn.exchange(method, url, headers, body)
            except TimeoutError:
                raise
            except OSError:
                # The server closed a kept-alive connection as we sent: an idempotent request is
                # sent once more on a new one (as urllib3 retries); anything else is the caller's.
                if reused and method in IDEMPOTENT:
                    continue
                raise


IDEMPOTENT = frozenset({"GET", "PUT", "DELETE"})


_direct_lock = threading.Lock()
_direct_by_client: weakref.WeakKeyDictionary[client.ApiClient, DirectJson | None] = (
    weakref.WeakKeyDictionary()
)


def _direct(api: client.ApiClient) -> DirectJson | None:
    """The client's DirectJson, or None when its configuration needs the client's own path."""
    try:
        return _direct_by_client[api]
    except KeyError:
        pass
    with _direct_lock:
        if api not in _direct_by_client:
            configuration = getattr(api, "configuration", None)
            _direct_by_client[api] = (
                DirectJson(cast(client.Configuration, configuration))
                if DirectJson.supports(configuration)
                else None
            )
        return _direct_by_client[api]


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(part.title() for part in rest)


def _query_value(value: Any) -> Any:
    return ("true" if value else "false") if isinstance(value, bool) else value


def release(resp: Any) -> None:
    """Give a `_preload_content=False` response's connection back to the pool, its answer read
    to the end first: a connection returned with unread bytes hands them to the next request on
    it, which then fails to parse its status line (BadStatusLine; fleet mode's untaint patches,
    whose answers are whole Node objects, hit it)."""
    raw = getattr(resp, "response", resp)
    drain = getattr(raw, "drain_conn", None)
    if drain is not None:
        drain()
    release_conn = getattr(raw, "release_conn", None)
    if release_conn is not None:
        release_conn()
