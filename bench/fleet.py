"""Scale mode: `dra-fake fleet --nodes N` (N x 8 GPUs) vs a bare client creating the same
objects (Node, untaint, its ResourceSlices) as fast as the API server accepts them."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

from kubernetes.client.exceptions import ApiException

from bench.common import (
    CONFIGS,
    DRABENCH,
    REPO,
    BenchError,
    any_left,
    children_cpu_seconds,
    cluster_api,
    poll,
    process_cpu_seconds,
    run_json,
    spread,
)
from dra_fake.core.kube import get_json, release, request
from dra_fake.core.poolsync import slice_name
from dra_fake.core.slices import slice_manifest, slice_spec
from dra_fake.fleet.core import node_manifest, node_names
from dra_fake.fleet.main import load_fleet_inventory
from dra_fake.fleet.nodes import node_template
from dra_fake.fleet.options import FleetOptions
from dra_fake.gpu.inventory import load_inventory
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.slices import desired_slices
from e2e.localcluster import LocalCluster

WORKERS = 16


def _cleanup(cluster: LocalCluster, fleet: str) -> None:
    """Delete the run's Nodes and every slice of the driver (no plugin runs during this section);
    waits until both are gone, so the next run starts from the same state. (Leaving the slices to
    the garbage collector took minutes: it deletes at the controller manager's 20 requests/s.)"""
    api = cluster_api(cluster)
    selector = f"dra-fake.dev/fleet={fleet}"
    driver = "spec.driver=gpu.nvidia.com"
    for path, query in (
        ("/api/v1/nodes", {"label_selector": selector}),
        ("/apis/resource.k8s.io/v1/resourceslices", {"field_selector": driver}),
    ):
        release(request(api, "DELETE", path, query=query))
    # The nodes' Leases (unlabelled, as the kubelet's) too: left to the garbage collector, a
    # thousand of them kept it busy into the next section.
    leases = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    names = [
        lease["metadata"]["name"]
        for lease in get_json(api, leases)["items"]
        if lease["metadata"]["name"].startswith(f"{fleet}-")
    ]

    def delete_lease(name: str) -> None:
        try:
            release(request(api, "DELETE", f"{leases}/{name}"))
        except ApiException as err:
            if err.status != 404:  # 404: the collector was quicker
                raise

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(delete_lease, names))

    poll(
        f"nodes of {fleet} deleted",
        lambda: not any_left(api, "/api/v1/nodes", label_selector=selector),
        300,
        0.5,
    )
    poll(
        "the driver's slices deleted",
        lambda: not any_left(api, "/apis/resource.k8s.io/v1/resourceslices", field_selector=driver),
        300,
        0.5,
    )


