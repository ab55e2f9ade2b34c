"""`dra-fake fleet --dcgm-exporter-port`: one dcgm-exporter-compatible endpoint for every fleet
node's GPUs (each sample's Hostname names its node), so dashboards over a simulated fleet work.
Fleet nodes run no workloads: their GPUs idle, and show their GpuFaults (temperature, Xid, lost)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from dra_fake.core.retry import run_forever
from dra_fake.gpu import dcgm
from dra_fake.gpu.inventory import InventoryConfig, build_inventory
from dra_fake.gpu.monitor import boot_time, start_metrics_server
from dra_fake.gpu.profiles import GpuProfile
from dra_fake.gpu.telemetry import Simulator

log = logging.getLogger(__name__)

FLEET_SAMPLE_INTERVAL = 30.0  # dcgm-exporter's default collection interval


class FleetMetrics:
    def __init__(
        self,
        config: InventoryConfig,
        profiles: Mapping[str, GpuProfile],
        driver: str,
        nodes: Callable[[], list[str]],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.config, self.profiles, self.driver, self.nodes, self.clock = (
            config,
            profiles,
            driver,
            nodes,
            clock,
        )
        self._simulators: dict[str, Simulator] = {}
        self._faults: dict[str, dict[str, dict[str, int]]] = {}
        self._lock = threading.Lock()
        self._boot = boot_time()
        self._wake = threading.Event()
        self.text = ""

    def set_faults(self, node: str, gpus: Mapping[str, Mapping[str, int]]) -> None:
        with self._lock:
            self._faults[node] = {uuid: dict(state) for uuid, state in gpus.items()}
        self._wake.set()  # show it now, not at the next interval

    def sample(self) -> str:
        now = self.clock()
        samples: list[dcgm.Sample] = []
        nodes = self.nodes()
        for node in nodes:
            sim = self._simulators.get(node)
            if sim is None:
                inventory = build_inventory(self.config, node, self.profiles, source=f"node {node}")
                sim = self._simulators[node] = Simulator(inventory, self._boot)
            with self._lock:
                faults = self._faults.get(node, {})
            samples += [(node, e, r, ()) for e, r in sim.sample(now, {}, faults, {})]
        for gone in set(self._simulators) - set(nodes):
            del self._simulators[gone]
        self.text = dcgm.render(samples, self.driver)
        return self.text

    def start(self, stop: threading.Event, port: int) -> None:
        threading.Thread(
            target=run_forever,
            args=("fleet metrics", self.sample, stop, FLEET_SAMPLE_INTERVAL, self._wake),
            name="fleet-metrics",
            daemon=True,
        ).start()
        start_metrics_server(lambda: self.text, port, stop)
