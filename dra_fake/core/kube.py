"""One way to build the Kubernetes client: --kubeconfig, else $KUBECONFIG, else the in-cluster
service account; every request gets a timeout, so a half-open connection cannot pin a worker."""

from __future__ import annotations

import json
import os
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

# (connect, read) seconds for every API call; watches pass their own.
REQUEST_TIMEOUT = (5.0, 30.0)


class StartupError(Exception):
    """A bad flag, config or environment: reported as one line before any socket exists."""


class TimeoutApiClient(client.ApiClient):
    """An ApiClient whose calls default to REQUEST_TIMEOUT (a call may still pass its own)."""

    def call_api(  # type: ignore[no-untyped-def]  # the client's signature is untyped
        self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None
    ):
        timeout = REQUEST_TIMEOUT if _request_timeout is None else _request_timeout
        return super().call_api(method, url, header_params, body, post_params, timeout)


def kube_configuration(kubeconfig: str = "") -> client.Configuration:
    """--kubeconfig, else $KUBECONFIG, else the in-cluster service account."""
    path = kubeconfig or os.environ.get("KUBECONFIG", "")
    configuration = client.Configuration()
    try:
        if path:
            config.load_kube_config(config_file=path, client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError) as err:
        where = f"kubeconfig {path}" if path else "in-cluster configuration (set --kubeconfig or KUBECONFIG)"
        raise StartupError(f"{where}: {err}") from err
    return configuration


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


def get_json(api: client.ApiClient, path: str, **path_params: str) -> dict[str, Any]:
    """GET `path` (with `{name}`-style parameters) as plain JSON, through the client's connection
    pool, auth and timeouts but none of its per-call model machinery (a claim GET on the prepare
    path). A non-2xx answer raises ApiException as the typed client does: "(403)\nReason: ..."."""
    method, url, headers, body, _ = api.param_serialize(
        "GET",
        path,
        path_params=path_params,
        header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )
    resp = api.call_api(method, url, header_params=headers, body=body)
    data = resp.read() or b""  # type: ignore[no-untyped-call]
    if not 200 <= resp.status < 300:
        raise ApiException(status=resp.status, reason=resp.reason or "", body=data.decode(errors="replace"))
    return cast(dict[str, Any], json.loads(cast(bytes, data)))
