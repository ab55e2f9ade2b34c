"""ComputeDomain controller: CD created -> its workload ResourceClaimTemplate and its daemon
DaemonSet exist, over N CDs created at once (16 concurrent creators); and how soon a domain's
status follows its daemon's readiness."""

from __future__ import annotations

import contextlib
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.common import BenchError, any_left, cluster_api, ensure_namespace, latency_summary, poll, spread
from computedomain.api import (
    CD_LABEL,
    CLIQUE_LABEL,
    CLIQUE_PLURAL,
    GROUP,
    PLURAL,
    STATUS_NOT_READY,
    STATUS_READY,
    VERSION,
    clique_object_name,
)
from dra_fake.core.informer import lister, run_informer
from dra_fake.core.kube import get_json, merge_patch, release, request, send_json
from dra_fake.fleet.core import NodeTemplate
from dra_fake.fleet.nodes import create_untainted_node
from e2e.localcluster import LocalCluster

NAMESPACE = "bench-cd"
DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"  # where the controller puts the daemon DaemonSets


class FirstSeen:
    """When each object of a list + watch was first seen (monotonic), by name; `listed` once the
    initial list is in (the watch goes on from it)."""

    def __init__(self) -> None:
        self.at: dict[str, float] = {}
        self.listed = threading.Event()

    def on_list(self, items: list[dict[str, Any]]) -> None:
        now = time.monotonic()
        for obj in items:
            self.at.setdefault(obj["metadata"]["name"], now)
        self.listed.set()

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == "ADDED":
            self.at.setdefault(obj["metadata"]["name"], time.monotonic())


