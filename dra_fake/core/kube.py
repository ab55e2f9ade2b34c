"""One way to build the Kubernetes client: --kubeconfig, else $KUBECONFIG, else the in-cluster
service account; every request gets a timeout, so a half-open connection cannot pin a worker."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from dra_fake.core import yamlio
from dra_fake.core.kubeconfig import StartupError, kubeconfig_path

# (connect, read) seconds for every API call; watches pass their own.
REQUEST_TIMEOUT = (5.0, 30.0)


class TimeoutApiClient(client.ApiClient):
    """An ApiClient whose calls default to REQUEST_TIMEOUT (a call may still pass its own)."""

    def call_api(  # type: ignore[no-untyped-def]  # the client's signature is untyped
        self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None
    ):
        timeout = REQUEST_TIMEOUT if _request_timeout is None else _request_timeout
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


def load_kube_client(kubeconfig: str = "") -> client.ApiClient:
    """The API client of the plugins, the controller and the IMEX daemon (fleet mode counts its
    requests: TimeoutApiClient subclassed there)."""
    return TimeoutApiClient(kube_configuration(kubeconfig))


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
    resp = request(api, "GET", path, path_params, query)
    try:
        return cast(dict[str, Any], json.loads(resp.read()))
    finally:
        release(resp)


def merge_patch(api: client.ApiClient, path: str, patch: Mapping[str, Any], **path_params: str) -> None:
    """PATCH `path` with a JSON merge patch (RFC 7386: null removes a key)."""
    send_json(api, "PATCH", path, patch, "application/merge-patch+json", **path_params)


def send_json(
    api: client.ApiClient,
    method: str,
    path: str,
    body: Any,
    content_type: str = "application/json",
    **path_params: str,
) -> dict[str, Any]:
    """POST/PUT/PATCH `body` (JSON-serialisable as is) to `path`; the stored object as JSON."""
    resp = request(api, method, path, path_params, body=body, content_type=content_type)
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
) -> Any:
    """One API request through the client's connection pool, auth and timeouts, but none of its
    typed machinery: `client.CoreV1Api` imports ~250 models on first use (1-2 s of CPU at plugin
    start), and typed (de)serialisation costs more than the HTTP on hot paths. Query keys in
    snake case (`field_selector`) become the API's (`fieldSelector`). Returns the unread urllib3
    response (`.read()`, `.stream()`, `.release_conn()`); a non-2xx answer raises ApiException as
    the typed client does ("(403)\nReason: ...")."""
    headers = {"Accept": "application/json"}
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
        raise ApiException(status=resp.status, reason=resp.reason or "", body=data.decode(errors="replace"))
    return resp


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
