"""`make bench` / `python -m bench`: every benchmark, results in bench/results/latest.{json,md}.

Starts its own local control plane under /tmp/lc-bench (no kubelet-less node of another
engineer's cluster is touched), builds the reference driver and the drabench client from
bench/refdriver, then runs: the floor, prepare/unprepare side by side, our plugin with and without
each piece of its machinery (bench/machinery.py), shares beside full GPUs, publishing, the fleet
scale runs, KWOK fleets (pods scheduled and claims allocated per second) and the ComputeDomain
controller (200 CDs at once). A benchmark
fails only on errors; timings never fail it.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import computedomain, fleet, kwok, machinery, prepare, publish, sharing, summary
from bench.common import REFDRIVER, REPO, cpu_ticks, loadavg, machine_facts, steal_percent, tree_facts
from bench.history import HISTORY, RESULTS, history_line, read_history
from bench.report import render
from e2e.localcluster import LocalCluster

ROOT = Path("/tmp/lc-bench")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--fleet-sizes", default="100,500,1000", help="comma-separated node counts ('' skips)"
    )
    parser.add_argument(
        "--fleet-memory", type=int, default=5000, help="nodes of the fleet's memory run (0 skips)"
    )
    parser.add_argument(
        "--fleet-heartbeats",
        type=int,
        default=1000,
        help="nodes kept Ready by fleet Leases under the node lifecycle controller (0 skips)",
    )
    parser.add_argument(
        "--kwok-nodes",
        type=int,
        default=1000,
        help="fleet nodes whose pods KWOK runs: pods scheduled and claims allocated per second (0 skips)",
    )
    parser.add_argument("--kwok-pods", type=int, default=1000, help="pods of each KWOK run")
    parser.add_argument(
        "--kwok-repeat",
        type=int,
        default=2,
        help="repetitions of the KWOK runs (each pair takes minutes: the control plane's rate limits)",
    )
    parser.add_argument(
        "--cd-sizes", default="200,1000", help="comma-separated sizes of the ComputeDomain create bursts"
    )
    parser.add_argument("--rounds-1", type=int, default=2, help="rounds over the 128 one-device claims")
    parser.add_argument("--rounds-8", type=int, default=8, help="rounds over the 16 eight-device claims")
    parser.add_argument(
        "--machinery-repeat",
        type=int,
        default=3,
        help="repetitions of the machinery trial (our plugin with and without each piece)",
    )
    parser.add_argument(
        "--machinery-fleet-nodes",
        type=int,
        default=1000,
        help="nodes of the machinery trial's fleet runs (0 skips them)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--keep-cluster", action="store_true", help="leave the /tmp/lc-bench cluster running")
    parser.add_argument("--only", default="", help="comma-separated sections to run (default: all)")
    parser.add_argument(
        "--repeat", type=int, default=5, help="repetitions of each measurement (median, spread)"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="each section once at a tiny size, into a temporary directory (make test runs it)",
    )
    args = parser.parse_args()
    if args.smoke:
        args.fleet_sizes, args.cd_sizes, args.rounds_1, args.rounds_8, args.repeat = "5", "5", 1, 1, 1
        args.fleet_memory = args.fleet_heartbeats = 0
        args.kwok_nodes, args.kwok_pods, args.kwok_repeat = 5, 10, 1
        args.machinery_repeat, args.machinery_fleet_nodes = 1, 5
        if args.out == RESULTS:
            args.out = Path(tempfile.mkdtemp(prefix="dra-bench-smoke-"))
    elif args.out.resolve() == RESULTS.resolve():
        facts = tree_facts(REPO, "git")
        if facts["git_dirty"]:
            print(
                "python -m bench: the tree has uncommitted changes; figures in bench/results come from a "
                "committed tree (commit first, or write elsewhere with --out)",
                file=sys.stderr,
            )
            return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    log = logging.getLogger("bench")

    started, run_ticks = time.monotonic(), cpu_ticks()
    results: dict[str, Any] = {"machine": machine_facts(), "sections": {}}
    log.info("building the reference driver and drabench (bench/refdriver/build.sh)")
    subprocess.run([str(REFDRIVER / "build.sh")], check=True)
    # Our plugins start from compiled bytecode, as in the image (its Dockerfile runs compileall),
    # also where $PYTHONDONTWRITEBYTECODE keeps Python from caching it.
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "dra_fake", "computedomain"], cwd=REPO, check=True
    )
    work = ROOT / "scratch"
    cluster = LocalCluster(ROOT, nodes=0, node_lifecycle=True)  # fleet heartbeats are judged by it
    failed = False
    try:
        if cluster.is_up():
            cluster.down()
        cluster.up()
        sections: list[tuple[str, Callable[[], dict[str, Any]]]] = [
            ("floor", lambda: prepare.floor(work)),
            (
                "prepare",
                lambda: prepare.run(
                    cluster,
                    work,
                    args.rounds_1,
                    args.rounds_8,
                    args.repeat,
                    ("tmpfs",) if args.smoke else ("disk", "tmpfs"),
                    ((8, 1), (8, 16)) if args.smoke else prepare.CASES,
                ),
            ),
            (
                "machinery",
                lambda: machinery.run(
                    cluster,
                    work,
                    args.rounds_1,
                    args.rounds_8,
                    args.machinery_repeat,
                    ((8, 1), (8, 16)) if args.smoke else prepare.CASES,
                    args.machinery_fleet_nodes,
                ),
            ),
            (
                "sharing",
                lambda: sharing.run(cluster, work, 1 if args.smoke else 4, args.repeat),
            ),
            (
                "publish",
                lambda: publish.run(cluster, work, args.repeat, 0.0 if args.smoke else publish.REST_SECONDS),
            ),
        ]
        sizes = [int(s) for s in args.fleet_sizes.split(",") if s.strip()]
        if sizes:
            sections.append(("fleet", lambda: fleet.run(cluster, work, sizes, args.repeat)))
        if args.fleet_heartbeats:
            sections.append(("fleet_heartbeats", lambda: fleet.heartbeats(cluster, args.fleet_heartbeats)))
        if args.kwok_nodes:
            sections.append(
                ("kwok", lambda: kwok.run(cluster, args.kwok_nodes, args.kwok_pods, args.kwok_repeat))
            )
        cd_sizes = [int(x) for x in args.cd_sizes.split(",") if x.strip()]
        sections.append(
            (
                "computedomain",
                lambda: computedomain.bursts(cluster, cd_sizes, 2 if args.smoke else 20, args.repeat),
            )
        )
        if args.fleet_memory:  # last: its nodes stay until the cluster goes
            sections.append(("fleet_memory", lambda: fleet.memory(cluster, args.fleet_memory)))
        only = {x.strip() for x in args.only.split(",") if x.strip()}
        for name, fn in sections:
            if only and name not in only:
                continue
            log.info("benchmark: %s (load average %s)", name, loadavg())
            t0, ticks = time.monotonic(), cpu_ticks()
            try:
                results["sections"][name] = {
                    "result": fn(),
                    "loadavg_after": loadavg(),
                    "cpu_steal_percent": steal_percent(ticks, cpu_ticks()),
                }
            except Exception as err:
                failed = True
                log.error("benchmark %s failed: %s", name, err)
                results["sections"][name] = {
                    "error": f"{type(err).__name__}: {err}",
                    "trace": traceback.format_exc(),
                }
            results["sections"][name]["seconds"] = round(time.monotonic() - t0, 1)
    finally:
        if not args.keep_cluster:
            cluster.down()
    results["machine"]["loadavg_end"] = loadavg()
    results["machine"]["cpu_steal_percent"] = steal_percent(run_ticks, cpu_ticks())
    results["total_seconds"] = round(time.monotonic() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    history: list[dict[str, Any]] = []
    if args.out.resolve() == RESULTS.resolve() and not args.only:
        with HISTORY.open("a") as lines:
            lines.write(json.dumps(history_line(results), sort_keys=True) + "\n")
        history = read_history(HISTORY)
    (args.out / "latest.md").write_text(render(results, history))
    if history:
        summary.write()  # docs/benchmarks.md's table and its plot, from the results just written
    log.info(
        "wrote %s and %s in %.0fs", args.out / "latest.json", args.out / "latest.md", results["total_seconds"]
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
