"""Profile our GPU plugin under the prepare benchmark with py-spy (sampling, whole process).

    python -m bench.profile [--callers 1] [--devices-per-claim 1] [--rounds 2]

Needs a local cluster under /tmp/lc-bench (`python -m bench --keep-cluster` leaves one) or
starts one. Writes bench/results/profile-<case>.txt: the functions with the most samples,
inclusive (the function or anything it called was on the stack) and self (on top of it).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from bench.claims import make_claims
from bench.common import (
    REPO,
    BenchError,
    cluster_api,
    ensure_namespace,
    tree_facts,
)
from bench.driver import Driver, start_all
from bench.prepare import drabench_prepare
from e2e.localcluster import LocalCluster

ROOT = Path("/tmp/lc-bench")


def summarize(raw: Path, top: int = 40) -> str:
    """py-spy's raw (collapsed) format: `frame;frame;... count` per line."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [
            f.split(" (")[0] + " " + f.split(" (")[-1].split(":")[0].rsplit("/", 1)[-1]
            for f in stack.split(";")
        ]
        if any("serve_forever" in f or "_worker" in f for f in frames) and not any(
            "Node" in f and "Resources" in f for f in frames
        ):
            continue  # idle threads
        total += n
        for f in set(frames):
            inclusive[f] += n
        own[frames[-1]] += n
    lines = [f"{total} samples in calls being served", "", "inclusive %  function"]
    lines += [f"{100 * c / total:10.1f}  {f}" for f, c in inclusive.most_common(top)]
    lines += ["", "self %       function"]
    lines += [f"{100 * c / total:10.1f}  {f}" for f, c in own.most_common(top)]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument("--callers", type=int, default=1)
    parser.add_argument("--devices-per-claim", type=int, default=1, choices=[1, 8])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    parser.add_argument(
        "--all-threads",
        action="store_true",
        help="sample every running thread, not only the one holding the GIL (time in C: gRPC, I/O)",
    )
    parser.add_argument("--rate", type=int, default=250, help="samples per second")
    args = parser.parse_args()
    if not shutil.which("py-spy"):
        raise BenchError("py-spy not found: pip install py-spy")
    cluster = LocalCluster(ROOT, nodes=0)
    if not cluster.is_up():
        cluster.up()
    api = cluster_api(cluster)
    from kubernetes import client

    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ensure_namespace(core, "bench-prepare")
    work = ROOT / "profile"
    d = Driver(cluster, "ours", "bench-profile", work)
    try:
        start_all(api, [d])
        assert d.proc is not None
        claims = work / "claims.json"
        claims.write_text(json.dumps(make_claims(custom, d.driver, d.node, args.devices_per_claim)))
        raw = work / "py-spy.raw"
        spy = subprocess.Popen(
            [
                "py-spy",
                "record",
                "--pid",
                str(d.proc.pid),
                "--format",
                "raw",
                "--rate",
                str(args.rate),
                "-o",
                str(raw),
                # only the thread holding the GIL: where the plugin's Python time goes
                *([] if args.all_threads else ["--gil"]),
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(work / "py-spy.log", "w"),  # noqa: SIM115
        )
        out = drabench_prepare(d, claims, args.callers, args.rounds)
        spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        spy.wait(60)
    finally:
        d.stop()
    name = f"profile-d{args.devices_per_claim}-c{args.callers}"
    report = summarize(raw)
    n = len(out["prepare_seconds"])
    tree = tree_facts(REPO, "git")
    head = (
        f"{name}: {n} prepares in {out['prepare_wall_seconds']:.2f}s, "
        f"{n} unprepares in {out['unprepare_wall_seconds']:.2f}s; commit {tree['git_commit']}"
        f"{' (uncommitted changes)' if tree['git_dirty'] else ''}, "
        f"py-spy {'(running threads)' if args.all_threads else '--gil'} at {args.rate} Hz\n"
    )
    dest = args.out / f"{name}.txt"
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(head + report)
    sys.stdout.write(head + report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
