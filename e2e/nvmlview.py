"""What NVML programs in a container print, next to the node's dcgm-exporter metrics.

The consumers (docs/nvml.md): NVIDIA's Python bindings through hack/nvml/probe.py, gpustat
(`--json`), nvitop (`--once`, its one-shot table) and the go-nvml program hack/nvml/gonvml. On kind
they run in a pod of the consumers image (hack/kind/nvml-consumers); on the harness, which runs no
containers, the same programs run on the host against the container's mounts (the dev extra's
wheels, gonvml built once per session), with the mounted library first on the library path.

Each consumer's output is parsed into `GpuView`s, one per GPU it printed, and compared with the
node's metrics sample (`MetricsGpu`): the plugin writes the live files and renders /metrics from
the same sample (dra_fake.gpu.monitor), so a consumer run between two scrapes shows one of them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from e2e.harnessbed import HarnessContainer
from e2e.testbed import Container, Exec

REPO = Path(__file__).resolve().parents[1]
MIB = 1 << 20
CONSUMERS = ("probe", "gpustat", "nvitop", "gonvml")
# in the consumers image (hack/kind/nvml-consumers/Dockerfile): its venv's bin is on PATH
IN_IMAGE = {
    "probe": ["python3", "/opt/nvml-consumers/probe.py"],
    "gpustat": ["gpustat", "--json"],
    "nvitop": ["nvitop", "--once"],
    "gonvml": ["gonvml"],
    "python": ["python3"],
}
# The go-nvml program as the harness runs it: built here (build/ is ignored), once per session.
GONVML_BUILD = REPO / "build" / "e2e" / "gonvml"


@functools.cache
def gonvml_binary() -> str:
    env = dict(os.environ, CGO_ENABLED="1", CGO_CFLAGS="-Wno-deprecated-declarations")
    build = subprocess.run(
        ["go", "build", "-trimpath", "-o", str(GONVML_BUILD), "."],
        cwd=REPO / "hack" / "nvml" / "gonvml",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, f"go build hack/nvml/gonvml: {build.stderr}"
    return str(GONVML_BUILD)


def on_host(name: str) -> list[str]:
    """A consumer's command line on the harness host."""
    if name == "gonvml":
        return [gonvml_binary()]
    if name == "probe":
        return [sys.executable, str(REPO / "hack" / "nvml" / "probe.py")]
    if name == "python":
        return [sys.executable]
    return [sys.executable, "-m", name, *IN_IMAGE[name][1:]]


def run_consumer(view: Container, name: str, *args: str) -> Exec:
    """Run a consumer (CONSUMERS, or "python" with arguments) in the container."""
    if isinstance(view, HarnessContainer):
        return view.run_host(*on_host(name), *args)
    return view.run(*IN_IMAGE[name], *args)


# ---- a program left running in the container ----------------------------------------------------


class Background:
    """A consumer started in the container and left running (an NVML event wait), its output read
    while it runs: on kind a detached process writing a file in the container; on the harness a
    host process of the container's view (HarnessContainer.host_view). A context manager: leaving
    it ends the process."""

    OUTPUT = "/tmp/consumer.out"

    def __init__(self, view: Container, name: str, *args: str) -> None:
        self.view = view
        self._stack = contextlib.ExitStack()
        self._proc: subprocess.Popen[bytes] | None = None
        if isinstance(view, HarnessContainer):
            root, env = self._stack.enter_context(view.host_view())
            self._out = root / "consumer.out"
            with self._out.open("w") as out:
                self._proc = subprocess.Popen(
                    [*on_host(name), *args], env=env, stdout=out, stderr=subprocess.STDOUT
                )
        else:
            command = " ".join(shlex.quote(a) for a in [*IN_IMAGE[name], *args])
            started = view.run("sh", "-c", f"trap '' HUP; {command} > {self.OUTPUT} 2>&1 &")
            assert started.code == 0, started.output

    def output(self) -> str:
        if self._proc is not None:
            return self._out.read_text()
        return self.view.run("cat", self.OUTPUT).output

    def __enter__(self) -> Background:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._stack.close()  # on kind the pod's deletion ends the process


# An NVML event wait as a monitoring agent does it: every device of the container registered for
# Xid critical errors, then one wait; prints "registered", then the event (or the error) as JSON.
XID_WAIT = """
import json, sys
import pynvml as N
N.nvmlInit()
events = N.nvmlEventSetCreate()
for i in range(N.nvmlDeviceGetCount()):
    N.nvmlDeviceRegisterEvents(N.nvmlDeviceGetHandleByIndex(i), N.nvmlEventTypeXidCriticalError, events)
print("registered", flush=True)
try:
    e = N.nvmlEventSetWait_v2(events, int(sys.argv[1]))
    print(json.dumps({"uuid": N.nvmlDeviceGetUUID(e.device), "type": e.eventType, "xid": e.eventData}))
except N.NVMLError as err:
    print(json.dumps({"error": str(err)}))
"""


