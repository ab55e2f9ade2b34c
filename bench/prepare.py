"""Prepare/unprepare side by side: our plugin and the reference driver, same client, same API
server, identical claims; plus the floor of this machine."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.claims import NAMESPACE, make_claims
from bench.common import (
    DRABENCH,
    BenchError,
    cluster_api,
    ensure_namespace,
    latency_summary,
    process_cpu_times,
    run_json,
    spread,
)
from bench.driver import DEVICES, Driver, start_all
from dra_fake.core.atomic import atomic_write
from e2e.localcluster import LocalCluster

SHAPES = (1, 8)  # devices per claim
CALLERS = (1, 16)  # serial, 16 concurrent
CASES = tuple((shape, callers) for shape in SHAPES for callers in CALLERS)


def floor(work: Path) -> dict[str, Any]:
    """An empty gRPC round trip over a unix socket (Go client, Go no-op server) and one
    fsync'd atomic file write (temp file, fsync, rename) from Go and from our Python helper."""
    work.mkdir(parents=True, exist_ok=True)
    grpc_rt = run_json([str(DRABENCH), "empty", "--n", "2000"])
    go_write = run_json([str(DRABENCH), "fsync", "--dir", str(work), "--n", "300", "--size", "4096"])
    py_lat = []
    target = work / "py-atomic.json"
    data = b"x" * 4096
    for _ in range(300):
        t0 = time.perf_counter()
        atomic_write(target, data, 0o600)
        py_lat.append(time.perf_counter() - t0)
    return {
        "grpc_empty_roundtrip_unix_socket": latency_summary(grpc_rt["seconds"]),
        "fsync_atomic_write_4KiB_go": latency_summary(go_write["seconds"]),
        "fsync_atomic_write_4KiB_python_dra_fake_atomic": latency_summary(py_lat),
    }


# What each driver does per claim (from their code; docs/benchmarks/history.md#per-claim-work): the report
# prints it beside the figures. N = claims in one group-commit batch (dra_fake.core.groupcommit).
PER_CLAIM_WORK = (
    (
        "prepare",
        "ours",
        "GET claim; two journal records, written over zeros written ahead (PrepareStarted: "
        "written ahead, no fdatasync; PrepareCompleted: fdatasync, which flushes data only while "
        "the journal's size stays the same); CDI spec written (temp file, rename, no fsync: the "
        "entry holds it); now and then the journal grows by 256 KiB of zeros, or a compaction "
        "(checkpoint and new journal: 4 fsyncs)",
        "1 + N files, 1 fsync per batch of N",
    ),
    (
        "prepare",
        "reference",
        "GET claim; CDI spec written (temp file, rename, no fsync); checkpoint written (temp file, "
        "fsync, rename)",
        "2 files, 1 fsync",
    ),
    (
        "unprepare",
        "ours",
        "nothing to undo (the bench's claims): CDI spec removed (no fsync), entry dropped (one journal "
        "record, fdatasync); else the entry marked first (one more record, written ahead, no "
        "fdatasync)",
        "1 file + N removals, 1 fsync per batch of N",
    ),
    (
        "unprepare",
        "reference",
        "CDI spec removed (no fsync); checkpoint written (fsync)",
        "1 file + 1 removal, 1 fsync",
    ),
)

# Where both drivers keep their state: the machine's disk, and tmpfs (no fsync cost), so the report
# separates what durability costs from what the language and runtime cost.
STORAGE = {"disk": None, "tmpfs": Path("/dev/shm/dra-bench")}


