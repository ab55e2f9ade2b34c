"""ComputeDomain controller: CD created -> its workload ResourceClaimTemplate and its daemon
DaemonSet exist, over N CDs created at once (16 concurrent creators)."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.common import BenchError, ensure_namespace, latency_summary
from bench.prepare import cluster_api
from e2e.localcluster import LocalCluster

NAMESPACE = "bench-cd"
DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"  # where the controller puts the daemon DaemonSets


def _raw(resp: Any) -> dict[str, Any]:
    try:
        return dict(json.loads(resp.data))
    finally:
        resp.release_conn()


def run(cluster: LocalCluster, count: int = 200, timeout: float = 600) -> dict[str, Any]:
    if "cd-controller" not in cluster.state.processes:
        raise BenchError("the local cluster runs no ComputeDomain controller (cd-controller)")
    api = cluster_api(cluster)
    core, apps, custom = client.CoreV1Api(api), client.AppsV1Api(api), client.CustomObjectsApi(api)
    ensure_namespace(core, NAMESPACE)
    stamp = time.strftime("%H%M%S")
    created: dict[str, tuple[float, str]] = {}  # name -> (monotonic time the create returned, uid)

    def create(i: int) -> None:
        name = f"cd-{stamp}-{i:03d}"
        body = {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "ComputeDomain",
            "metadata": {"name": name},
            "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}},
        }
        obj: Any = custom.create_namespaced_custom_object(
            "resource.nvidia.com", "v1beta1", NAMESPACE, "computedomains", body
        )
        created[name] = (time.monotonic(), str(obj["metadata"]["uid"]))

    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(count)))
    create_wall = time.monotonic() - t0
    done: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(done) < count:
        if time.monotonic() > deadline:
            raise BenchError(
                f"after {timeout:.0f}s only {len(done)}/{count} ComputeDomains have both objects"
            )
        rcts = _raw(
            custom.list_namespaced_custom_object(
                "resource.k8s.io", "v1", NAMESPACE, "resourceclaimtemplates", _preload_content=False
            )
        )
        daemonsets = _raw(apps.list_namespaced_daemon_set(DRIVER_NAMESPACE, _preload_content=False))
        now = time.monotonic()
        rct_names = {o["metadata"]["name"] for o in rcts["items"]}
        ds_names = {o["metadata"]["name"] for o in daemonsets["items"]}
        for name, (t, uid) in created.items():
            if name not in done and f"{name}-ch" in rct_names and f"computedomain-daemon-{uid}" in ds_names:
                done[name] = now - t
        time.sleep(0.05)
    all_done = time.monotonic() - t0
    for name in created:
        try:
            custom.delete_namespaced_custom_object(
                "resource.nvidia.com", "v1beta1", NAMESPACE, "computedomains", name
            )
        except ApiException as err:
            if err.status != 404:
                raise
    return {
        "computedomains": count,
        "create_wall_s": round(create_wall, 3),
        "all_reconciled_s": round(all_done, 3),
        "created_to_template_and_daemonset": latency_summary(list(done.values())),
        "poll_interval_ms": 50,
    }