# ---- what a consumer printed -----------------------------------------------------------------------


@dataclass(frozen=True)
class MigView:
    gi: int
    ci: int | None = None
    profile: str | None = None  # 1g.10gb
    uuid: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None


@dataclass(frozen=True)
class GpuView:
    """One GPU as a consumer printed it; None: the consumer does not print that value."""

    bus_id: str | None = None
    uuid: str | None = None
    name: str | None = None
    lost: bool = False
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None  # without the driver's reservation (NVML v2 `used`)
    memory_free_mib: int | None = None  # whole MiB of the free bytes
    utilization: int | None = None
    temperature: int | None = None
    power_w: float | None = None
    power_step: float = 0.001  # the resolution the consumer prints power with
    migs: tuple[MigView, ...] = ()


def json_of(text: str) -> Any:
    """The one JSON object a consumer printed (a warning on stderr may come before or after it)."""
    return json.loads(text[text.index("{") : text.rindex("}") + 1])


def parse_probe(text: str) -> list[GpuView]:
    result = json_of(text)
    views = []
    for dev in result["devices"]:
        if dev.get("handle") == "ERR NVML_ERROR_GPU_IS_LOST":
            views.append(GpuView(lost=True))
            continue
        v = dev["values"]
        mem = v["MemoryInfo_v2"]
        util = v["UtilizationRates"]
        views.append(
            GpuView(
                bus_id=v["PciInfo"]["busId"],
                uuid=v["UUID"],
                name=v["Name"],
                memory_total_mib=mem["total"] // MIB,
                memory_used_mib=mem["used"] // MIB,
                memory_free_mib=mem["free"] // MIB,
                utilization=util["gpu"] if isinstance(util, dict) else None,
                temperature=v["Temperature.gpu"],
                power_w=v["PowerUsage"] / 1000,
                migs=tuple(
                    MigView(
                        gi=m["GpuInstanceId"],
                        ci=m["ComputeInstanceId"],
                        profile=m["Name"].rsplit(" ", 1)[-1],
                        uuid=m["UUID"],
                        memory_total_mib=m["MemoryInfo_v2"]["total"] // MIB,
                        memory_used_mib=m["MemoryInfo_v2"]["used"] // MIB,
                    )
                    for m in dev.get("mig") or []
                ),
            )
        )
    return views


def parse_gpustat(text: str) -> list[GpuView]:
    views = []
    for gpu in json_of(text)["gpus"]:
        if gpu["name"] == "((GPU is lost))":
            views.append(GpuView(lost=True))
            continue
        views.append(
            GpuView(
                uuid=gpu["uuid"],
                name=gpu["name"],
                memory_total_mib=gpu["memory.total"],
                memory_used_mib=gpu["memory.used"],
                utilization=gpu["utilization.gpu"],
                temperature=gpu["temperature.gpu"],
                power_w=gpu["power.draw"],
                power_step=1,
            )
        )
    return views


def parse_gonvml(text: str) -> list[GpuView]:
    report = json_of(text)
    return [
        GpuView(
            bus_id=d["busId"],
            uuid=d["uuid"],
            name=d["name"],
            memory_total_mib=d["memoryTotal"] // MIB,
            memory_free_mib=d["memoryFree"] // MIB,
            utilization=None if "utilization" in (d.get("errors") or {}) else d["gpuUtil"],
            temperature=d["temperature"],
            power_w=d["powerMilliW"] / 1000,
            migs=tuple(
                MigView(
                    gi=m["gi"],
                    ci=m["ci"],
                    profile=m["name"].rsplit(" ", 1)[-1],
                    uuid=m["uuid"],
                    memory_total_mib=m["memoryTotal"] // MIB,
                )
                for m in d.get("migDevices") or []
            ),
        )
        for d in report["devices"]
    ]


# nvitop --once: per GPU two table rows, then a row per MIG device:
# │   0  H100 SXM5 80GB        On │ 00000000:18:00.0 Off │ Disabled           0 │
# │ N/A   33C   P0     77W / 700W │  10240MiB / 79.65GiB │     75%      Default │
# │ 1:0      1g.18gb @ GI/CI: 7/0 │   1024MiB / 16384MiB │ BAR1:       0B /  0% │
NVITOP_GPU = re.compile(r"^│\s+(\d+)\s+(.*?)\s+\S+\s+│\s+(\S+)\s+\S+\s+│")
NVITOP_LOST = re.compile(r"^│\s+(\d+)\s+ERROR: GPU is Lost")
NVITOP_READINGS = re.compile(
    r"^│\s+\S+\s+(\d+)C\s+P\d+\s+(\d+)W\s+/\s+\d+W\s+│\s+(\S+)\s+/\s+(\S+)\s+│\s+(\S+)\s"
)
NVITOP_MIG = re.compile(r"^│\s+\d+:\d+\s+(\S+)\s+@\s+GI/CI:\s*(\d+)/(\d+)\s+│\s+(\S+)\s+/\s+(\S+)\s+│")
SIZE = re.compile(r"^(\d+(?:\.\d+)?)(B|KiB|MiB|GiB)$")