def run_measured(
    cluster: LocalCluster, argv: list[str], env: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """run_json, plus the CPU seconds the command (`clientCpuSeconds`: its whole process) and the
    API server (`apiserverCpuSeconds`) spent meanwhile: on 2 cores, the wall time is about their
    sum (with etcd's) over two, so a client's own CPU shows in the wall time it is judged by."""
    apiserver = cluster.process("kube-apiserver").pid
    api_before, own_before = process_cpu_seconds(apiserver), children_cpu_seconds()
    out = run_json(argv, env=env)
    out["clientCpuSeconds"] = round(children_cpu_seconds() - own_before, 2)
    out["apiserverCpuSeconds"] = round(process_cpu_seconds(apiserver) - api_before, 2)
    return out


def run_fleet(
    cluster: LocalCluster,
    n: int,
    cleanup: bool = True,
    fleet: str = "",
    extra: tuple[str, ...] = ("--exit-when-synced",),
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    fleet = fleet or f"fl{n}"
    _cleanup(cluster, fleet)
    out = run_measured(
        cluster,
        [
            sys.executable,
            "-m",
            "dra_fake",
            "fleet",
            f"--nodes={n}",
            f"--config={CONFIGS / 'h100x8.yaml'}",
            f"--kubeconfig={cluster.kubeconfig}",
            f"--node-prefix={fleet}-",
            f"--fleet-name={fleet}",
            f"--workers={WORKERS}",
            *extra,
            "--log-level=warning",
        ],
        env,
    )
    if out["nodesSynced"] != n or out["slices"] < n:
        raise BenchError(f"fleet {n}: {out}")
    if cleanup:
        _cleanup(cluster, fleet)
    return out


# Longer than the node lifecycle controller's grace periods (v1.37: --node-monitor-grace-period 50 s,
# --node-startup-grace-period 60 s): a node without heartbeats would be Unknown by then.
HEARTBEAT_SECONDS = 80.0


def heartbeats(cluster: LocalCluster, n: int) -> dict[str, Any]:
    """`n` fleet nodes for HEARTBEAT_SECONDS under the node lifecycle controller (the bench's
    cluster runs it): every node must still be Ready and untainted; the Leases' renewals and ages."""
    fleet = f"hb{n}"
    out = run_fleet(cluster, n, cleanup=False, fleet=fleet, extra=(f"--exit-after={HEARTBEAT_SECONDS}",))
    api = cluster_api(cluster)
    nodes = get_json(api, "/api/v1/nodes", {"label_selector": f"dra-fake.dev/fleet={fleet}"})["items"]
    not_ready = [
        node["metadata"]["name"]
        for node in nodes
        if not any(
            c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", [])
        )
        or any(t["key"].startswith("node.kubernetes.io/") for t in node["spec"].get("taints") or [])
    ]
    now = time.time()
    ages = [
        now - datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00")).timestamp()
        for lease in get_json(api, "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")["items"]
        if lease["metadata"]["name"].startswith(f"{fleet}-") and lease["spec"].get("renewTime")
    ]
    _cleanup(cluster, fleet)
    if not_ready or len(ages) != n:
        raise BenchError(
            f"after {HEARTBEAT_SECONDS:.0f}s: {len(not_ready)} of {n} nodes not Ready or tainted "
            f"({not_ready[:5]}), {len(ages)} leases"
        )
    leases = out.get("leases") or {}
    return {
        "nodes": n,
        "seconds": HEARTBEAT_SECONDS,
        "ready_untainted": len(nodes),
        "lease_writes": leases,
        "renewals_per_node_per_10s": round(leases.get("renewed", 0) / n / (HEARTBEAT_SECONDS / 10), 2),
        "max_lease_age_s": round(max(ages), 1),
        "max_rss_mib": round(out["maxRssBytes"] / 2**20, 1),
    }


def memory(cluster: LocalCluster, n: int) -> dict[str, Any]:
    """The fleet's peak RSS at `n` nodes (no bare-client run; its nodes are left for the cluster's
    teardown: the garbage collector needs minutes for thousands of slices)."""
    out = run_fleet(cluster, n, cleanup=False)
    return {
        "nodes": n,
        "wall_s": out["wallSeconds"],
        "api_requests": out["apiRequestsTotal"],
        "max_rss_mib": round(out["maxRssBytes"] / 2**20, 1),
    }


def run_bare(cluster: LocalCluster, n: int, work: Path) -> dict[str, Any]:
    """The same objects, built up front, POSTed by the Go client with WORKERS callers."""
    fleet = f"bare{n}"
    _cleanup(cluster, fleet)
    config = CONFIGS / "h100x8.yaml"
    # The Nodes the fleet creates: GPU Feature Discovery's labels (27 here) and annotation included.
    template = node_template(
        FleetOptions(fleet=fleet, prefix=f"{fleet}-"), load_fleet_inventory(str(config)), load_profiles([])
    )
    jobs = []
    for name in node_names(f"{fleet}-", n):
        desired = desired_slices(load_inventory(config, name), "gpu.nvidia.com", (1, 37))
        slices = [
            slice_manifest(
                slice_spec(
                    d,
                    api_version="v1",
                    driver="gpu.nvidia.com",
                    pool_name=name,
                    node_name=name,
                    generation=1,
                    slice_count=len(desired),
                ),
                api_version="v1",
                name=slice_name(i, "gpu.nvidia.com", name),
                owner_node_name=name,
                owner_node_uid="__NODE_UID__",
            )
            for i, d in enumerate(desired)
        ]
        jobs.append({"node": node_manifest(name, template), "slices": slices})
    path = work / f"bare-{n}.json"
    path.write_text(json.dumps(jobs))
    token = cluster.state.admin_token
    argv = [
        str(DRABENCH),
        "create",
        "--server",
        cluster.api_url,
        "--token",
        token,
        "--ca",
        str(cluster.ca_file),
    ]
    out = run_measured(cluster, [*argv, "--jobs", str(path), "--concurrency", str(WORKERS)])
    _cleanup(cluster, fleet)
    return out


def run(cluster: LocalCluster, work: Path, sizes: list[int], repeat: int) -> dict[str, Any]:
    """Each size `repeat` times, the fleet and the bare client alternating which goes first (both
    see the same noise); medians and spreads, and the ratio of the medians."""
    work.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"gpus_per_node": 8, "workers": WORKERS, "repeat": repeat, "runs": []}
    for n in sizes:
        t0 = time.monotonic()
        reps: list[dict[str, Any]] = []
        for i in range(repeat):
            if i % 2:
                bare = run_bare(cluster, n, work)
                fl = run_fleet(cluster, n)
            else:
                fl = run_fleet(cluster, n)
                bare = run_bare(cluster, n, work)
            reps.append(
                {
                    "fleet": {
                        "wall_s": fl["wallSeconds"],
                        "api_requests": fl["apiRequestsTotal"],
                        "api_requests_by_verb": fl["apiRequests"],
                        "slices": fl["slices"],
                        "phases_s": fl.get("phases", {}),
                        "max_rss_mib": round(fl["maxRssBytes"] / 2**20, 1),
                        "cpu_s": fl["clientCpuSeconds"],
                        "apiserver_cpu_s": fl["apiserverCpuSeconds"],
                    },
                    "bare_client": {
                        "wall_s": round(bare["wall_seconds"], 3),
                        "api_requests": bare["requests"],
                        "cpu_s": bare["clientCpuSeconds"],
                        "apiserver_cpu_s": bare["apiserverCpuSeconds"],
                    },
                }
            )
        figures = spread(
            [
                {
                    "fleet_wall_s": r["fleet"]["wall_s"],
                    "bare_wall_s": r["bare_client"]["wall_s"],
                    "fleet_max_rss_mib": r["fleet"]["max_rss_mib"],
                    "fleet_cpu_s": r["fleet"]["cpu_s"],
                    "bare_cpu_s": r["bare_client"]["cpu_s"],
                    "fleet_apiserver_cpu_s": r["fleet"]["apiserver_cpu_s"],
                    "bare_apiserver_cpu_s": r["bare_client"]["apiserver_cpu_s"],
                    "ratio_per_repetition": round(r["fleet"]["wall_s"] / r["bare_client"]["wall_s"], 2),
                }
                for r in reps
            ]
        )
        results["runs"].append(
            {
                "nodes": n,
                **figures,
                "ratio_fleet_over_bare_wall": round(
                    figures["fleet_wall_s"]["median"] / figures["bare_wall_s"]["median"], 2
                ),
                "fleet_api_requests": reps[0]["fleet"]["api_requests"],
                "bare_api_requests": reps[0]["bare_client"]["api_requests"],
                "repetitions": reps,
                "measured_in_s": round(time.monotonic() - t0, 1),
            }
        )
    return results


__all__ = ["REPO", "run"]
