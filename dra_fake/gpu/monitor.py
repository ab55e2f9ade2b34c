"""The GPU plugin's monitoring side: this node's pods watched, the simulated readings taken every
few seconds (dra_fake.gpu.telemetry), written for the in-pod nvidia-smi and served as
dcgm-exporter's /metrics (dra_fake.gpu.dcgm). One source of truth: both show the same sample.

Threads: the pod informer (LIST + WATCH of pods with spec.nodeName = this node), the sampler
(every SAMPLE_INTERVAL, sooner when pods, faults or claims change; a failure is logged and retried,
dra_fake.core.retry.run_forever), and the HTTP server when a port is set.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client

from dra_fake.core.events import post_pod_event
from dra_fake.core.httpserve import BoundedHTTPServer
from dra_fake.core.informer import lister, run_informer
from dra_fake.core.retry import run_forever
from dra_fake.gpu import dcgm
from dra_fake.gpu.inventory import Inventory
from dra_fake.gpu.lending import Owners
from dra_fake.gpu.nvidia_smi import SHARE_LIVE_PREFIX, NvidiaSmi
from dra_fake.gpu.telemetry import MEMORY_UTIL_SHARE, Reading, ShareUse, Simulator
from dra_fake.gpu.workloads import ClaimHolding, users_by_device

log = logging.getLogger(__name__)

SAMPLE_INTERVAL = 5.0  # seconds between samples (dcgm-exporter collects every 30 s by default)
EVENT_REASON = "SimulatedLoadIgnored"  # the Event on a pod whose load annotation cannot be read
KIB = 1024  # NVML's PCIe throughput unit, KB/s, is 1024 bytes per second


def boot_time(stat: Path = Path("/proc/stat")) -> float:
    """The node's boot time (Unix seconds); now if unknown."""
    try:
        for line in stat.read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return time.time()


def live_state(reading: Reading, faults: Mapping[str, int]) -> dict[str, int | float | str]:
    """A GPU's live keys (docs/nvml.md, "Live keys") but `energy_mj` and
    `memory_used`, which GpuMonitor.sample adds: the reading, and its active faults as
    `fault_<kind>` (dra_fake.gpu.faults.add_gpu_state). A value the GPU does not report (memory
    temperature of a GDDR board) is left out; a lost GPU has nothing but its faults."""
    state: dict[str, int | float | str] = {f"fault_{k}": v for k, v in faults.items()}
    if reading.lost:
        return state
    values: dict[str, int | float | str | None] = {
        "utilization": reading.gpu_util or 0,
        "memory_util": reading.mem_copy_util or 0,
        "enc_util": reading.enc_util or 0,
        "dec_util": reading.dec_util or 0,
        "power_draw": f"{reading.power_w or 0:.2f}",
        "temperature": reading.gpu_temp or 0,
        "memory_temperature": reading.memory_temp,
        "sm_clock": reading.sm_clock or 0,
        "mem_clock": reading.mem_clock or 0,
        "video_clock": reading.video_clock,
        "pcie_tx": None if reading.pcie_tx_bytes is None else reading.pcie_tx_bytes // KIB,
        "pcie_rx": None if reading.pcie_rx_bytes is None else reading.pcie_rx_bytes // KIB,
        "pcie_replay": reading.pcie_replay,
        # the simulation runs no JPEG or optical-flow work, and a GPU stays in P0 (the idle H200
        # capture reads P0 too: its clocks idle inside the P-state)
        "jpg_util": 0,
        "ofa_util": 0,
        "pstate": 0,
    }
    return state | {k: v for k, v in values.items() if v is not None}


def share_live_state(share: ShareUse) -> dict[str, int | float | str]:
    """A share's live keys (docs/nvml.md#shares): its own utilization and memory used."""
    return {
        "utilization": share.utilization,
        "memory_util": round(share.utilization * MEMORY_UTIL_SHARE),
        "memory_used": share.memory_used_mib,
    }