def run(cluster: LocalCluster, count: int = 200, timeout: float = 600) -> dict[str, Any]:
    if "cd-controller" not in cluster.state.processes:
        raise BenchError("the local cluster runs no ComputeDomain controller (cd-controller)")
    api = cluster_api(cluster)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
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

    # The objects are watched (their metadata only), not listed over and over: a LIST of every
    # DaemonSet each 50 ms loaded the API server that the controller's writes wait for.
    templates, daemonsets, stop = FirstSeen(), FirstSeen(), threading.Event()
    for seen, what, path in (
        (templates, "templates", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates"),
        (daemonsets, "daemonsets", f"/apis/apps/v1/namespaces/{DRIVER_NAMESPACE}/daemonsets"),
    ):
        threading.Thread(
            target=run_informer,
            args=(stop, what, lister(api, path, metadata_only=True), {}, seen.on_list, seen.on_event),
            name=f"bench-{what}",
            daemon=True,
        ).start()
    try:
        for seen in (templates, daemonsets):
            poll("the bench's watches", seen.listed.is_set, 60)
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
            for name, (t, uid) in created.items():
                rct, ds = templates.at.get(f"{name}-ch"), daemonsets.at.get(f"computedomain-daemon-{uid}")
                if name not in done and rct is not None and ds is not None:
                    done[name] = max(rct, ds, t) - t  # seen before its create returned: 0
            time.sleep(0.05)
    finally:
        stop.set()
    all_done = time.monotonic() - t0
    for name in created:
        try:
            custom.delete_namespaced_custom_object(
                "resource.nvidia.com", "v1beta1", NAMESPACE, "computedomains", name
            )
        except ApiException as err:
            if err.status != 404:
                raise
    # The next measurement starts once the controller has cleaned up after these (finalizers).
    t1 = time.monotonic()
    poll(
        f"{count} ComputeDomains and their DaemonSets deleted",
        lambda: (
            not any_left(api, f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}")
            and not any_left(api, f"/apis/apps/v1/namespaces/{DRIVER_NAMESPACE}/daemonsets")
        ),
        timeout,
        0.5,
    )
    return {
        "computedomains": count,
        "create_wall_s": round(create_wall, 3),
        "all_reconciled_s": round(all_done, 3),
        "all_deleted_s": round(time.monotonic() - t1, 3),
        "created_to_template_and_daemonset": latency_summary(list(done.values())),
        "observed_by": "watch",
    }


WARMUP_DOMAINS = 20


def bursts(cluster: LocalCluster, sizes: list[int], readiness_domains: int, repeat: int) -> dict[str, Any]:
    """The create bursts, each size `repeat` times (median [min-max] of each figure), then the
    readiness timings (each of the `readiness_domains` transitions is one measurement)."""
    out = []
    # Not recorded: the first burst after the cluster's start runs about twice as slow.
    run(cluster, min([WARMUP_DOMAINS, *sizes]))
    for n in sizes:
        reps = [run(cluster, n) for _ in range(repeat)]
        figures = spread(
            [
                {
                    "create_wall_s": r["create_wall_s"],
                    "all_reconciled_s": r["all_reconciled_s"],
                    "all_deleted_s": r["all_deleted_s"],
                    **{
                        k: r["created_to_template_and_daemonset"][k]
                        for k in ("p50_ms", "p95_ms", "p99_ms", "mean_ms")
                    },
                }
                for r in reps
            ]
        )
        out.append(
            {
                "computedomains": n,
                "observed_by": reps[0]["observed_by"],
                **figures,
                "repetitions": reps,
            }
        )
    return {"bursts": out, "repeat": repeat, "readiness": readiness(cluster, readiness_domains)}


CLIQUE_ID = "0b0f0c2d-6c67-4bba-9b6b-2a2f1e7ef7a1.1"
STATUS_POLL_SECONDS = 0.01


def _cd_status(api: Any, name: str) -> str:
    cd = get_json(api, f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}/{{name}}", name=name)
    return str((cd.get("status") or {}).get("status", ""))


def _until_status(api: Any, name: str, want: str, timeout: float = 30) -> float:
    """Seconds until the ComputeDomain's status.status is `want` (polled every 10 ms)."""
    t0 = time.monotonic()
    poll(f"ComputeDomain {name} {want}", lambda: _cd_status(api, name) == want, timeout, STATUS_POLL_SECONDS)
    return time.monotonic() - t0


def _daemon_pod(api: Any, uid: str) -> dict[str, Any] | None:
    pods = get_json(
        api, f"/api/v1/namespaces/{DRIVER_NAMESPACE}/pods", {"label_selector": f"{CD_LABEL}={uid}"}
    )
    return pods["items"][0] if pods["items"] else None


def readiness(cluster: LocalCluster, domains: int = 20) -> dict[str, Any]:
    """Status follows daemon readiness. For each of `domains` ComputeDomains (numNodes 1, one at a
    time) on a Node of its own without a kubelet, labelled for the domain (what the compute-domain
    plugin does): the controller's DaemonSet makes the daemon pod; the benchmark plays the
    scheduler (binds it: no compute-domain plugin publishes the daemon device here), the kubelet
    (pod Running and Ready) and the IMEX daemon (the clique says the node's daemon is Ready). Timed:
    the clique write -> CD status Ready; the pod's Ready=False -> CD status NotReady."""
    if "cd-controller" not in cluster.state.processes:
        raise BenchError("the local cluster runs no ComputeDomain controller (cd-controller)")
    api = cluster_api(cluster)
    ensure_namespace(client.CoreV1Api(api), NAMESPACE)
    stamp = time.strftime("%H%M%S")
    to_ready: list[float] = []
    to_not_ready: list[float] = []
    made: list[tuple[str, str, str]] = []  # (CD name, node, uid)
    try:
        for i in range(domains):
            name, node = f"cdr-{stamp}-{i:02d}", f"cdr-{stamp}-{i:02d}"
            cd = send_json(
                api,
                "POST",
                f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ComputeDomain",
                    "metadata": {"name": name},
                    "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": f"{name}-ch"}}},
                },
            )
            uid = str(cd["metadata"]["uid"])
            made.append((name, node, uid))
            create_untainted_node(api, node, NodeTemplate(fleet="bench-cd", labels={CD_LABEL: uid}))
            pod = poll(f"daemon pod of {name}", partial(_daemon_pod, api, uid), 60, 0.05)
            pod_path = f"/api/v1/namespaces/{DRIVER_NAMESPACE}/pods/{pod['metadata']['name']}"
            if not pod["spec"].get("nodeName"):
                send_json(
                    api,
                    "POST",
                    f"{pod_path}/binding",
                    {
                        "apiVersion": "v1",
                        "kind": "Binding",
                        "metadata": {"name": pod["metadata"]["name"]},
                        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                    },
                )
            running = {"phase": "Running", "podIP": "192.0.2.1"}
            ready = [{"type": "Ready", "status": "True"}]
            merge_patch(api, f"{pod_path}/status", {"status": {**running, "conditions": ready}})
            daemon = {"nodeName": node, "ipAddress": "192.0.2.1", "cliqueID": CLIQUE_ID, "index": 0}
            send_json(
                api,
                "POST",
                f"/apis/{GROUP}/{VERSION}/namespaces/{DRIVER_NAMESPACE}/{CLIQUE_PLURAL}",
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "ComputeDomainClique",
                    "metadata": {
                        "name": clique_object_name(uid, CLIQUE_ID),
                        "labels": {CD_LABEL: uid, CLIQUE_LABEL: CLIQUE_ID},
                    },
                    "daemons": [{**daemon, "status": STATUS_READY}],
                },
            )
            to_ready.append(_until_status(api, name, STATUS_READY))
            merge_patch(
                api, f"{pod_path}/status", {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
            )
            to_not_ready.append(_until_status(api, name, STATUS_NOT_READY))
    finally:
        for name, node, uid in made:
            for path in (
                f"/apis/{GROUP}/{VERSION}/namespaces/{NAMESPACE}/{PLURAL}/{name}",
                f"/apis/{GROUP}/{VERSION}/namespaces/{DRIVER_NAMESPACE}/{CLIQUE_PLURAL}/"
                + clique_object_name(uid, CLIQUE_ID),
                f"/api/v1/nodes/{node}",
            ):
                with contextlib.suppress(ApiException):
                    release(request(api, "DELETE", path))
    return {
        "domains": domains,
        "clique_ready_to_status_ready": latency_summary(to_ready),
        "pod_not_ready_to_status_not_ready": latency_summary(to_not_ready),
        "max_ms": round(max(to_ready + to_not_ready) * 1000, 1),
        "poll_interval_ms": STATUS_POLL_SECONDS * 1000,
    }
