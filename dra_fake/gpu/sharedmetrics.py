"""One dcgm-exporter-compatible endpoint for the GPUs of many nodes served by one process (fleet
mode, `dra-fake fleet --dcgm-exporter-port`): each sample's Hostname names its node, so dashboards
over a simulated fleet work. Its nodes run no workloads: their GPUs idle, and show their
GpuFaults (temperature, Xid, lost). The telemetry service's shared part (dra_fake.gpu.services)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from dra_fake.core.retry import run_forever
from dra_fake.gpu import dcgm
from dra_fake.gpu.inventory import Inventory
from dra_fake.gpu.monitor import boot_time, start_metrics_server
from dra_fake.gpu.telemetry import Simulator

log = logging.getLogger(__name__)

SHARED_SAMPLE_INTERVAL = 30.0  # dcgm-exporter's default collection interval


class SharedMetrics:
    def __init__(self, driver: str, clock: Callable[[], float] = time.time) -> None:
        self.driver, self.clock = driver, clock
        self._nodes: dict[str, Callable[[], Inventory]] = {}
        self._simulators: dict[str, Simulator] = {}
        self._faults: dict[str, dict[str, dict[str, int]]] = {}
        self._lock = threading.Lock()
        self._boot = boot_time()
        self._wake = threading.Event()
        self.text = ""

    def add(self, node: str, inventory: Callable[[], Inventory]) -> None:
        """Sample `node`'s GPUs from now on (`inventory` is asked at its first sample)."""
        with self._lock:
            self._nodes[node] = inventory

    def remove(self, node: str) -> None:
        with self._lock:
            self._nodes.pop(node, None)
            self._faults.pop(node, None)

    def set_faults(self, node: str, gpus: Mapping[str, Mapping[str, int]]) -> None:
        with self._lock:
            self._faults[node] = {uuid: dict(state) for uuid, state in gpus.items()}
        self._wake.set()  # show it now, not at the next interval

    def sample(self) -> str:
        now = self.clock()
        samples: list[dcgm.Sample] = []
        with self._lock:
            nodes = sorted(self._nodes.items())
        for node, inventory in nodes:
            sim = self._simulators.get(node)
            if sim is None:
                sim = self._simulators[node] = Simulator(inventory(), self._boot)
            with self._lock:
                faults = self._faults.get(node, {})
            samples += [(node, e, r, ()) for e, r in sim.sample(now, {}, faults, {})]
        for gone in set(self._simulators) - {node for node, _ in nodes}:
            del self._simulators[gone]
        self.text = dcgm.render(samples, self.driver)
        return self.text

    def start(self, stop: threading.Event, port: int) -> None:
        threading.Thread(
            target=run_forever,
            args=("shared GPU metrics", self.sample, stop, SHARED_SAMPLE_INTERVAL, self._wake),
            name="shared-metrics",
            daemon=True,
        ).start()
        start_metrics_server(lambda: self.text, port, stop)
