"""One kubelet plugin process of the benchmarks on its own (kubelet-less) node: ours or the
reference driver, started with the same flags, its slices published and awaited (bench/prepare.py,
burst, profile, publish, sharing)."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from kubernetes import client

from bench.common import CONFIGS, OURS_SRC_ENV, REF_BIN, REPO, ensure_node, poll
from dra_fake.core.kube import release, request
from dra_fake.gpu.inventory import load_inventory
from dra_fake.gpu.slices import desired_slices
from e2e.localcluster import LocalCluster
from e2e.localcluster.processes import Process, spawn

OURS, REF = "gpu.nvidia.com", "gpu.example.com"
# Our plugin's --cpu-affinity in the benchmark: one, as measured since the sixteenth round
# (docs/benchmarks/history.md); the chart's and CLI's default is inherit. CPU_AFFINITY=inherit make bench
# measures the default.
CPU_AFFINITY = os.environ.get("CPU_AFFINITY", "one")
# Our plugin's --device-status: false, like for like with the reference, which writes no device
# status unless --gpu-device-status is given (docs/benchmarks.md). What writing it costs is the
# machinery trial's devicestatus row; DEVICE_STATUS=true make bench measures the chart's default.
DEVICE_STATUS = os.environ.get("DEVICE_STATUS", "false")
DEVICES = 128  # per node: 16 concurrent 8-device claims hold distinct devices


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
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.extra_args = list(extra_args)  # ours: flags beside the common ones
        self.env = dict(env or {})  # ours: variables beside the common ones (bench/machinery.py)
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
            env["DEVICE_STATUS"] = DEVICE_STATUS
            env.update(self.env)
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
