"""KWOK's controller in a cluster for the fleet's nodes (make kind-kwok, KindBed.start_kwok): the
image make kind-images builds offline (hack/kind/kwok-image.sh) loaded into the kind nodes, then
the manifests of dra_fake.fleet.kwok applied (server-side apply) as `dra-fake fleet-stages
--deployment IMAGE | kubectl apply -f -` would, until KWOK's pod is Ready with these Stages.
docs/local-cluster.md#kwok-on-kind-or-any-cluster."""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

from dra_fake.fleet import kwok
from dra_fake.fleet.workload import WorkloadProfile
from e2e.kindcluster.cluster import KIND, run
from e2e.kindcluster.versions import REPO

log = logging.getLogger("kindcluster")

FIELD_MANAGER = "dra-fake-kwok"
SELECTOR = f"app.kubernetes.io/name={kwok.NAME}"
TIMEOUT = 120.0


def image() -> str:
    """dra-fake-kind/kwok:<the pinned KWOK version> (e2e/cluster/kwok/go.mod)."""
    text = (REPO / "e2e" / "cluster" / "kwok" / "go.mod").read_text()
    m = re.search(r"^require sigs\.k8s\.io/kwok (v\S+)$", text, re.M)
    if not m:
        raise RuntimeError("e2e/cluster/kwok/go.mod requires no sigs.k8s.io/kwok")
    return f"dra-fake-kind/kwok:{m.group(1)}"


def load_image(cluster: str) -> None:
    """Into every node of the kind cluster (kind skips nodes that have it)."""
    run(KIND, "load", "docker-image", "--name", cluster, image(), timeout=300)


def _resource(dyn: DynamicClient, obj: dict[str, Any]) -> Any:
    return dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])


def install(api: client.ApiClient, profile: WorkloadProfile, namespace: str = kwok.NAMESPACE) -> None:
    """Apply the manifests; return once KWOK's one pod runs these Stages and is Ready."""
    dyn = DynamicClient(api)  # type: ignore[no-untyped-call]
    objs = kwok.manifests(profile, image(), namespace)
    for obj in objs:
        _resource(dyn, obj).server_side_apply(
            body=obj,
            namespace=obj["metadata"].get("namespace"),
            field_manager=FIELD_MANAGER,
            force_conflicts=True,
            _request_timeout=30,
        )
    [deployment] = [o for o in objs if o["kind"] == "Deployment"]
    stages = deployment["spec"]["template"]["metadata"]["annotations"]

    def ready() -> bool:
        pods = _pods(api, namespace)
        return len(pods) == 1 and _ready(pods[0], stages)

    _wait("KWOK's pod Ready with the profile's Stages", ready, api, namespace)
    log.info("KWOK runs in %s (%s)", namespace, image())


def uninstall(api: client.ApiClient, namespace: str = kwok.NAMESPACE) -> None:
    """Delete what install applied; return once KWOK's pod is gone."""
    dyn = DynamicClient(api)  # type: ignore[no-untyped-call]
    for obj in reversed(kwok.manifests(WorkloadProfile(), image(), namespace)):
        try:
            _resource(dyn, obj).delete(
                name=obj["metadata"]["name"], namespace=obj["metadata"].get("namespace"), _request_timeout=30
            )
        except ApiException as err:
            if err.status != 404:
                raise
    _wait("KWOK's pod gone", lambda: not _pods(api, namespace), api, namespace)


def _ready(pod: dict[str, Any], annotations: dict[str, str]) -> bool:
    conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions") or []}
    return (
        (pod["metadata"].get("annotations") or {}).items() >= annotations.items()
        and not pod["metadata"].get("deletionTimestamp")
        and conditions.get("Ready") == "True"
    )


def _pods(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    found = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=SELECTOR, _request_timeout=30)
    return list(api.sanitize_for_serialization(found)["items"])  # type: ignore[no-untyped-call]


def _wait(what: str, done: Callable[[], bool], api: client.ApiClient, namespace: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not done():
        if time.monotonic() > deadline:
            state = [(p["metadata"]["name"], p.get("status")) for p in _pods(api, namespace)]
            raise RuntimeError(f"timed out after {TIMEOUT:.0f}s waiting for {what}: {state}")
        time.sleep(0.5)
