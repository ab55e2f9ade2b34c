"""The shape of a burst of prepares: when each claim of a burst is answered, and the CPU each
plugin spends per claim, for our plugin (one or more checkouts) beside the reference.

    python -m bench.burst [--devices-per-claim 8] [--callers 16] [--rounds 8] [--repeat 8] [TREE ...]

TREE: a checkout whose plugin runs as one more driver (its own node), for a before/after
comparison in one run (default: this checkout). Needs the local cluster under /tmp/lc-bench
(`python -m bench --keep-cluster` leaves one) or starts one. Each repetition is one `drabench
prepare` per driver, the drivers alternating. Prints per driver: the median over repetitions of
the prepare p50, the p99, claims/s, CPU ms per claim (user, system: /proc/<pid>/stat), and the
k-th answer of a burst (the k-th fastest call of each round, in ms, averaged): where the median of
a burst sits and why (docs/benchmarks.md, the twelfth round).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.common import (
    CONFIGS,
    DRABENCH,
    OURS_SRC_ENV,
    REPO,
    ensure_namespace,
    ensure_node,
    poll,
    process_cpu_times,
    run_json,
)
from bench.prepare import DEVICES, NAMESPACE, Driver, cluster_api, make_claims
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
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ensure_namespace(core, NAMESPACE)
    work = ROOT / "scratch" / "burst"
    shutil.rmtree(work, ignore_errors=True)
    drivers: dict[str, Driver] = {}
    for i, tree in enumerate(args.trees):
        drivers[f"ours {tree.resolve().name}" if len(args.trees) > 1 else "ours"] = Driver(
            cluster, "ours", f"burst-ours-{i}", work
        )
    drivers["reference"] = Driver(cluster, "ref", "burst-ref", work)
    try:
        for d, tree in zip(drivers.values(), [*args.trees, REPO], strict=True):
            ensure_node(core, d.node)
            d.delete_slices(api, custom)
            os.environ[OURS_SRC_ENV] = str(tree.resolve())  # read by Driver.start for ours
            d.start(CONFIGS / "h100x128.yaml", DEVICES)
        claims = {}
        for name, d in drivers.items():
            d.wait_published(custom, CONFIGS / "h100x128.yaml", DEVICES)
            poll(f"{name} DRA socket", d.dra_socket.exists, 120, alive=d.check_alive)
            claims[name] = work / f"claims-{d.node}.json"
            claims[name].write_text(json.dumps(make_claims(custom, d.driver, d.node, args.devices_per_claim)))
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in drivers}
        for rep in range(args.repeat + 1):  # the first repetition warms up and is not kept
            for name, d in list(drivers.items())[:: 1 if rep % 2 else -1]:
                assert d.proc is not None
                before = process_cpu_times(d.proc.pid)
                out = run_json(
                    [
                        str(DRABENCH),
                        "prepare",
                        f"--socket={d.dra_socket}",
                        f"--claims={claims[name]}",
                        f"--concurrency={args.callers}",
                        f"--rounds={args.rounds}",
                    ]
                )
                after = process_cpu_times(d.proc.pid)
                out["cpu"] = (after[0] - before[0], after[1] - before[1])
                if rep:
                    runs[name].append(out)
        for name, outs in runs.items():
            report(name, outs, args.rounds)
    finally:
        for d in drivers.values():
            d.stop()


def report(name: str, outs: list[dict[str, Any]], rounds: int) -> None:
    median = statistics.median

    def per_claim(o: dict[str, Any], i: int) -> float:
        return float(o["cpu"][i]) / len(o["prepare_seconds"]) * 1e3

    p50 = [statistics.median(o["prepare_seconds"]) * 1e3 for o in outs]
    p99 = [sorted(o["prepare_seconds"])[int(0.99 * len(o["prepare_seconds"]))] * 1e3 for o in outs]
    rate = [len(o["prepare_seconds"]) / o["prepare_wall_seconds"] for o in outs]
    user, system = median([per_claim(o, 0) for o in outs]), median([per_claim(o, 1) for o in outs])
    burst = len(outs[0]["prepare_seconds"]) // rounds
    kth = [
        statistics.mean(
            sorted(o["prepare_seconds"][r * burst : (r + 1) * burst])[k] for o in outs for r in range(rounds)
        )
        * 1e3
        for k in range(burst)
    ]
    print(
        f"{name}: prepare p50 {median(p50):.2f} ms [{min(p50):.2f}-{max(p50):.2f}], "
        f"p99 {median(p99):.2f} ms, {median(rate):.1f} claims/s; "
        f"CPU per claim {user + system:.2f} ms (user {user:.2f}, system {system:.2f})"
    )
    print("  k-th answer of a burst, ms: " + " ".join(f"{x:.0f}" for x in kth))


if __name__ == "__main__":
    main()