def mib(size: str) -> int:
    """nvitop's human size (bytes2human) in MiB; sizes in GiB have two decimals only."""
    m = SIZE.match(size)
    assert m, f"not an nvitop size: {size}"
    return round(float(m[1]) * {"B": 1 / MIB, "KiB": 1 / 1024, "MiB": 1, "GiB": 1024}[m[2]])


def parse_nvitop(text: str) -> list[GpuView]:
    views: list[GpuView] = []
    pending: dict[str, Any] | None = None
    for line in text.splitlines():
        if NVITOP_LOST.match(line):
            views.append(GpuView(lost=True))
        elif m := NVITOP_MIG.match(line):
            assert views, f"a MIG row before its GPU: {line}"
            mig = MigView(
                gi=int(m[2]),
                ci=int(m[3]),
                profile=m[1],
                memory_used_mib=mib(m[4]),
                memory_total_mib=mib(m[5]),
            )
            views[-1] = GpuView(**{**views[-1].__dict__, "migs": (*views[-1].migs, mig)})
        elif m := NVITOP_GPU.match(line):
            pending = {"name": m[2], "bus_id": m[3]}
        elif pending and (m := NVITOP_READINGS.match(line)):
            views.append(
                GpuView(
                    **pending,
                    temperature=int(m[1]),
                    power_w=int(m[2]),
                    power_step=1,
                    memory_used_mib=mib(m[3]),
                    memory_total_mib=None if m[4].endswith("GiB") else mib(m[4]),  # 79.65GiB: not exact
                    utilization=int(m[5].rstrip("%")) if m[5] != "N/A" else None,
                )
            )
            pending = None
    return views


PARSERS = {"probe": parse_probe, "gpustat": parse_gpustat, "nvitop": parse_nvitop, "gonvml": parse_gonvml}


def printed(view: Container, consumer: str) -> list[GpuView]:
    """What a consumer printed in the container, parsed; it must have succeeded."""
    result = run_consumer(view, consumer)
    assert result.code == 0, f"{consumer}: exit {result.code}: {result.output[-2000:]}"
    return PARSERS[consumer](result.output)


# ---- the metrics ------------------------------------------------------------------------------------


@dataclass
class MetricsGpu:
    """One GPU of a /metrics scrape (the GPU's own entity; its MIG devices by GPU-instance ID)."""

    uuid: str
    bus_id: str
    values: dict[str, float] = field(default_factory=dict)  # DCGM field -> value
    migs: dict[int, dict[str, Any]] = field(default_factory=dict)  # GI ID -> profile and fields


def metrics_gpus(text: str) -> dict[str, MetricsGpu]:
    gpus: dict[str, MetricsGpu] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            uuid = s.labels.get("UUID")
            if not uuid:
                continue
            gpu = gpus.setdefault(uuid, MetricsGpu(uuid, s.labels["pci_bus_id"]))
            if "GPU_I_ID" in s.labels:
                mig = gpu.migs.setdefault(int(s.labels["GPU_I_ID"]), {"profile": s.labels["GPU_I_PROFILE"]})
                mig[s.name] = s.value
            else:
                gpu.values[s.name] = s.value
    return gpus


def differences(view: GpuView, gpu: MetricsGpu) -> list[str]:
    """What a consumer printed for a GPU that is not the metrics sample's value (empty: it agrees)."""
    m = gpu.values
    parts = [m.get(f"DCGM_FI_DEV_FB_{p}") for p in ("FREE", "USED", "RESERVED")]
    wanted: list[tuple[str, Any, Any]] = [
        ("bus id", view.bus_id, gpu.bus_id),
        ("uuid", view.uuid, gpu.uuid),
        ("memory total (MiB)", view.memory_total_mib, None if None in parts else sum(parts)),
        ("memory used (MiB)", view.memory_used_mib, m.get("DCGM_FI_DEV_FB_USED")),
        ("memory free (MiB)", view.memory_free_mib, m.get("DCGM_FI_DEV_FB_FREE")),
        ("utilization (%)", view.utilization, m.get("DCGM_FI_DEV_GPU_UTIL")),
        ("temperature (C)", view.temperature, m.get("DCGM_FI_DEV_GPU_TEMP")),
    ]
    out = [
        f"{what}: printed {got}, metrics {want}"
        for what, got, want in wanted
        if got is not None and got != want
    ]
    power = m.get("DCGM_FI_DEV_POWER_USAGE")
    # NVML has milliwatts of the live file's two decimals; gpustat and nvitop print whole watts
    if view.power_w is not None and (power is None or abs(power - view.power_w) > view.power_step + 0.005):
        out.append(f"power (W): printed {view.power_w}, metrics {power}")
    return out
