"""What the driver needs to know about the API server: versions served, and generic access to
resource.k8s.io objects in whichever version it offers (v1, else v1beta2, else v1beta1)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any, Literal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.core.claims import ClaimNotFound, ClaimUnreadable
from dra_fake.core.kube import get_json

log = logging.getLogger(__name__)

ResourceApiVersion = Literal["v1", "v1beta2", "v1beta1"]
RESOURCE_GROUP = "resource.k8s.io"
PREFERENCE: tuple[ResourceApiVersion, ...] = ("v1", "v1beta2", "v1beta1")


@dataclass(frozen=True)
class ServerInfo:
    version: tuple[int, int]  # (major, minor) of the API server
    resource_versions: tuple[ResourceApiVersion, ...]  # served resource.k8s.io versions, preferred first

    @property
    def resource_version(self) -> ResourceApiVersion:
        if not self.resource_versions:
            raise RuntimeError(
                "the API server serves no resource.k8s.io version this driver knows "
                "(v1, v1beta2, v1beta1): is DynamicResourceAllocation enabled?"
            )
        return self.resource_versions[0]


def _minor(raw: str) -> int:
    digits = "".join(ch for ch in raw if ch.isdigit())
    return int(digits or 0)


def discover_dra(api: client.ApiClient) -> ServerInfo:
    """discover(), failing (to be retried) while the server serves no resource.k8s.io version
    this driver knows: a starting API server answers /version before it lists every group."""
    info = discover(api)
    info.resource_version  # noqa: B018 (raises RuntimeError when none is served)
    return info


def discover(api: client.ApiClient) -> ServerInfo:
    info = client.VersionApi(api).get_code()
    served: set[str] = set()
    for group in client.ApisApi(api).get_api_versions().groups:
        if group.name == RESOURCE_GROUP:
            served = {v.version for v in group.versions}
    versions = tuple(v for v in PREFERENCE if v in served)
    return ServerInfo(version=(int(_minor(info.major)), _minor(info.minor)), resource_versions=versions)


def claim_spec_as(version: ResourceApiVersion, spec: dict[str, Any]) -> dict[str, Any]:
    """A ResourceClaim spec written in the v1 shape, in `version`'s shape. v1beta2 has v1's shape;
    v1beta1 has no `exactly`: its fields sit on the request itself (subrequests of
    `firstAvailable` are flat in every version)."""
    if version != "v1beta1":
        return spec
    devices = dict(spec.get("devices") or {})
    requests = []
    for request in devices.get("requests") or []:
        flat = {k: v for k, v in request.items() if k != "exactly"}
        flat.update(request.get("exactly") or {})
        requests.append(flat)
    if requests:
        devices["requests"] = requests
    return {**spec, "devices": devices}


def as_dict(obj: object) -> dict[str, Any]:
    """The kubernetes client types custom-object responses as `object`; they are JSON dicts."""
    if not isinstance(obj, dict):
        raise TypeError(f"expected a JSON object from the API server, got {type(obj).__name__}")
    return obj


class ApiNotReached(Exception):
    """The API server has not answered discovery yet (a plugin starting during an API outage)."""


# How long a call made before discovery waits for it: the plugin serves the kubelet before it has
# reached the API server (docs/benchmarks/history.md#start-up), so a prepare sent right after registration
# would otherwise fail and wait out the kubelet's retry backoff; discovery normally follows the
# sockets within a second. In an API outage calls fail after this wait.
DISCOVERY_WAIT_SECONDS = 3.0


class ResourceApi:
    """Generic CRUD on resource.k8s.io objects in the server's preferred version. Created before
    the server is reached (`info=None`): calls then wait up to `discovery_wait` seconds for
    `discovered`, and fail with ApiNotReached after that."""

    def __init__(
        self,
        api: client.ApiClient,
        info: ServerInfo | None = None,
        discovery_wait: float = DISCOVERY_WAIT_SECONDS,
    ) -> None:
        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self._info = info
        self._reached = threading.Event()
        if info is not None:
            self._reached.set()
        self._discovery_wait = discovery_wait
        self._lock = threading.Lock()

    @property
    def info(self) -> ServerInfo:
        info = self._info
        if info is None and self._reached.wait(self._discovery_wait):
            info = self._info
        if info is None:
            raise ApiNotReached("the API server has not been reached yet (the plugin keeps trying)")
        return info

    def discovered(self, info: ServerInfo) -> None:
        self._info = info
        self._reached.set()

    @property
    def version(self) -> ResourceApiVersion:
        return self.info.resource_version

    def rediscover(self) -> None:
        with self._lock:
            self.discovered(discover(self.api))

    def get_claim(self, namespace: str, name: str) -> dict[str, Any]:
        """GET a ResourceClaim, falling back v1 -> v1beta2 -> v1beta1 among the served versions.
        A 404 for the whole group version (not served any more) triggers one rediscovery.
        ClaimNotFound, ClaimUnreadable (another error status), or the client's connection error."""
        for attempt in range(2):
            try:
                return get_json(
                    self.api,
                    f"/apis/{RESOURCE_GROUP}/{self.version}/namespaces/{{namespace}}/resourceclaims/{{name}}",
                    namespace=namespace,
                    name=name,
                )
            except ApiException as err:
                if err.status != 404:
                    raise ClaimUnreadable(
                        f"get ResourceClaim {namespace}/{name}: {err.status} {err.reason}"
                    ) from err
                if _is_object_not_found(err) or attempt == 1:
                    raise ClaimNotFound(f"ResourceClaim {namespace}/{name} not found") from err
                self.rediscover()
        raise AssertionError("unreachable")


def _is_object_not_found(err: ApiException) -> bool:
    """A 404 naming an object (vs. the server not knowing the resource type at all)."""
    import json

    try:
        body = json.loads(err.body or "{}")
    except ValueError:
        return False
    return bool(body.get("reason") == "NotFound" and body.get("details", {}).get("name"))
