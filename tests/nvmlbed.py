"""The device and live files the NVML library tests load dra-fake's library on (docs/nvml.md): an H200
with the readings of the real one of tests/data/nvml, an H200 in MIG mode with two MIG devices, a lost
GPU; the library built once per session and loaded through nvidia-ml-py; helpers for return codes,
raw C calls and polling.
"""

from __future__ import annotations

import ctypes
import json
import shlex
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pynvml as N
import pytest

REPO = Path(__file__).resolve().parents[1]
LIB = REPO / "build" / "native" / "libnvidia-ml.so.1"
DATA = REPO / "tests" / "data" / "nvml"

H200_UUID = "GPU-1cc3f679-2929-ae9e-513c-87e6150fcaf5"
MIG_GPU_UUID = "GPU-6d0c8f0a-1b7e-4c55-9f4e-2a3b4c5d6e7f"
LOST_UUID = "GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9"
MIG_UUIDS = ("MIG-11111111-2222-3333-4444-555555555555", "MIG-66666666-7777-8888-9999-aaaaaaaaaaaa")

# The H200 of tests/data/nvml (static keys as the plugin writes them; docs/nvml.md)
H200: dict[str, str | int] = {
    "kind": "gpu",
    "gpu_uuid": H200_UUID,
    "minor": 0,
    "serial": "1654124044365",
    "name": "NVIDIA H200",
    "brand": 14,
    "architecture": 9,
    "architecture_name": "Hopper",
    "compute_cap": "9.0",
    "bus_id": "00000000:00:06.0",
    "pci_device_id": "0x233510DE",
    "pci_subsystem_id": "0x18BF10DE",
    "pcie_max_gen": 5,
    "pcie_max_width": 16,
    "board_id": 6,
    "board_part_number": "692-2G520-0282-001",
    "module_id": 8,
    "multi_gpu_board": 0,
    "num_gpu_cores": 16896,
    "vbios_version": "96.00.A5.00.1A",
    "inforom_image": "G520.0282.02.02",
    "inforom_oem": "2.1",
    "inforom_ecc": "7.16",
    "driver_version": "580.159.04",
    "nvml_version": "13.580.159.04",
    "cuda_version": "13.0",
    "cuda_driver_version": 13000,
    "driver_branch": "r582_49",
    "memory_mib": 143771,
    "fb_reserved": 616,
    "bar1_mib": 262144,
    "memory_bus_width": 6016,
    "power_cap": 700,
    "power_default_limit": 700,
    "power_min_limit": 200,
    "power_max_limit": 700,
    "clock_max_graphics": 1980,
    "clock_max_sm": 1980,
    "clock_max_mem": 3201,
    "clock_max_video": 1545,
    "clock_app_graphics": 1980,
    "clock_app_mem": 3201,
    "temp_shutdown": 95,
    "temp_slowdown": 89,
    "temp_gpu_max": 87,
    "temp_mem_max": 95,
    "persistence_mode": 1,
    "ecc_mode": 1,
    "compute_mode": 0,
    "display_mode": 1,
    "display_active": 0,
    "virtualization_mode": 1,  # the capture's VM (pass-through); bare metal is 0
    "gsp_firmware_mode": 1,
    "mig_mode": "Disabled",
    "addressing_mode": "None",
    "gi_profiles": (
        "0:19:1:7:16:1:1:0:1:0:16384:1g.18gb 1:14:2:3:32:2:2:0:2:0:33280:2g.35gb "
        "2:9:3:2:60:3:3:0:3:0:71424:3g.71gb 3:5:4:1:64:4:4:0:4:0:71424:4g.71gb "
        "4:0:7:1:132:8:7:0:7:1:143360:7g.141gb 7:20:1:1:16:1:1:0:1:1:16384:1g.18gb+me "
        "9:15:1:4:26:1:1:0:1:0:33280:1g.35gb"
    ),
    "gi_placements": (
        "19:0+1,1+1,2+1,3+1,4+1,5+1,6+1 20:0+1,1+1,2+1,3+1,4+1,5+1,6+1 15:0+2,2+2,4+2,6+2 "
        "14:0+2,2+2,4+2 9:0+4,4+4 5:0+4 0:0+8"
    ),
    # an idle GPU's readings (the live file overrides them)
    "power_draw": "77.45",
    "temperature": 33,
    "sm_clock": 345,
    "mem_clock": 3201,
    "video_clock": 765,
}
# the capture's readings, as the plugin's live file carries them
H200_LIVE: dict[str, str | int] = {
    "utilization": 0,
    "memory_util": 0,
    "memory_used": 0,
    "power_draw": "77.447",
    "energy_mj": 3219225,
    "temperature": 33,
    "sm_clock": 345,
    "mem_clock": 3201,
    "video_clock": 765,
    "pcie_tx": 710,
    "pcie_rx": 569,
}