def run(
    cluster: LocalCluster,
    work: Path,
    rounds_1: int = 2,
    rounds_8: int = 8,
    repeat: int = 3,
    storages: tuple[str, ...] = ("disk", "tmpfs"),
    cases: tuple[tuple[int, int], ...] = CASES,
) -> dict[str, Any]:
    """Each (devices per claim, callers) case `repeat` times per driver, the drivers alternating,
    on each storage; figures per repetition, and their median and spread."""
    api = cluster_api(cluster)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    ensure_namespace(core, NAMESPACE)
    results: dict[str, Any] = {
        "devices_per_node": DEVICES,
        "repeat": repeat,
        "cases": [],
        "empty_prepare_request": {},
    }
    claims: dict[tuple[str, int], list[dict[str, str]]] = {}
    for storage in storages:
        root = STORAGE[storage] or work
        shutil.rmtree(root / "plugins-state", ignore_errors=True)
        drivers = {
            "ours": Driver(cluster, "ours", "bench-ours", root / "plugins-state"),
            "reference": Driver(cluster, "ref", "bench-ref", root / "plugins-state"),
        }
        try:
            start_all(api, drivers.values())
            for kind, d in drivers.items():
                for shape in {s for s, _ in cases}:
                    if (kind, shape) not in claims:
                        claims[(kind, shape)] = make_claims(custom, d.driver, d.node, shape)
            for shape, callers in cases:
                case: dict[str, Any] = {"storage": storage, "devices_per_claim": shape, "callers": callers}
                reps: dict[str, list[dict[str, Any]]] = {kind: [] for kind in drivers}
                for _ in range(repeat):
                    for kind, d in drivers.items():
                        path = work / f"claims-{kind}-{shape}.json"
                        path.write_text(json.dumps(claims[(kind, shape)]))
                        rounds = rounds_1 if shape == 1 else rounds_8
                        reps[kind].append(drive(d, path, callers, rounds))
                for kind, runs in reps.items():
                    case[kind] = {"repetitions": runs, **spread(runs)}
                ours, ref = case["ours"], case["reference"]
                case["ratio_ours_over_reference"] = {
                    key: round(ours[key]["median"] / ref[key]["median"], 2)
                    for key in (
                        "prepare_p50_ms",
                        "prepare_p99_ms",
                        "unprepare_p50_ms",
                        "unprepare_p99_ms",
                        "prepare_claims_per_s",
                        "unprepare_claims_per_s",
                        "cpu_ms_per_claim",
                    )
                }
                results["cases"].append(case)
            # After the cases: right after start-up our plugin's background start (the client's
            # imports, the first publish and telemetry sample) shares the GIL with these calls.
            empty = {}
            for kind, d in drivers.items():
                rt = run_json([str(DRABENCH), "empty", "--socket", str(d.dra_socket), "--n", "500"])
                empty[kind] = latency_summary(rt["seconds"])
            results["empty_prepare_request"][storage] = empty
        finally:
            for d in drivers.values():
                d.stop()
    return results


def drabench_prepare(
    d: Driver, claims_file: Path, callers: int, rounds: int, stat: Sequence[Path] = ()
) -> dict[str, Any]:
    """`drabench prepare` against the driver: its output (every call's seconds), with `cpu`: the
    driver's process's (user, system) CPU seconds meanwhile, background threads included."""
    assert d.proc is not None
    before = process_cpu_times(d.proc.pid)
    argv = [
        str(DRABENCH),
        "prepare",
        f"--socket={d.dra_socket}",
        f"--claims={claims_file}",
        f"--concurrency={callers}",
        f"--rounds={rounds}",
    ]
    out = run_json(argv + ([f"--stat={','.join(map(str, stat))}"] if stat else []))
    after = process_cpu_times(d.proc.pid)
    d.check_alive()
    out["cpu"] = (after[0] - before[0], after[1] - before[1])
    return out


def drive(d: Driver, claims_file: Path, callers: int, rounds: int) -> dict[str, Any]:
    """One repetition: `drabench prepare` over every claim, `rounds` times; the driver's
    checkpoint size while every claim is prepared (ours: the checkpoint file and its journal)."""
    checkpoint = [d.plugins / d.driver / name for name in ("checkpoint.json", "checkpoint.journal")]
    out = drabench_prepare(d, claims_file, callers, rounds, checkpoint)
    n = len(out["prepare_seconds"])
    prepare, unprepare = latency_summary(out["prepare_seconds"]), latency_summary(out["unprepare_seconds"])
    return {
        "n": n,
        "claims_held": out["claims"],
        "checkpoint_bytes": sum((out.get("prepared_file_bytes") or {}).get(str(p), 0) for p in checkpoint),
        **{f"prepare_{k}": v for k, v in prepare.items() if k != "n"},
        **{f"unprepare_{k}": v for k, v in unprepare.items() if k != "n"},
        "prepare_claims_per_s": round(n / out["prepare_wall_seconds"], 1),
        "unprepare_claims_per_s": round(n / out["unprepare_wall_seconds"], 1),
        "cpu_ms_per_claim": round(sum(out["cpu"]) / n * 1e3, 2),  # a prepare and an unprepare; 10 ms ticks
    }


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="dra-bench-"))


if __name__ == "__main__":  # pragma: no cover - manual runs
    raise BenchError("run `python -m bench`")