class GpuMonitor:
    """Readings of one node's GPUs: sampled, written for nvidia-smi, served as /metrics."""

    def __init__(
        self,
        inventory: Inventory,
        holdings: Callable[[], list[ClaimHolding]],
        nvidia_smi: NvidiaSmi,
        hostname: str,
        driver: str,
        clock: Callable[[], float] = time.time,
        on_sample: Callable[[float, Mapping[str, Owners]], None] | None = None,
    ) -> None:
        self.inventory, self.holdings, self.nvidia_smi = inventory, holdings, nvidia_smi
        self.on_sample = on_sample  # told each sample's owners per GPU (idle-GPU lending)
        self.hostname, self.driver, self.clock = hostname, driver, clock
        self.simulator = Simulator(inventory, boot_time())
        self._pods: dict[str, dict[str, Any]] = {}
        # Until the pod informer's first list, a GPU's owners look idle (their pods are not known
        # yet): samples go to `on_sample` only after it, or a restarted plugin could lend a busy GPU.
        self._pods_listed = False
        self._faults: dict[str, dict[str, int]] = {}
        self._reported: dict[str, str] = {}  # pod -> load annotation error already logged
        self._api: client.ApiClient | None = None  # for the Events on pods with a bad annotation
        self._lock = threading.Lock()
        self._poke = threading.Event()
        self.text = ""  # the latest /metrics body
        self._restore()

    def _restore(self) -> None:
        """Continue the counters an earlier process of this plugin left in the live files."""
        for gpu in self.inventory.gpus:
            saved = self.nvidia_smi.read_live(gpu.uuid)
            try:
                energy = int(saved.get("energy_mj", ""))
                at = self.nvidia_smi.live_path(gpu.uuid).stat().st_mtime
            except (ValueError, OSError):
                continue
            self.simulator.restore(gpu.uuid, energy, at)

    # ---- inputs ---------------------------------------------------------------------------------

    def set_faults(self, gpus: Mapping[str, Mapping[str, int]]) -> None:
        """GPU UUID -> fault state (dra_fake.gpu.faults.Effects.gpus); sampled at once."""
        with self._lock:
            self._faults = {uuid: dict(state) for uuid, state in gpus.items()}
        self._poke.set()

    def set_pods(self, pods: list[dict[str, Any]]) -> None:
        with self._lock:
            self._pods = {p["metadata"]["uid"]: p for p in pods}
            self._pods_listed = True
        self._poke.set()

    def pod_event(self, kind: str, pod: dict[str, Any]) -> None:
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(pod["metadata"]["uid"], None)
            else:
                self._pods[pod["metadata"]["uid"]] = pod
        self._poke.set()

    # ---- the sample -----------------------------------------------------------------------------

    def sample(self) -> str:
        """Take one sample: write the nvidia-smi live files, render and keep the /metrics body."""
        with self._lock:
            pods, faults, listed = list(self._pods.values()), dict(self._faults), self._pods_listed
        holdings = self.holdings()
        users, errors = users_by_device(pods, holdings)
        for pod, error in errors.items():
            if self._reported.get(pod) != error:
                log.warning("simulated load annotation ignored", extra={"pod": pod, "error": error})
                self._post_event(pods, pod, error)
        self._reported = errors
        dynamic = {d.name: d.uuid for c in holdings for d in c.devices if d.uuid}
        now = self.clock()
        readings = self.simulator.sample(now, users, faults, dynamic)
        live: dict[str, dict[str, int | float | str]] = {}
        for entity, reading in readings:
            gpu = entity.gpu.uuid
            if gpu not in live:  # the GPU's values: any of its entities has them
                state = live_state(reading, faults.get(gpu, {}))
                live[gpu] = state | {"energy_mj": self.simulator.energy_mj(gpu), "memory_used": 0}
            if entity.is_mig:
                live[entity.mig_uuid] = {"mig_memory_used": reading.fb_used or 0}
            live[gpu]["memory_used"] = int(live[gpu]["memory_used"]) + (reading.fb_used or 0)
        shares = self.simulator.share_uses(now, users, dynamic)
        for share in shares:
            live[f"{SHARE_LIVE_PREFIX}{share.share_id}"] = share_live_state(share)
        self.nvidia_smi.write_live(live)
        if self.on_sample is not None and listed:  # a lend view's users are not its GPU's: owners only
            held = {d.name for c in holdings for d in c.devices}
            self.on_sample(
                now,
                {e.device: Owners(e.device in held, r.gpu_util or 0) for e, r in readings if not e.is_mig},
            )
        by_share = {(u.device, u.share_id): u for u in shares if u.share_id is not None}
        text = dcgm.render(
            [(self.hostname, e, r, users.get(e.device, [])) for e, r in readings],
            self.driver,
            shares=by_share,
        )
        self.text = text
        return text

    def _post_event(self, pods: list[dict[str, Any]], key: str, error: str) -> None:
        """A Warning Event on the pod whose annotation was ignored (its owner sees why)."""
        if self._api is None:
            return
        for pod in pods:
            meta = pod.get("metadata") or {}
            if f"{meta.get('namespace', '')}/{meta.get('name', '')}" == key:
                post_pod_event(
                    self._api,
                    meta.get("namespace", ""),
                    meta.get("name", ""),
                    meta.get("uid", ""),
                    self.hostname,
                    reason=EVENT_REASON,
                    message=f"simulated load annotation ignored, the default load is used: {error}",
                    component=f"{self.driver}-kubelet-plugin",
                )
                return

    # ---- threads --------------------------------------------------------------------------------

    def start(self, stop: threading.Event, api: client.ApiClient | None, node: str, port: int) -> None:
        """The sampler, the pod informer (with `api`) and the /metrics server (port >= 0)."""
        if api is None:  # no pods to list: what set_pods says is all there is
            with self._lock:
                self._pods_listed = True
        threading.Thread(
            target=run_forever,
            args=("GPU telemetry", self.sample, stop, SAMPLE_INTERVAL, self._poke),
            name="telemetry",
            daemon=True,
        ).start()
        if api is not None:
            self._api = api
            threading.Thread(
                target=run_informer,
                args=(
                    stop,
                    "pods",
                    lister(api, "/api/v1/pods"),
                    {"field_selector": f"spec.nodeName={node}"},
                    self.set_pods,
                    self.pod_event,
                ),
                name="pods",
                daemon=True,
            ).start()
        if port >= 0:
            start_metrics_server(lambda: self.text, port, stop)


def start_metrics_server(
    body: Callable[[], str], port: int, stop: threading.Event, addr: str | None = None
) -> None:
    """serve_metrics in a thread until `stop`."""
    server = serve_metrics(body, port, addr)
    server.start(stop)
    log.info("dcgm-exporter metrics served", extra={"port": server.server_port})


def serve_metrics(body: Callable[[], str], port: int, addr: str | None = None) -> BoundedHTTPServer:
    """dcgm-exporter's endpoints: /metrics (`body()`, the latest sample), /health."""
    return BoundedHTTPServer(
        {"/metrics": lambda: (200, body()), "/health": lambda: (200, "OK")},
        port,
        addr,
        content_type=dcgm.CONTENT_TYPE,
        name="dcgm-metrics",
    )
