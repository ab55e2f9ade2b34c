"""KWOK fleets: how fast the real scheduler places pods with GPU claims on `dra-fake fleet` nodes
whose kubelet KWOK plays, beside plain KWOK (the same pods without claims, on the same nodes).

    python -m bench.kwok [--nodes 1000] [--pods 1000] [--repeat 1]

(its own local cluster under /tmp/lc-bench-kwok; `python -m bench --only kwok` runs it in the
bench's). Each run creates `pods` pods (16 concurrent callers) in a fresh namespace, each with a
claim of one GPU (DRA) or none (plain), pinned to the fleet by node selector, and polls every
second until every pod is bound, every claim allocated and every pod Running (KWOK starts them at
once: workload profile startSeconds 0, run until deleted). Rates are pods over the seconds from the
first create to the last one bound (allocated, Running).
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import CONFIGS, BenchError, any_left, cluster_api, poll, spread
from bench.fleet import _cleanup
from dra_fake.core.kube import get_json, release, request, send_json
from dra_fake.fleet.core import FLEET_LABEL, FLEET_TOLERATION
from dra_fake.fleet.workload import WorkloadProfile
from e2e.localcluster import LocalCluster

FLEET = "kwokbench"
CALLERS = 16
POLL_SECONDS = 1.0
ROOT = Path("/tmp/lc-bench-kwok")


def _pod(name: str, dra: bool) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "work", "image": "kwok-bench-work:1"}
    spec: dict[str, Any] = {
        "nodeSelector": {FLEET_LABEL: FLEET},
        "tolerations": [FLEET_TOLERATION],  # fleet nodes are tainted (no kubelet of their own)
        "restartPolicy": "Never",
        "containers": [container],
    }
    if dra:
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "gpu"},
    "spec": {
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}
    },
}


def start_fleet(cluster: LocalCluster, nodes: int) -> None:
    """The fleet's nodes (Leases renewed: the bench's cluster runs the node lifecycle controller)
    with their slices published, and KWOK's controller."""
    cluster.start_fleet(
        nodes,
        extra=[
            f"--config={CONFIGS / 'h100x8.yaml'}",
            f"--fleet-name={FLEET}",
            f"--node-prefix={FLEET}-",
        ],
    )
    api = cluster_api(cluster)

    def published() -> bool:
        slices = get_json(
            api, "/apis/resource.k8s.io/v1/resourceslices", {"field_selector": "spec.driver=gpu.nvidia.com"}
        )["items"]
        return (
            len({s["spec"]["nodeName"] for s in slices if s["spec"]["nodeName"].startswith(FLEET)}) >= nodes
        )

    poll(f"slices of {nodes} fleet nodes", published, 600, 2.0, alive=cluster.process("fleet").check_alive)
    cluster.start_kwok(WorkloadProfile(start_seconds=0))


def one_run(cluster: LocalCluster, pods: int, dra: bool, tag: str) -> dict[str, float]:
    api = cluster_api(cluster)
    ns = f"kwok-bench-{tag}"
    send_json(api, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        poll(
            f"namespace {ns}'s default ServiceAccount",
            lambda: any_left(api, f"/api/v1/namespaces/{ns}/serviceaccounts"),
            60,
            0.2,
        )
        if dra:
            send_json(
                api, "POST", f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaimtemplates", TEMPLATE
            )
        t0 = time.monotonic()
        with ThreadPoolExecutor(CALLERS) as callers:
            list(
                callers.map(
                    lambda i: send_json(api, "POST", f"/api/v1/namespaces/{ns}/pods", _pod(f"p{i:05d}", dra)),
                    range(pods),
                )
            )
        created = time.monotonic() - t0
        done: dict[str, float] = {}
        deadline = t0 + 600 + pods / 5
        while len(done) < (3 if dra else 2):
            listed = get_json(api, f"/api/v1/namespaces/{ns}/pods")["items"]
            now = time.monotonic() - t0
            if sum(1 for p in listed if p["spec"].get("nodeName")) == pods:
                done.setdefault("bound", now)
            if sum(1 for p in listed if p.get("status", {}).get("phase") == "Running") == pods:
                done.setdefault("running", now)
            if dra and "allocated" not in done:
                claims = get_json(api, f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims")["items"]
                if sum(1 for c in claims if (c.get("status") or {}).get("allocation")) == pods:
                    done["allocated"] = now
            if time.monotonic() > deadline:
                raise BenchError(f"kwok {tag}: not done after {deadline - t0:.0f}s: {done}")
            time.sleep(POLL_SECONDS)
        out = {
            "createSeconds": round(created, 2),
            "podsScheduledPerSecond": round(pods / done["bound"], 1),
            "podsRunningPerSecond": round(pods / done["running"], 1),
        }
        if dra:
            out["claimsAllocatedPerSecond"] = round(pods / done["allocated"], 1)
        return out
    finally:
        release(request(api, "DELETE", f"/api/v1/namespaces/{ns}"))
        poll(f"namespace {ns} deleted", lambda: not _exists(api, ns), 600, 1.0)


def _exists(api: Any, ns: str) -> bool:
    return any(n["metadata"]["name"] == ns for n in get_json(api, "/api/v1/namespaces")["items"])


def run(cluster: LocalCluster, nodes: int, pods: int, repeat: int) -> dict[str, Any]:
    start_fleet(cluster, nodes)
    try:
        runs: dict[str, list[dict[str, float]]] = {"dra": [], "plain": []}
        for rep in range(repeat):
            order = ("dra", "plain") if rep % 2 == 0 else ("plain", "dra")
            for kind in order:
                runs[kind].append(one_run(cluster, pods, kind == "dra", f"{kind}-{rep}"))
        return {
            "nodes": nodes,
            "gpusPerNode": 8,
            "pods": pods,
            "dra": spread(runs["dra"]),
            "plain": spread(runs["plain"]),
            "runs": runs,
        }
    finally:
        cluster.stop_kwok()
        cluster.stop_fleet()
        _cleanup(cluster, FLEET)  # its nodes, slices and Leases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--root", type=Path, default=ROOT)
    args = parser.parse_args()
    cluster = LocalCluster(args.root, nodes=0, node_lifecycle=True)
    if cluster.is_up():
        cluster.down()
    cluster.up()
    try:
        print(json.dumps(run(cluster, args.nodes, args.pods, args.repeat), indent=2))
    finally:
        cluster.down()


if __name__ == "__main__":
    main()
