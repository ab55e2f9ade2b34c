"""Prepare/unprepare side by side: our plugin and the reference driver, same client, same API
server, identical claims; plus the floor of this machine."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from bench.common import (
    CONFIGS,
    DRABENCH,
    OURS_SRC_ENV,
    REF_BIN,
    REPO,
    BenchError,
    ensure_namespace,
    ensure_node,
    latency_summary,
    poll,
    process_cpu_times,
    run_json,
    spread,
)
from dra_fake.core.atomic import atomic_write
from dra_fake.core.kube import kube_configuration, release, request
from dra_fake.gpu.inventory import load_inventory
from dra_fake.gpu.slices import desired_slices
from e2e.localcluster import LocalCluster
from e2e.localcluster.processes import Process, spawn

NAMESPACE = "bench-prepare"
OURS, REF = "gpu.nvidia.com", "gpu.example.com"
# Our plugin's --cpu-affinity in the benchmark: one, as measured since the sixteenth round
# (docs/benchmarks/history.md); the chart's and CLI's default is inherit. CPU_AFFINITY=inherit make bench
# measures the default.
CPU_AFFINITY = os.environ.get("CPU_AFFINITY", "one")
DEVICES = 128  # 16 concurrent 8-device claims hold distinct devices
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


class Driver:
    """One kubelet plugin process on its own (kubelet-less) node."""

    def __init__(
        self,
        cluster: LocalCluster,
        kind: str,
        node: str,
        work: Path,
        src: Path | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        self.cluster = cluster
        self.extra_args = list(extra_args)  # ours: flags beside the common ones
        # Ours: the checkout it runs from; DRA_BENCH_OURS_SRC, else this one (a before/after run).
        self.src = (src or Path(os.environ.get(OURS_SRC_ENV) or REPO)) if kind == "ours" else REPO
        self.kind = kind
        self.node = node
        self.dir = work / node
        self.driver = OURS if kind == "ours" else REF
        self.proc: Process | None = None

    @property
    def registrar(self) -> Path:
        return self.dir / "plugins_registry"

    @property
    def plugins(self) -> Path:
        return self.dir / "plugins"

    @property
    def dra_socket(self) -> Path:
        return self.plugins / self.driver / "dra.sock"

    def argv(self, config: Path | None = None, num_devices: int = 8) -> list[str]:
        common = [
            f"--node-name={self.node}",
            f"--kubeconfig={self.cluster.kubeconfig}",
            f"--cdi-root={self.dir / 'cdi'}",
            f"--kubelet-registrar-directory-path={self.registrar}",
            f"--kubelet-plugins-directory-path={self.plugins}",
        ]
        if self.kind == "ours":
            return [sys.executable, "-m", "dra_fake", "gpu-kubelet-plugin", *common, *self.extra_args] + (
                [f"--config={config}"] if config else []
            )
        # The reference driver's client-go defaults (5 QPS, burst 10) would throttle its claim
        # GETs; lifted so that both drivers are measured, not a client-side rate limiter.
        return [
            str(REF_BIN),
            *common,
            f"--num-devices={num_devices}",
            "--kube-api-qps=1000",
            "--kube-api-burst=1000",
        ]

    def start(self, config: Path | None = None, num_devices: int = 8) -> float:
        """Start the process; returns its start time (monotonic)."""
        for d in (self.registrar, self.plugins, self.dir / "cdi"):
            d.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        env = {"PYTHONPATH": str(self.src)} if self.src != REPO else {}
        if self.kind == "ours":  # an env, not a flag: older trees of a before/after run ignore it
            env["CPU_AFFINITY"] = CPU_AFFINITY
        self.proc = spawn(
            f"bench-{self.node}", self.argv(config, num_devices), self.cluster.logs, env=env, cwd=self.src
        )
        return t0

    def slices(self, custom: client.CustomObjectsApi) -> list[dict[str, Any]]:
        """This driver's ResourceSlices of its node."""
        objs: Any = custom.list_cluster_custom_object(
            "resource.k8s.io",
            "v1",
            "resourceslices",
            field_selector=f"spec.nodeName={self.node},spec.driver={self.driver}",
        )
        return list(objs["items"])

    def pool_shape(self, config: Path | None, num_devices: int) -> tuple[int, int]:
        """The slices and devices the driver publishes for its node (ours: per `config`; the
        reference: one slice of `num_devices`)."""
        if self.kind != "ours":
            return 1, num_devices
        assert config is not None
        desired = desired_slices(load_inventory(config, self.node), self.driver, (1, 37))
        return len(desired), sum(len(s.devices) for s in desired)

    def wait_published(
        self, custom: client.CustomObjectsApi, config: Path | None, num_devices: int, timeout: float = 120
    ) -> None:
        want, _ = self.pool_shape(config, num_devices)
        poll(
            f"{self.kind} slices of {self.node} published",
            lambda: pool_complete(self.slices(custom), want),
            timeout,
            0.1,
            alive=self.check_alive,
        )

    def delete_slices(self, api: client.ApiClient, custom: client.CustomObjectsApi) -> None:
        """Every slice of the node, so that the next start publishes from nothing."""
        query = {"field_selector": f"spec.nodeName={self.node}"}
        release(request(api, "DELETE", "/apis/resource.k8s.io/v1/resourceslices", query=query))
        poll(f"slices of {self.node} deleted", lambda: not self.slices(custom), 60, 0.1)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
            self.proc = None

    def check_alive(self) -> None:
        if self.proc is not None:
            self.proc.check_alive()


