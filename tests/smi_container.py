"""Running dra-fake's nvidia-smi "in a container" for tests: a claim is prepared by DeviceState (as
the plugin does), its CDI spec read back, and every mount copied from its hostPath to
<root>/<containerPath> (a directory is linked, as a bind mount shows later changes); the mounted
binary runs with DRA_FAKE_ROOT=<root>, which its NVML library prefixes to the device directory."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_fake.gpu.inventory import load_inventory
from dra_fake.gpu.nvidia_smi import CONTAINER_BINARY, NvidiaSmi
from dra_fake.gpu.state import DeviceState

NODE = "node-a"
DRIVER = "gpu.nvidia.com"
UID1 = "1a111111-1111-1111-1111-111111111111"
UID2 = "b2222222-2222-2222-2222-222222222222"

# What dra-fake's NVML does not report yet, each with what nvidia-smi prints meanwhile and why (the
# library's answer, not nvidia-smi's). A gap that closes fails
# tests/test_nvidia_smi_golden.py::test_every_query_field_as_the_real_tool: remove it.
HISTOGRAM = "nvmlDeviceGetRowRemapperHistogram not implemented (and no per-model key: H200 3072 banks)"
LIBRARY_GAPS: dict[str, tuple[str, str]] = {
    **{f"remapped_rows.histogram.{k}": ("[N/A]", HISTOGRAM) for k in
       ("max", "high", "partial", "low", "none")},
    "c2c.mode": ("[N/A]", "nvmlDeviceGetC2cModeInfoV not implemented (and no per-model key)"),
}  # fmt: skip


def write_inventory(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return path


def make_state(tmp_path: Path, inventory_text: str) -> tuple[DeviceState, Any]:
    inventory = load_inventory(write_inventory(tmp_path, inventory_text), NODE)
    boot = tmp_path / "boot_id"
    boot.write_text("11111111-2222-3333-4444-555555555555\n")
    data = tmp_path / "plugins" / DRIVER
    state = DeviceState(
        DRIVER,
        NODE,
        inventory.devices,
        tmp_path / "cdi",
        data,
        node_name=NODE,
        boot_id_path=boot,
        nvidia_smi=NvidiaSmi.from_inventory(data, inventory),
    )
    state.startup()
    return state, inventory


def claim(uid: str, devices: list[str]) -> dict[str, Any]:
    results = [
        {"request": f"r{i}", "driver": DRIVER, "pool": NODE, "device": d} for i, d in enumerate(devices)
    ]
    return {
        "metadata": {"uid": uid, "name": f"c-{uid[:4]}", "namespace": "default"},
        "status": {"allocation": {"devices": {"results": results, "config": []}}},
    }


def container_root(tmp_path: Path, specs: list[dict[str, Any]], name: str = "ctr") -> Path:
    """Apply the mounts of every device of the given specs (and their spec-level edits) as a
    runtime would: copy each file hostPath to <root>/<containerPath>; a directory is linked, so
    later changes on the host show, as through a bind mount."""
    root = tmp_path / "containers" / name
    for spec in specs:
        edits = [spec.get("containerEdits") or {}] + [d["containerEdits"] for d in spec["devices"]]
        for e in edits:
            for m in e.get("mounts") or []:
                target = root / m["containerPath"].lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                if Path(m["hostPath"]).is_dir():
                    if target.is_symlink():  # two devices name one directory (CDI keeps one mount)
                        target.unlink()
                    target.symlink_to(m["hostPath"])
                else:
                    shutil.copy2(m["hostPath"], target)
    return root


def run_smi(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    binary = root / CONTAINER_BINARY.lstrip("/")
    proc = subprocess.run(
        [str(binary), *args],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "DRA_FAKE_ROOT": str(root)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def read_spec(state: DeviceState, uid: str) -> dict[str, Any]:
    spec: dict[str, Any] = yaml.safe_load(state.cdi.path(uid).read_text())
    return spec


# Two A100s, the first in MIG mode with two pre-created MIG devices: the tests' usual node.
A100_MIG = """
driverVersion: "580.126.09"
cudaDriverVersion: "13.0"
gpus:
- profile: a100-sxm4-40gb
  mig: static
  migDevices:
  - {profile: 3g.20gb, start: 4}
  - {profile: 1g.5gb, start: 0}
- profile: a100-sxm4-40gb
"""


@pytest.fixture
def a100(tmp_path: Path) -> tuple[DeviceState, Any]:
    return make_state(tmp_path, A100_MIG)


def mig_names(inventory: Any) -> list[str]:
    return sorted(n for n, d in inventory.devices.items() if d.kind == "mig")
