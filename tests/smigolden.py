"""What the nvidia-smi golden tests (tests/test_nvidia_smi_golden*.py) compare: the real tool's
captures (tests/data/nvidia-smi), the machine and platform values that are not the model's, and an
idle simulated H200 (the fixture `h200`, through tests/conftest.py) with our nvidia-smi run on it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from smi_container import (
    DRIVER,
    NODE,
    UID1,
    claim,
    container_root,
    make_state,
    read_spec,
    run_smi,
)

from dra_fake.gpu.monitor import GpuMonitor

DATA = Path(__file__).parent / "data" / "nvidia-smi"
CAPTURE = DATA / "h200-580"

MACHINE = {
    "timestamp",
    "serial",
    "uuid",
    "pci.bus_id",
    "pci.bus",
    "pci.device",
    "temperature.gpu",
    "temperature.gpu.tlimit",
    "temperature.memory",
    "power.draw",
    "power.draw.average",
    "power.draw.instant",
    "clocks.current.graphics",
    "clocks.current.sm",
}
# Where the board sits (chassis, slot, tray, host, module, peer type): the H200 VM answers numbers,
# the H100 HGX of qx-h100.xml N/A for all but the module; not a value of the model.
PLATFORM = {
    f"platform.{f}"
    for f in ("chassis_serial_number", "slot_number", "tray_index", "host_id", "peer_type", "module_id")
} | {"platform.gpu_fabric_guid"}


def capture(name: str) -> tuple[list[str], str, int]:
    """A capture file: its command line (argv after nvidia-smi), its output, its exit code."""
    lines = (CAPTURE / name).read_text().split("\n")
    command, *body = lines
    rc_line = next(i for i in range(len(body) - 1, -1, -1) if body[i].startswith("rc="))
    output = "\n".join(body[:rc_line])
    argv = command.removeprefix("$ ").split()
    if argv[0] == "timeout":
        argv = argv[2:]
    return argv[1:], output + ("\n" if output else ""), int(body[rc_line][3:])


def every_field() -> list[tuple[str, str, int]]:
    """query-every-field.txt: (field, output, exit code) for each of the 218 names queried."""
    lines = (CAPTURE / "query-every-field.txt").read_text().splitlines()
    out = []
    i = 0
    while i < len(lines):
        field, _, value = lines[i].partition("\t")
        if value.startswith("ERROR:"):  # the message, a blank line, rc=N
            out.append((field, f"{value}\n{lines[i + 1]}\n", int(lines[i + 2].removeprefix("rc="))))
            i += 3
        else:
            out.append((field, value + "\n", 0))
            i += 1
    return out


def shape(text: str) -> str:
    return re.sub(r"[0-9a-fA-F]", "0", text)


@pytest.fixture(scope="module")
def h200(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A container holding one idle simulated H200 (live files written by a monitor sample)."""
    tmp = tmp_path_factory.mktemp("h200")
    state, inventory = make_state(tmp, "gpus:\n- profile: h200-sxm-141gb\n")
    state.prepare(claim(UID1, ["gpu-0"]))
    assert state.nvidia_smi is not None
    GpuMonitor(inventory, state.holdings, state.nvidia_smi, NODE, DRIVER).sample()
    gpu = inventory.gpu(0)
    return {"root": container_root(tmp, [read_spec(state, UID1)]), "uuid": gpu.uuid, "gpu": gpu}


def smi(h200: dict[str, Any], *args: str) -> tuple[str, int]:
    proc = run_smi(h200["root"], *args, check=False)
    return proc.stdout + proc.stderr, proc.returncode


def bus_id(h200: dict[str, Any]) -> str:
    out, _ = smi(h200, "--query-gpu=pci.bus_id", "--format=csv,noheader")
    return out.strip()