def nvdump() -> dict[str, Any]:
    """tests/data/nvml/nvdump-h200-580.txt: the JSON between the command line and `rc=0`."""
    text = (DATA / "nvdump-h200-580.txt").read_text()
    body = text.split("\n", 1)[1].rsplit("rc=", 1)[0]
    result: dict[str, Any] = json.loads(body)
    return result


def write_kv(path: Path, fields: dict[str, str | int], comment: str = "dra-fake test") -> None:
    """A device or live file: `key=value`, values quoted as POSIX sh reads them (docs/nvml.md)."""
    lines = [f"# {comment}"] + [f"{key}={shlex.quote(str(value))}" for key, value in fields.items()]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


class Bed:
    """The device and live directories of one container."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.devices = root / "var/run/dra-fake/nvidia-smi/devices"
        self.live = root / "var/run/dra-fake/nvidia-smi/live"
        self.devices.mkdir(parents=True)
        self.live.mkdir(parents=True)

    def device(self, name: str, fields: dict[str, str | int]) -> None:
        write_kv(self.devices / name, fields)

    def set_live(self, uuid: str, fields: dict[str, str | int]) -> None:
        write_kv(self.live_file(uuid), fields)

    def live_file(self, name: str) -> Path:
        """A device's live file, in the directory the plugin mounts for that device alone."""
        (self.live / name).mkdir(exist_ok=True)
        return self.live / name / "state"


def mig_gpu_fields() -> dict[str, str | int]:
    """A second H200, in MIG mode; its static keys are in each of its MIG devices' files."""
    return H200 | {
        "gpu_uuid": MIG_GPU_UUID,
        "minor": 1,
        "serial": "1654124044366",
        "bus_id": "00000000:2A:00.0",
        "mig_mode": "Enabled",
    }


def mig_fields(index: int) -> dict[str, str | int]:
    return mig_gpu_fields() | {
        "kind": "mig",
        "mig_uuid": MIG_UUIDS[index],
        "mig_profile": "1g.18gb",
        "gi_profile_id": 19,
        "gi_id": 7 + index,
        "ci_id": 0,
        "gi_start": index,
        "gi_size": 1,
        "mig_memory_mib": 16384,
        "mig_bar1_mib": 32768,
        "sm": 16,
        "ce": 1,
        "dec": 1,
        "enc": 0,
        "jpg": 1,
        "ofa": 0,
    }


@pytest.fixture(scope="session")
def lib_path() -> Path:
    subprocess.run(["make", "-s", "native"], cwd=REPO, check=True, capture_output=True)
    assert LIB.is_file()
    return LIB


@pytest.fixture
def bed(tmp_path: Path) -> Bed:
    """An H200 (index 0), an H200 in MIG mode with two 1g.18gb devices (1), a lost GPU (2)."""
    b = Bed(tmp_path / "root")
    b.device("00000000-00-06.0_gpu", H200)
    b.set_live(H200_UUID, H200_LIVE)
    b.device("00000000-2A-00.0_mig-07", mig_fields(0))
    b.device("00000000-2A-00.0_mig-08", mig_fields(1))
    b.set_live(MIG_GPU_UUID, {"memory_used": 2048, "power_draw": "90.00", "temperature": 35})
    b.set_live(MIG_UUIDS[0], {"mig_memory_used": 1024})
    b.device("00000000-3B-00.0_gpu", H200 | {"gpu_uuid": LOST_UUID, "bus_id": "00000000:3B:00.0", "minor": 2})
    b.set_live(LOST_UUID, {"fault_lost": 1})
    return b


def load(lib: Path) -> None:
    """Point nvidia-ml-py at the library (it loads "libnvidia-ml.so.1" by name otherwise)."""
    N.nvmlLib = ctypes.CDLL(str(lib))
    N._nvmlGetFunctionPointer_cache.clear()


def shutdown_all() -> None:
    """The library is shared by the tests of this process: leave it uninitialized."""
    for _ in range(100):
        if N.nvmlLib.nvmlShutdown() != 0:
            return


@pytest.fixture
def nvml(lib_path: Path, bed: Bed, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("DRA_FAKE_ROOT", str(bed.root))
    load(lib_path)
    shutdown_all()
    N.nvmlInit()
    yield N
    shutdown_all()


def code(fn: Callable[[], Any]) -> int:
    """The NVML return code of a binding call (0: it succeeded)."""
    try:
        fn()
    except N.NVMLError as err:
        return int(err.value)
    return 0


def raw(name: str, *args: Any) -> int:
    """A C call with exactly these arguments (NULLs, short buffers)."""
    fn = getattr(N.nvmlLib, name)
    result: int = fn(*args)
    return result


def poll(check: Callable[[], bool], what: str, seconds: float = 10.0) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.02)


def plain(value: Any) -> Any:
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        return {f[0]: plain(getattr(value, f[0])) for f in value._fields_ if not f[0].startswith("_")}
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.decode()
    return value


MIB = 1024 * 1024
