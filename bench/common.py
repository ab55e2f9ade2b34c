"""Shared helpers of the benchmarks: statistics, machine facts, processes, API objects."""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.core.kube import get_json, kube_configuration
from dra_fake.fleet.core import NodeTemplate

if TYPE_CHECKING:
    from e2e.localcluster import LocalCluster

REPO = Path(__file__).resolve().parents[1]
REFDRIVER = REPO / "bench" / "refdriver"
REF_BIN = REFDRIVER / "bin" / "dra-example-kubeletplugin"
DRABENCH = REFDRIVER / "bin" / "drabench"
CONFIGS = REPO / "bench" / "configs"
T = TypeVar("T")


class BenchError(RuntimeError):
    """Something did not work: the benchmark fails (timings never make it fail)."""


# ---- statistics ------------------------------------------------------------------------------


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (p in 0..100) of a non-empty sample."""
    if not values:
        raise BenchError("percentile of an empty sample")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * p // 100))  # ceil(n * p / 100), at least 1
    return ordered[int(rank) - 1]


def latency_summary(seconds: Sequence[float]) -> dict[str, Any]:
    """p50/p95/p99/mean in milliseconds."""
    return {
        "n": len(seconds),
        "p50_ms": round(percentile(seconds, 50) * 1000, 3),
        "p95_ms": round(percentile(seconds, 95) * 1000, 3),
        "p99_ms": round(percentile(seconds, 99) * 1000, 3),
        "mean_ms": round(sum(seconds) / len(seconds) * 1000, 3),
    }


def spread(reps: Sequence[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Figures measured in several repetitions: for each key, the median and the min and max."""
    out = {}
    for key in reps[0]:
        values = sorted(r[key] for r in reps)
        mid = len(values) // 2
        median = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
        out[key] = {"median": round(median, 3), "min": values[0], "max": values[-1]}
    return out


# ---- machine ---------------------------------------------------------------------------------


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


CpuTicks = tuple[int, int]  # (steal, total) clock ticks of every CPU since boot


def cpu_ticks() -> CpuTicks:
    """From /proc/stat: the ticks the hypervisor gave other guests while this one wanted to run
    (steal), and all ticks (guest time is already in user time, so it is not added again)."""
    try:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    except (OSError, ValueError):
        return 0, 0
    return (ticks[7] if len(ticks) == 8 else 0), sum(ticks)


def steal_percent(start: CpuTicks, end: CpuTicks) -> float:
    """The share of the machine's CPU time taken by the hypervisor between two readings: a
    neighbour's load, which slows both drivers of a comparison but moves the absolute figures."""
    total = end[1] - start[1]
    return round(100 * (end[0] - start[0]) / total, 1) if total > 0 else 0.0


def process_cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a running process, from /proc (0 if it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0, 0.0
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process (0 if it is gone)."""
    return sum(process_cpu_times(pid))


def children_cpu_seconds() -> float:
    """User + system CPU seconds of this process's waited-for children so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cmd(argv: list[str]) -> str:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False).stdout.strip()
    except OSError:
        return ""


def machine_facts() -> dict[str, Any]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kib = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kib = 0
    gomod = (REFDRIVER / "go.mod").read_text()
    ref_version = next(
        (line.split()[-1] for line in gomod.splitlines() if "sigs.k8s.io/dra-example-driver " in line), "?"
    )
    import grpc
    import kubernetes

    return {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu_model": cpu,
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "python": sys.version.split()[0],
        "go": _cmd(["go", "env", "GOVERSION"]),
        "grpcio": grpc.__version__,
        "kubernetes_client": kubernetes.__version__,
        "kubernetes_control_plane": (REPO / "e2e" / "cluster" / "K8S_VERSION").read_text().strip(),
        "reference_driver": f"sigs.k8s.io/dra-example-driver {ref_version}",
        **tree_facts(REPO, "git"),
        **(tree_facts(Path(other), "ours_src") if (other := os.environ.get(OURS_SRC_ENV)) else {}),
        "loadavg_start": loadavg(),
    }


OURS_SRC_ENV = "DRA_BENCH_OURS_SRC"  # run our plugin from another checkout (a before/after comparison)
RUN_WRITES = ("bench/results", "docs/benchmarks.md", "docs/benchmarks/history.svg")  # by a full run


def tree_facts(tree: Path, prefix: str) -> dict[str, Any]:
    """The commit of a checkout and whether it differs from it (what a run writes does not count:
    bench/results, and docs/benchmarks.md's table and plot, bench/summary.py)."""
    status = _cmd(
        ["git", "-C", str(tree), "status", "--porcelain", "--", ".", *(f":!{p}" for p in RUN_WRITES)]
    )
    return {
        f"{prefix}_commit": _cmd(["git", "-C", str(tree), "rev-parse", "--short=12", "HEAD"]),
        f"{prefix}_dirty": bool(status),
    }


# ---- processes -------------------------------------------------------------------------------


def run_json(argv: list[str], timeout: float = 1800, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Run a command printing one JSON object (`env`: variables beside this process's); a
    non-zero exit is a benchmark error."""
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, **env} if env else None,
    )
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(argv[:3])}... exited {proc.returncode}: {proc.stderr.strip()[-2000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise BenchError(f"{argv[0]}: no JSON on stdout; stderr: {proc.stderr.strip()[-2000:]}")
    result = json.loads(lines[-1])
    if not isinstance(result, dict):
        raise BenchError(f"{argv[0]}: expected a JSON object")
    return result


def poll(
    what: str,
    fn: Callable[[], T | None],
    timeout: float,
    every: float = 0.02,
    alive: Callable[[], None] | None = None,
) -> T:
    """Call fn until it returns a truthy value (fast polling: the poll interval bounds the
    resolution of the start-up timings). `alive` raises when the awaited process died."""
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        if alive is not None:
            alive()
        try:
            value = fn()
        except Exception as err:  # the thing may not be up yet
            last = err
        else:
            if value:
                return value
            last = value
        if time.monotonic() > deadline:
            raise BenchError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(every)


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise BenchError(f"no VmRSS for pid {pid}")


# ---- API objects -----------------------------------------------------------------------------


def ensure_node(core: client.CoreV1Api, name: str, fleet: str = "bench") -> str:
    """A Ready, untainted Node object without a kubelet (the benchmark drives the plugins)."""
    from dra_fake.fleet.nodes import create_untainted_node

    node = create_untainted_node(core.api_client, name, NodeTemplate(fleet=fleet))
    return str(node["metadata"]["uid"])


def any_left(api: Any, path: str, **query: str) -> bool:
    """Whether the collection at `path` (filtered by `query`) still has an object."""
    return bool(get_json(api, path, {**query, "limit": 1})["items"])


def ensure_namespace(core: client.CoreV1Api, name: str) -> None:
    try:
        body: Any = {"metadata": {"name": name}}
        core.create_namespace(body)
    except ApiException as err:
        if err.status != 409:
            raise


BENCH_CONNECTIONS = 32  # the bench's threads making requests at once (16 creators, watches, pollers)


def cluster_api(cluster: LocalCluster) -> client.ApiClient:
    """The bench's client, with a connection pool for all its threads: past the pool's size each
    request opened a TLS connection and dropped it, load the API server took from what is measured."""
    configuration = kube_configuration(str(cluster.kubeconfig))  # no request timeouts: long deletions
    configuration.connection_pool_maxsize = BENCH_CONNECTIONS
    return client.ApiClient(configuration)
