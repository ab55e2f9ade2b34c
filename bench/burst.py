"""The shape of a burst of prepares: when each claim of a burst is answered, and the CPU each
plugin spends per claim, for our plugin (one or more checkouts) beside the reference.

    python -m bench.burst [--devices-per-claim 8] [--callers 16] [--rounds 8] [--repeat 8] [TREE ...]

TREE: a checkout whose plugin runs as one more driver (its own node), for a before/after
comparison in one run (default: this checkout). Needs the local cluster under /tmp/lc-bench
(`python -m bench --keep-cluster` leaves one) or starts one. Each repetition is one `drabench
prepare` per driver, the drivers alternating. Prints per driver: the median over repetitions of
the prepare p50, the p99, claims/s, CPU ms per claim (user, system: /proc/<pid>/stat), and the
k-th answer of a burst (the k-th fastest call of each round, in ms, averaged): where the median of
a burst sits and why (docs/benchmarks/history.md#twelfth-round-what-a-bursts-median-measures).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.claims import NAMESPACE, make_claims
from bench.common import REPO, cluster_api, ensure_namespace, latency_summary
from bench.driver import Driver, start_all
from bench.prepare import drabench_prepare
from e2e.localcluster import LocalCluster

ROOT = Path("/tmp/lc-bench")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[REPO])
    parser.add_argument("--devices-per-claim", type=int, default=8, choices=[1, 8])
    parser.add_argument("--callers", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=8)
    args = parser.parse_args()
    cluster = LocalCluster(ROOT, nodes=0)
    if not cluster.is_up():
        cluster.up()
    api = cluster_api(cluster)
    ensure_namespace(client.CoreV1Api(api), NAMESPACE)
    work = ROOT / "scratch" / "burst"
    shutil.rmtree(work, ignore_errors=True)
    drivers = {
        f"ours {i} {tree.resolve().name}" if len(args.trees) > 1 else "ours": Driver(
            cluster, "ours", f"burst-ours-{i}", work, src=tree.resolve()
        )
        for i, tree in enumerate(args.trees)
    }
    drivers["reference"] = Driver(cluster, "ref", "burst-ref", work)
    try:
        start_all(api, list(drivers.values()))
        claims = {}
        for name, d in drivers.items():
            claims[name] = work / f"claims-{d.node}.json"
            refs = make_claims(client.CustomObjectsApi(api), d.driver, d.node, args.devices_per_claim)
            claims[name].write_text(json.dumps(refs))
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in drivers}
        for rep in range(args.repeat + 1):  # the first repetition warms up and is not kept
            for name, d in list(drivers.items())[:: 1 if rep % 2 else -1]:
                out = drabench_prepare(d, claims[name], args.callers, args.rounds)
                if rep:
                    runs[name].append(out)
        for name, outs in runs.items():
            report(name, outs, args.rounds)
    finally:
        for d in drivers.values():
            d.stop()


def kth_answers(repetitions: list[list[float]], rounds: int) -> list[float]:
    """Each repetition's call latencies (seconds) are `rounds` bursts in order: the k-th fastest
    call of a burst, in ms, averaged over every burst of every repetition."""
    burst = len(repetitions[0]) // rounds
    return [
        statistics.mean(
            sorted(calls[r * burst : (r + 1) * burst])[k] for calls in repetitions for r in range(rounds)
        )
        * 1e3
        for k in range(burst)
    ]


def report(name: str, outs: list[dict[str, Any]], rounds: int) -> None:
    median = statistics.median
    calls = [latency_summary(o["prepare_seconds"]) for o in outs]
    p50, p99 = [c["p50_ms"] for c in calls], [c["p99_ms"] for c in calls]
    rate = [len(o["prepare_seconds"]) / o["prepare_wall_seconds"] for o in outs]
    user, system = (median([o["cpu"][i] / len(o["prepare_seconds"]) * 1e3 for o in outs]) for i in (0, 1))
    kth = kth_answers([o["prepare_seconds"] for o in outs], rounds)
    print(
        f"{name}: prepare p50 {median(p50):.2f} ms [{min(p50):.2f}-{max(p50):.2f}], "
        f"p99 {median(p99):.2f} ms, {median(rate):.1f} claims/s; "
        f"CPU per claim {user + system:.2f} ms (user {user:.2f}, system {system:.2f})"
    )
    print("  k-th answer of a burst, ms: " + " ".join(f"{x:.0f}" for x in kth))


if __name__ == "__main__":
    main()