def pool_complete(items: list[dict[str, Any]], want: int) -> bool:
    """The whole pool at one generation, `want` slices."""
    if len(items) != want:
        return False
    generations = {s["spec"]["pool"]["generation"] for s in items}
    return len(generations) == 1 and all(s["spec"]["pool"]["resourceSliceCount"] == want for s in items)


def _claim(name: str, driver: str, node: str, devices: list[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    spec = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "labels": {"dra-fake.dev/bench": "prepare"}},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": driver,
                            "allocationMode": "ExactCount",
                            "count": len(devices),
                        },
                    }
                ]
            }
        },
    }
    status = {
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "gpu", "driver": driver, "pool": node, "device": d} for d in devices
                    ]
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                    ]
                },
            }
        }
    }
    return spec, status


def make_claims(
    custom: client.CustomObjectsApi, driver: str, node: str, per_claim: int
) -> list[dict[str, str]]:
    """DEVICES / per_claim allocated claims on `node`, together holding every device once."""
    refs = []
    for i in range(DEVICES // per_claim):
        name = f"{node}-d{per_claim}-{i:03d}"
        devices = [f"gpu-{i * per_claim + j}" for j in range(per_claim)]
        refs.append(create_allocated(custom, name, *_claim(name, driver, node, devices)))
    return refs


def create_allocated(
    custom: client.CustomObjectsApi, name: str, spec: dict[str, Any], status: dict[str, Any]
) -> dict[str, str]:
    """The claim created (again, if one of that name is left from an earlier run) with `status`
    as its allocation, as the scheduler would write it; its reference for drabench."""
    obj: Any
    try:
        obj = custom.create_namespaced_custom_object(
            "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", spec
        )
    except ApiException as err:
        if err.status != 409:
            raise
        custom.delete_namespaced_custom_object("resource.k8s.io", "v1", NAMESPACE, "resourceclaims", name)
        obj = poll(
            f"claim {name} re-created",
            lambda: custom.create_namespaced_custom_object(
                "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", spec
            ),
            30,
            0.2,
        )
    custom.patch_namespaced_custom_object_status(
        "resource.k8s.io", "v1", NAMESPACE, "resourceclaims", name, status
    )
    return {"uid": obj["metadata"]["uid"], "namespace": NAMESPACE, "name": name}


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


def start_all(api: client.ApiClient, drivers: Collection[Driver]) -> None:
    """Each driver on its node, from no slices; returns once every one has published its pool and
    serves its socket: our plugin's background start (the client's imports, the first publish)
    would otherwise share the GIL with the first calls measured."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for d in drivers:
        ensure_node(core, d.node)
        d.delete_slices(api, custom)
        d.start(CONFIGS / "h100x128.yaml", DEVICES)
    for d in drivers:
        d.wait_published(custom, CONFIGS / "h100x128.yaml", DEVICES)
        poll(f"{d.kind} DRA socket on {d.node}", d.dra_socket.exists, 120, alive=d.check_alive)


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


BENCH_CONNECTIONS = 32  # the bench's threads making requests at once (16 creators, watches, pollers)


def cluster_api(cluster: LocalCluster) -> client.ApiClient:
    """The bench's client, with a connection pool for all its threads: past the pool's size each
    request opened a TLS connection and dropped it, load the API server took from what is measured."""
    configuration = kube_configuration(str(cluster.kubeconfig))  # no request timeouts: long deletions
    configuration.connection_pool_maxsize = BENCH_CONNECTIONS
    return client.ApiClient(configuration)


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="dra-bench-"))


if __name__ == "__main__":  # pragma: no cover - manual runs
    raise BenchError("run `python -m bench`")
