"""dra-fake's NVML library (native/, docs/nvml.md) through NVIDIA's Python bindings (nvidia-ml-py).

The library is built once per session (`make native`); each test writes device and live files in
a temporary root exactly as docs/nvml.md describes them and loads the library there
(DRA_FAKE_ROOT). Values the fixture shares with the real H200 of tests/data/nvml are compared
with that capture.
"""

from __future__ import annotations

import ast
import ctypes
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
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


# ---- init, shutdown, system ----------------------------------------------------------------------


def test_calls_before_init_and_after_the_last_shutdown_are_uninitialized(
    lib_path: Path, bed: Bed, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRA_FAKE_ROOT", str(bed.root))
    load(lib_path)
    shutdown_all()
    count = ctypes.c_uint(7)
    assert raw("nvmlDeviceGetCount_v2", ctypes.byref(count)) == N.NVML_ERROR_UNINITIALIZED
    assert code(N.nvmlSystemGetDriverVersion) == N.NVML_ERROR_UNINITIALIZED
    assert code(N.nvmlShutdown) == N.NVML_ERROR_UNINITIALIZED
    # a reference count: two inits need two shutdowns
    assert raw("nvmlInit_v2") == 0
    assert raw("nvmlInitWithFlags", 0) == 0
    assert raw("nvmlShutdown") == 0
    assert raw("nvmlDeviceGetCount_v2", ctypes.byref(count)) == 0
    assert count.value == 3
    handle = N.nvmlDeviceGetHandleByIndex(0)
    assert raw("nvmlShutdown") == 0
    assert raw("nvmlShutdown") == N.NVML_ERROR_UNINITIALIZED
    assert raw("nvmlDeviceGetCount_v2", ctypes.byref(count)) == N.NVML_ERROR_UNINITIALIZED
    assert code(lambda: N.nvmlDeviceGetName(handle)) == N.NVML_ERROR_UNINITIALIZED
    # the unversioned nvmlInit of the oldest programs
    assert raw("nvmlInit") == 0
    assert N.nvmlDeviceGetCount() == 3
    shutdown_all()


def test_init_without_the_devices_directory_is_driver_not_loaded(
    lib_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DRA_FAKE_ROOT", str(tmp_path / "nothing"))
    load(lib_path)
    shutdown_all()
    assert raw("nvmlInit_v2") == N.NVML_ERROR_DRIVER_NOT_LOADED
    assert raw("nvmlShutdown") == N.NVML_ERROR_UNINITIALIZED


def test_error_strings_are_nvidias(lib_path: Path) -> None:
    real = nvdump()["args"]["ErrorString(all)"]
    expected = ast.literal_eval(real)  # the capture prints a Python dict of code -> text
    lib = ctypes.CDLL(str(lib_path))
    lib.nvmlErrorString.restype = ctypes.c_char_p
    for value, text in expected.items():
        assert lib.nvmlErrorString(value).decode() == text
    assert lib.nvmlErrorString(12345).decode() == "Unknown Error"


def test_system_getters_match_the_h200(nvml: Any) -> None:
    real = nvdump()["system"]
    assert N.nvmlSystemGetDriverVersion() == real["nvmlSystemGetDriverVersion"]
    assert N.nvmlSystemGetNVMLVersion() == real["nvmlSystemGetNVMLVersion"]
    assert N.nvmlSystemGetCudaDriverVersion() == real["nvmlSystemGetCudaDriverVersion"]
    assert N.nvmlSystemGetCudaDriverVersion_v2() == real["nvmlSystemGetCudaDriverVersion_v2"]
    assert N.nvmlSystemGetDriverBranch().branch == real["nvmlSystemGetDriverBranch"]["branch"]
    assert N.nvmlUnitGetCount() == 0


# ---- identity ----------------------------------------------------------------------------------------


IDENTITY = (
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetSerial",
    "nvmlDeviceGetIndex",
    "nvmlDeviceGetMinorNumber",
    "nvmlDeviceGetBrand",
    "nvmlDeviceGetArchitecture",
    "nvmlDeviceGetCudaComputeCapability",
    "nvmlDeviceGetBoardId",
    "nvmlDeviceGetBoardPartNumber",
    "nvmlDeviceGetModuleId",
    "nvmlDeviceGetMultiGpuBoard",
    "nvmlDeviceGetNumGpuCores",
    "nvmlDeviceGetVbiosVersion",
    "nvmlDeviceGetInforomImageVersion",
    "nvmlDeviceGetMemoryBusWidth",
    "nvmlDeviceGetPersistenceMode",
    "nvmlDeviceGetComputeMode",
    "nvmlDeviceGetDisplayMode",
    "nvmlDeviceGetDisplayActive",
    "nvmlDeviceGetVirtualizationMode",
    "nvmlDeviceGetGspFirmwareMode",
    "nvmlDeviceGetGspFirmwareVersion",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetPciInfo_v3",
    "nvmlDeviceGetBusType",
    "nvmlDeviceGetMaxPcieLinkGeneration",
    "nvmlDeviceGetGpuMaxPcieLinkGeneration",
    "nvmlDeviceGetMaxPcieLinkWidth",
    "nvmlDeviceGetCurrPcieLinkGeneration",
    "nvmlDeviceGetCurrPcieLinkWidth",
    "nvmlDeviceGetPcieLinkMaxSpeed",
    "nvmlDeviceGetPcieSpeed",
    "nvmlDeviceGetPcieReplayCounter",
    "nvmlDeviceGetAddressingMode",
)


def plain(value: Any) -> Any:
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        return {f[0]: plain(getattr(value, f[0])) for f in value._fields_ if not f[0].startswith("_")}
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, bytes):
        return value.decode()
    return value


def test_identity_getters_match_the_h200(nvml: Any) -> None:
    real = nvdump()["device"]
    h = N.nvmlDeviceGetHandleByIndex(0)
    for name in IDENTITY:
        ours = plain(getattr(N, name)(h))
        if name == "nvmlDeviceGetAddressingMode":  # newer than the capture's getters list
            assert ours == 0
            continue
        assert ours == real[name], name
    assert N.nvmlDeviceGetInforomVersion(h, N.NVML_INFOROM_OEM) == "2.1"
    assert N.nvmlDeviceGetInforomVersion(h, N.NVML_INFOROM_ECC) == "7.16"
    assert code(lambda: N.nvmlDeviceGetInforomVersion(h, N.NVML_INFOROM_POWER)) == N.NVML_ERROR_NOT_SUPPORTED
    assert code(lambda: N.nvmlDeviceGetInforomVersion(h, 9)) == N.NVML_ERROR_INVALID_ARGUMENT


def test_legacy_pci_info_fills_only_the_52_byte_layout(nvml: Any) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    buf = (ctypes.c_ubyte * 80)(*([0xAB] * 80))
    assert raw("nvmlDeviceGetPciInfo_v2", h, ctypes.byref(buf)) == 0
    legacy = N.nvmlPciInfo_v2_t.from_buffer(buf)
    assert legacy.busId == "0000:00:06.0"
    assert (legacy.domain, legacy.bus, legacy.device, legacy.pciDeviceId) == (0, 0, 6, 0x233510DE)
    assert ctypes.sizeof(N.nvmlPciInfo_v2_t) == 52
    assert bytes(buf[52:]) == b"\xab" * 28  # nothing written past the old structure


def test_absent_keys_are_not_supported(nvml: Any, bed: Bed) -> None:
    shutdown_all()
    bare = {k: H200[k] for k in ("kind", "gpu_uuid", "bus_id", "name")}
    for path in [*bed.devices.iterdir(), *bed.live.glob("*/state")]:
        path.unlink()
    bed.device("00000000-00-06.0_gpu", bare)
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetName(h) == "NVIDIA H200"
    for name in (
        "nvmlDeviceGetSerial",
        "nvmlDeviceGetMinorNumber",
        "nvmlDeviceGetBrand",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetBAR1MemoryInfo",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPersistenceMode",
        "nvmlDeviceGetVbiosVersion",
        "nvmlDeviceGetMaxPcieLinkGeneration",
    ):
        assert code(lambda name=name: getattr(N, name)(h)) == N.NVML_ERROR_NOT_SUPPORTED, name
    assert code(N.nvmlSystemGetDriverVersion) == N.NVML_ERROR_NOT_SUPPORTED


# ---- memory ------------------------------------------------------------------------------------------


MIB = 1024 * 1024


def test_memory_counts_the_reserved_memory_and_the_live_usage(nvml: Any, bed: Bed) -> None:
    real = nvdump()["device"]
    h = N.nvmlDeviceGetHandleByIndex(0)
    mem = N.nvmlDeviceGetMemoryInfo(h)
    assert mem.total == real["nvmlDeviceGetMemoryInfo"]["total"]
    # the real driver's reserve, to the byte: 615.06 MiB (nvidia-smi shows 616; docs/nvml.md)
    assert (mem.used, mem.free) == (
        real["nvmlDeviceGetMemoryInfo"]["used"],
        real["nvmlDeviceGetMemoryInfo"]["free"],
    )
    mem2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
    assert (mem2.total, mem2.reserved, mem2.used) == (mem.total, mem.used, 0)
    assert mem2.free == mem.free
    assert N.nvmlDeviceGetBAR1MemoryInfo(h).bar1Total == real["nvmlDeviceGetBAR1MemoryInfo"]["bar1Total"]
    bed.set_live(H200_UUID, H200_LIVE | {"memory_used": 1000})
    poll(lambda: N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2).used == 1000 * MIB, "live memory_used")
    assert N.nvmlDeviceGetMemoryInfo(h).used == mem.used + 1000 * MIB
    bad = N.c_nvmlMemory_v2_t()
    bad.version = 1
    assert raw("nvmlDeviceGetMemoryInfo_v2", h, ctypes.byref(bad)) == N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


SHARE_ID = "5f8a3c1e-0b4d-4f0e-9a51-2f1d7c3e8b6a"


def test_a_share_sees_its_own_memory_and_usage_on_the_same_gpu(lib_path: Path, tmp_path: Path) -> None:
    """docs/nvml.md#shares: with share_id and share_memory_mib the share's memory is the total
    (nothing reserved) and its own live file gives used memory and utilization; the GPU's
    identity and every other reading stay the device's. Without share_memory_mib (the
    `unlimited` and count modes) the whole device shows."""

    def view(fields: dict[str, str | int], share: dict[str, str | int] | None) -> tuple[Any, ...]:
        b = Bed(tmp_path / f"r{len(list(tmp_path.iterdir()))}")
        b.device("00000000-06-00.0_gpu", fields)
        b.set_live(H200_UUID, H200_LIVE | {"memory_used": 90000, "utilization": 95, "temperature": 70})
        if share is not None:
            b.set_live(f"share-{SHARE_ID}", share)
        os.environ["DRA_FAKE_ROOT"] = str(b.root)
        try:
            shutdown_all()
            N.nvmlInit()
            h = N.nvmlDeviceGetHandleByIndex(0)
            mem = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
            out = (
                N.nvmlDeviceGetUUID(h),
                (mem.total // MIB, mem.reserved, mem.used // MIB, mem.free // MIB),
                N.nvmlDeviceGetUtilizationRates(h).gpu,
                N.nvmlDeviceGetTemperature(h, 0),
            )
        finally:
            shutdown_all()
            del os.environ["DRA_FAKE_ROOT"]
        return out

    load(lib_path)
    share = H200 | {"share_id": SHARE_ID, "share_memory_mib": 20480}
    assert view(share, {"memory_used": 4096, "utilization": 30}) == (
        H200_UUID,
        (20480, 0, 4096, 16384),
        30,
        70,
    )
    # no share live file yet: an idle share
    assert view(share, None)[1:3] == ((20480, 0, 0, 20480), 0)
    # usage above the limit reads as full, never more
    assert view(share, {"memory_used": 30000})[1] == (20480, 0, 20480, 0)
    # the device view: no share_memory_mib, or an ID that could name another file
    whole = view(H200 | {"share_id": SHARE_ID}, {"memory_used": 4096, "utilization": 30})
    assert whole[1][0] == 143771 and whole[1][2] == 90000 and whole[2] == 95
    bad = view(H200 | {"share_id": "../x", "share_memory_mib": 20480}, {"memory_used": 1})
    assert bad[1][0] == 143771


def test_a_share_of_a_mig_device_sees_its_share_of_the_mig_memory(lib_path: Path, tmp_path: Path) -> None:
    """The same keys on a MIG device's file: the MIG handle's memory is the share's; its GPU's
    handle (MIG mode) and identity stay as they are."""
    b = Bed(tmp_path / "root")
    b.device("00000000-2A-00.0_mig-07", mig_fields(0) | {"share_id": SHARE_ID, "share_memory_mib": 8192})
    b.set_live(MIG_UUIDS[0], {"mig_memory_used": 9000})
    b.set_live(f"share-{SHARE_ID}", {"memory_used": 1024})
    os.environ["DRA_FAKE_ROOT"] = str(b.root)
    load(lib_path)
    try:
        shutdown_all()
        N.nvmlInit()
        gpu = N.nvmlDeviceGetHandleByIndex(0)
        mig = N.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 0)
        mem = N.nvmlDeviceGetMemoryInfo(mig, version=N.nvmlMemory_v2)
        assert (mem.total // MIB, mem.used // MIB, mem.free // MIB) == (8192, 1024, 7168)
        assert N.nvmlDeviceGetUUID(mig) == MIG_UUIDS[0]
        assert N.nvmlDeviceGetMemoryInfo(gpu).total // MIB == 143771  # the GPU's own view
    finally:
        shutdown_all()
        del os.environ["DRA_FAKE_ROOT"]


# ---- argument checks ------------------------------------------------------------------------------


def test_string_getters_need_room_for_the_value_and_its_nul(nvml: Any) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    buf = ctypes.create_string_buffer(256)
    for name, value in (
        ("nvmlDeviceGetUUID", H200_UUID),
        ("nvmlDeviceGetName", "NVIDIA H200"),
        ("nvmlDeviceGetSerial", "1654124044365"),
        ("nvmlDeviceGetVbiosVersion", "96.00.A5.00.1A"),
        ("nvmlDeviceGetBoardPartNumber", "692-2G520-0282-001"),
    ):
        need = len(value) + 1
        for length in (0, 1, need - 1):
            assert raw(name, h, buf, ctypes.c_uint(length)) == N.NVML_ERROR_INSUFFICIENT_SIZE, (name, length)
        assert raw(name, h, buf, ctypes.c_uint(need)) == 0
        assert buf.value.decode() == value
    for name, value in (
        ("nvmlSystemGetDriverVersion", "580.159.04"),
        ("nvmlSystemGetNVMLVersion", "13.580.159.04"),
    ):
        assert raw(name, buf, ctypes.c_uint(len(value))) == N.NVML_ERROR_INSUFFICIENT_SIZE
        assert raw(name, buf, ctypes.c_uint(len(value) + 1)) == 0


def test_null_outputs_and_bad_handles_are_invalid_arguments(nvml: Any) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert raw("nvmlDeviceGetName", h, None, ctypes.c_uint(96)) == N.NVML_ERROR_INVALID_ARGUMENT
    assert raw("nvmlDeviceGetMemoryInfo", h, None) == N.NVML_ERROR_INVALID_ARGUMENT
    assert raw("nvmlDeviceGetCount_v2", None) == N.NVML_ERROR_INVALID_ARGUMENT
    assert raw("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(0), None) == N.NVML_ERROR_INVALID_ARGUMENT
    mem = N.c_nvmlMemory_t()
    assert raw("nvmlDeviceGetMemoryInfo", None, ctypes.byref(mem)) == N.NVML_ERROR_INVALID_ARGUMENT
    junk = (ctypes.c_ubyte * 4096)()  # a pointer that is not one of the library's handles
    assert (
        raw("nvmlDeviceGetMemoryInfo", ctypes.byref(junk), ctypes.byref(mem)) == N.NVML_ERROR_INVALID_ARGUMENT
    )
    assert code(lambda: N.nvmlDeviceGetHandleByIndex(3)) == N.NVML_ERROR_INVALID_ARGUMENT


# ---- lookups -----------------------------------------------------------------------------------------


def test_lookups_by_uuid_serial_and_every_bus_id_spelling(nvml: Any) -> None:
    def index(h: Any) -> int:
        result: int = N.nvmlDeviceGetIndex(h)
        return result

    assert index(N.nvmlDeviceGetHandleByUUID(H200_UUID)) == 0
    assert index(N.nvmlDeviceGetHandleByUUID("GPU-" + H200_UUID[4:].upper())) == 0
    assert index(N.nvmlDeviceGetHandleBySerial("1654124044366")) == 1
    for spelling in ("00000000:2A:00.0", "00000000:2a:00.0", "0000:2A:00.0", "0000:2a:00.0", "2A:00.0"):
        assert index(N.nvmlDeviceGetHandleByPciBusId(spelling)) == 1, spelling
    assert code(lambda: N.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")) == 6
    assert code(lambda: N.nvmlDeviceGetHandleByUUID("bogus")) == N.NVML_ERROR_NOT_FOUND
    assert code(lambda: N.nvmlDeviceGetHandleBySerial("0000000000000")) == N.NVML_ERROR_NOT_FOUND
    assert code(lambda: N.nvmlDeviceGetHandleByPciBusId("00000000:FF:1F.0")) == N.NVML_ERROR_NOT_FOUND
    assert code(lambda: N.nvmlDeviceGetHandleByPciBusId("xyz")) == N.NVML_ERROR_INVALID_ARGUMENT
    # a MIG device's UUID finds the MIG device
    mig = N.nvmlDeviceGetHandleByUUID(MIG_UUIDS[1])
    assert N.nvmlDeviceGetUUID(mig) == MIG_UUIDS[1]
    # the binary form of nvmlDeviceGetHandleByUUIDV
    want = N.c_nvmlUUID_t()
    want.type = 2
    ctypes.memmove(want.value.bytes, bytes.fromhex(H200_UUID[4:].replace("-", "")), 16)
    found = N.c_nvmlDevice_t()
    assert raw("nvmlDeviceGetHandleByUUIDV", ctypes.byref(want), ctypes.byref(found)) == 0
    assert index(found) == 0


# ---- faults ------------------------------------------------------------------------------------------


def test_a_lost_gpu_counts_but_every_call_on_it_is_gpu_is_lost(nvml: Any, bed: Bed) -> None:
    assert N.nvmlDeviceGetCount() == 3
    assert code(lambda: N.nvmlDeviceGetHandleByIndex(2)) == N.NVML_ERROR_GPU_IS_LOST
    assert code(lambda: N.nvmlDeviceGetHandleByUUID(LOST_UUID)) == N.NVML_ERROR_GPU_IS_LOST
    assert code(lambda: N.nvmlDeviceGetHandleByPciBusId("00000000:3B:00.0")) == N.NVML_ERROR_GPU_IS_LOST
    # a GPU that falls off the bus while a program holds its handle
    h = N.nvmlDeviceGetHandleByIndex(0)
    mig = N.nvmlDeviceGetHandleByUUID(MIG_UUIDS[0])
    bed.set_live(H200_UUID, {"fault_lost": 1})
    bed.set_live(MIG_GPU_UUID, {"fault_lost": 1})
    poll(lambda: code(lambda: N.nvmlDeviceGetName(h)) == N.NVML_ERROR_GPU_IS_LOST, "the GPU is lost")
    telemetry = ("nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetUtilizationRates")
    for name in (*IDENTITY, *telemetry):
        assert code(lambda name=name: getattr(N, name)(h)) == N.NVML_ERROR_GPU_IS_LOST, name
    poll(lambda: code(lambda: N.nvmlDeviceGetMemoryInfo(mig)) == N.NVML_ERROR_GPU_IS_LOST, "its MIG device")


def test_malformed_files_count_as_absent_and_never_crash(nvml: Any, bed: Bed) -> None:
    shutdown_all()
    bed.device("00000000-00-06.0_gpu", H200 | {"name": "NVIDIA H200 'quoted' \"name\""})
    (bed.devices / "00000000-10-00.0_gpu").write_text("kind=gpu\nname='unterminated\n")
    (bed.devices / "00000000-11-00.0_gpu").write_bytes(b"kind=gpu\x00\n")
    (bed.devices / "00000000-12-00.0_gpu").write_text("kind=gpu\nrm -rf /\n")
    (bed.devices / "00000000-13-00.0_gpu").write_text("x" * 200_000)
    (bed.devices / "00000000-14-00.0_gpu").mkdir()
    (bed.devices / "00000000-15-00.0_gpu").write_text(
        "kind=gpu\ngpu_uuid=GPU-../../etc\nbus_id=00000000:15:00.0\n"
    )
    bed.set_live(H200_UUID, H200_LIVE)
    bed.live_file(MIG_GPU_UUID).write_text("temperature='35\n")  # a bad live file: no live values
    N.nvmlInit()
    assert N.nvmlDeviceGetCount() == 3
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetName(h) == "NVIDIA H200 'quoted' \"name\""
    assert (
        N.nvmlDeviceGetTemperature(N.nvmlDeviceGetHandleByIndex(1), 0) == 33
    )  # the device file's idle value


# ---- telemetry -----------------------------------------------------------------------------------


def test_readings_and_limits_match_the_h200(nvml: Any) -> None:
    real = nvdump()
    dev, args = real["device"], real["args"]
    h = N.nvmlDeviceGetHandleByIndex(0)
    for name in (
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetPowerManagementLimit",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetPowerManagementLimitConstraints",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceGetPowerManagementMode",
        "nvmlDeviceGetPowerSource",
        "nvmlDeviceGetPowerState",
        "nvmlDeviceGetPerformanceState",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetEncoderUtilization",
        "nvmlDeviceGetDecoderUtilization",
        "nvmlDeviceGetJpgUtilization",
        "nvmlDeviceGetOfaUtilization",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetSupportedClocksEventReasons",
        "nvmlDeviceGetSupportedClocksThrottleReasons",
        "nvmlDeviceGetSupportedEventTypes",
        "nvmlDeviceGetFanSpeed",
        "nvmlDeviceGetNumFans",
        "nvmlDeviceGetEccMode",
        "nvmlDeviceGetDefaultEccMode",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetAccountingMode",
        "nvmlDeviceGetAccountingBufferSize",
        "nvmlDeviceGetAccountingPids",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetMPSComputeRunningProcesses_v3",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetComputeInstanceId",
        "nvmlDeviceGetAttributes",
        "nvmlDeviceGetAttributes_v2",
        "nvmlDeviceGetNumaNodeId",
        "nvmlDeviceGetRetiredPagesPendingStatus",
    ):
        want = dev[name]
        if isinstance(want, str) and want.startswith("NVMLError "):
            got = code(lambda name=name: getattr(N, name)(h))
            assert N.nvmlErrorString(got) == want.removeprefix("NVMLError "), name
        else:
            assert plain(getattr(N, name)(h)) == want, name
    by_arg = {
        "ClockInfo": N.nvmlDeviceGetClockInfo,
        "MaxClockInfo": N.nvmlDeviceGetMaxClockInfo,
        "ApplicationsClock": N.nvmlDeviceGetApplicationsClock,
        "DefaultApplicationsClock": N.nvmlDeviceGetDefaultApplicationsClock,
        "MaxCustomerBoostClock": N.nvmlDeviceGetMaxCustomerBoostClock,
        "TemperatureThreshold": N.nvmlDeviceGetTemperatureThreshold,
        "PcieThroughput": N.nvmlDeviceGetPcieThroughput,
        "Temperature": N.nvmlDeviceGetTemperature,
        "TotalEccErrors": N.nvmlDeviceGetTotalEccErrors,
        "NvLinkState": N.nvmlDeviceGetNvLinkState,  # a stub: NOT_SUPPORTED on this H200 too
    }
    for key, want in args.items():
        fn_name, _, rest = key.partition("(")
        if fn_name not in by_arg:
            continue
        call_args = [int(a) for a in rest.rstrip(")").split(",")]
        if isinstance(want, str):
            got = code(lambda fn=by_arg[fn_name], a=call_args: fn(h, *a))
            assert N.nvmlErrorString(got) == want.removeprefix("NVMLError "), key
        else:
            assert by_arg[fn_name](h, *call_args) == want, key
    margin = N.c_nvmlMarginTemperature_v1_t()
    margin.version = N.nvmlMarginTemperature_v1
    assert raw("nvmlDeviceGetMarginTemperature", h, ctypes.byref(margin)) == 0
    assert margin.marginTemperature == dev["nvmlDeviceGetMarginTemperature"]
    assert code(lambda: N.nvmlDeviceGetViolationStatus(h, 6)) == N.NVML_ERROR_INVALID_ARGUMENT
    assert N.nvmlDeviceGetViolationStatus(h, N.NVML_PERF_POLICY_THERMAL).violationTime == 0


def test_live_values_override_the_idle_ones(nvml: Any, bed: Bed) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    bed.set_live(
        H200_UUID,
        H200_LIVE
        | {
            "utilization": 87,
            "memory_util": 41,
            "enc_util": 3,
            "power_draw": "612.25",
            "energy_mj": 9_000_000,
            "temperature": 71,
            "memory_temperature": 65,
            "sm_clock": 1980,
            "pcie_tx": 12000,
            "fault_temperature": 1,
        },
    )
    poll(lambda: N.nvmlDeviceGetUtilizationRates(h).gpu == 87, "the live utilization")
    assert N.nvmlDeviceGetUtilizationRates(h).memory == 41
    assert N.nvmlDeviceGetEncoderUtilization(h) == [3, 100000]
    assert N.nvmlDeviceGetPowerUsage(h) == 612250
    assert N.nvmlDeviceGetTotalEnergyConsumption(h) == 9_000_000
    assert N.nvmlDeviceGetTemperature(h, 0) == 71
    assert N.nvmlDeviceGetClockInfo(h, N.NVML_CLOCK_SM) == 1980
    assert N.nvmlDeviceGetPcieThroughput(h, 0) == 12000
    # busy and hot: no idle reason; the hardware's thermal slowdown
    assert N.nvmlDeviceGetCurrentClocksEventReasons(h) == 0x48
    # the live file goes away: the device file's idle values come back
    bed.live_file(H200_UUID).unlink()
    poll(lambda: N.nvmlDeviceGetTemperature(h, 0) == 33, "the idle temperature")
    assert N.nvmlDeviceGetPowerUsage(h) == 77450
    assert N.nvmlDeviceGetUtilizationRates(h).gpu == 0
    assert N.nvmlDeviceGetCurrentClocksEventReasons(h) == 1


def test_ecc_counts_follow_the_fault_keys(nvml: Any, bed: Bed) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    bed.set_live(H200_UUID, H200_LIVE | {"fault_ecc_sbe": 3, "fault_ecc_dbe": 1})
    poll(lambda: N.nvmlDeviceGetTotalEccErrors(h, 1, 0) == 1, "the live DBE count")
    assert N.nvmlDeviceGetTotalEccErrors(h, 0, 0) == 3
    assert N.nvmlDeviceGetTotalEccErrors(h, 0, 1) == 3
    assert N.nvmlDeviceGetMemoryErrorCounter(h, 1, 0, N.NVML_MEMORY_LOCATION_DRAM) == 1
    assert N.nvmlDeviceGetMemoryErrorCounter(h, 1, 0, N.NVML_MEMORY_LOCATION_SRAM) == 0
    l1 = N.NVML_MEMORY_LOCATION_L1_CACHE
    assert code(lambda: N.nvmlDeviceGetMemoryErrorCounter(h, 1, 0, l1)) == N.NVML_ERROR_NOT_SUPPORTED
    assert N.nvmlDeviceGetRemappedRows(h) == (0, 1, 1, 0)
    assert code(lambda: N.nvmlDeviceGetTotalEccErrors(h, 2, 0)) == N.NVML_ERROR_INVALID_ARGUMENT


def test_field_values_answer_each_field(nvml: Any, bed: Bed) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    bed.set_live(H200_UUID, H200_LIVE | {"fault_ecc_dbe": 2, "memory_temperature": 34})
    poll(lambda: N.nvmlDeviceGetTotalEccErrors(h, 1, 0) == 2, "the live DBE count")
    ids = [
        N.NVML_FI_DEV_ECC_CURRENT,
        N.NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
        N.NVML_FI_DEV_ECC_SBE_AGG_TOTAL,
        N.NVML_FI_DEV_MEMORY_TEMP,
        N.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        N.NVML_FI_DEV_POWER_INSTANT,
        (N.NVML_FI_DEV_POWER_INSTANT, 1),  # the module's power: no sensor
        N.NVML_FI_DEV_POWER_CURRENT_LIMIT,
        N.NVML_FI_DEV_POWER_MIN_LIMIT,
        N.NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT,
        N.NVML_FI_DEV_REMAPPED_PENDING,
        N.NVML_FI_DEV_PCIE_REPLAY_COUNTER,
        N.NVML_FI_DEV_NVLINK_LINK_COUNT,
        N.NVML_FI_DEV_NVLINK_SPEED_MBPS_L0,
        230,  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
        74,  # NVML_FI_DEV_PERF_POLICY_POWER
        270,  # NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN
        9999,
    ]
    values = N.nvmlDeviceGetFieldValues(h, ids)
    got = {}
    for v in values:
        if v.nvmlReturn != 0:
            got[(v.fieldId, v.scopeId)] = "unsupported"
        elif v.valueType == N.NVML_VALUE_TYPE_SIGNED_INT:
            got[(v.fieldId, v.scopeId)] = v.value.siVal
        elif v.valueType == N.NVML_VALUE_TYPE_UNSIGNED_INT:
            got[(v.fieldId, v.scopeId)] = v.value.uiVal
        else:
            assert v.valueType == N.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            got[(v.fieldId, v.scopeId)] = v.value.ullVal
        assert v.timestamp > 0
    assert got == {
        (1, 0): 1,
        (4, 0): 2,
        (5, 0): 0,
        (82, 0): 34,
        (83, 0): 3219225,
        (186, 0): 77447,
        (186, 1): "unsupported",
        (190, 0): 700000,
        (187, 0): 200000,
        (196, 0): 87 - 33,  # nvidia-smi's temperature.gpu.tlimit
        (144, 0): 1,
        (94, 0): 0,
        (91, 0): "unsupported",
        (84, 0): "unsupported",
        (230, 0): 0,  # NVML_GPU_RECOVERY_ACTION_NONE
        (74, 0): 0,  # no time held back by a clock event reason
        (270, 0): 0,
        (9999, 0): "unsupported",
    }


def test_remapped_rows_v2_and_sram_ecc_status(nvml: Any, bed: Bed) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    bed.set_live(H200_UUID, H200_LIVE | {"fault_ecc_dbe": 2})
    poll(lambda: N.nvmlDeviceGetTotalEccErrors(h, 1, 0) == 2, "the live DBE count")
    info = N.c_nvmlRemappedRowsInfo_v2_t()
    assert raw("nvmlDeviceGetRemappedRows_v2", h, ctypes.byref(info)) == 0
    assert plain(info) == {
        "corrActiveRemaps": 0,
        "corrInactiveRemaps": 0,
        "uncActiveRemaps": 2,
        "uncInactiveRemaps": 0,
        "bPending": 1,
        "bfailureOccurred": 0,  # nvidia-ml-py's spelling of NVIDIA's bFailureOccurred
    }
    status = N.c_nvmlEccSramErrorStatus_v1_t()
    status.version = 1  # not the version of this structure
    assert (
        raw("nvmlDeviceGetSramEccErrorStatus", h, ctypes.byref(status))
        == N.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    )
    status.version = N.nvmlEccSramErrorStatus_v1
    N.nvmlDeviceGetSramEccErrorStatus(h, ctypes.byref(status))
    values = plain(status)
    assert values.pop("version") == N.nvmlEccSramErrorStatus_v1
    assert set(values.values()) == {0}, values
    mig = N.nvmlDeviceGetMigDeviceHandleByIndex(N.nvmlDeviceGetHandleByIndex(1), 0)
    assert (
        code(lambda: N.nvmlDeviceGetSramEccErrorStatus(mig, ctypes.byref(status)))
        == N.NVML_ERROR_NOT_SUPPORTED
    )


# ---- MIG ---------------------------------------------------------------------------------------------


def profiles_of_the_h200() -> dict[str, Any]:
    """tests/data/nvml/nvml-h200-580.txt: GPU-instance profile info by profile index."""
    text = (DATA / "nvml-h200-580.txt").read_text()
    profiles: dict[str, Any] = json.loads(text.split("\n", 1)[1].rsplit("rc=", 1)[0])["gi_profiles"]
    return profiles


def test_gpu_instance_profiles_match_the_h200(nvml: Any) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)  # MIG disabled: NVIDIA lists the profiles anyway
    for index, want in profiles_of_the_h200().items():
        if isinstance(want, str):
            assert code(lambda i=int(index): N.nvmlDeviceGetGpuInstanceProfileInfo(h, i)) == 3, index
            continue
        got = plain(N.nvmlDeviceGetGpuInstanceProfileInfo(h, int(index)))  # nvmlGpuInstanceProfileInfo_v2
        assert got == {k: v for k, v in want.items() if k != "placements_err"} | {"version": got["version"]}
        v1 = plain(N.nvmlDeviceGetGpuInstanceProfileInfo(h, int(index), version=1))
        assert v1 == {k: v for k, v in got.items() if k not in ("version", "name")}
    assert code(lambda: N.nvmlDeviceGetGpuInstanceProfileInfo(h, 0x12)) == N.NVML_ERROR_INVALID_ARGUMENT
    assert N.nvmlDeviceGetGpuInstanceProfileInfoById(h, 20).name == "MIG 1g.18gb+me"
    # the third version (no isP2pSupported; capabilities after the name): 152 bytes, by offset
    v3 = (ctypes.c_uint * 38)()
    v3[0] = 0x03000098
    assert raw("nvmlDeviceGetGpuInstanceProfileInfoV", h, 7, ctypes.byref(v3)) == 0
    assert (v3[1], v3[2], v3[3], v3[4], v3[9]) == (20, 1, 1, 16, 1)  # id, slices, instances, SMs, OFA
    assert bytes(v3)[48:62] == b"MIG 1g.18gb+me" and v3[36] == 0  # name; capabilities
    v3[0] = 0x04000098
    assert raw("nvmlDeviceGetGpuInstanceProfileInfoV", h, 7, ctypes.byref(v3)) == 25  # version mismatch
    # placements, as nvidia-smi mig -lgipp prints them
    for profile_id, want_places in (
        (19, [(s, 1) for s in range(7)]),
        (14, [(0, 2), (2, 2), (4, 2)]),
        (0, [(0, 8)]),
    ):
        count = ctypes.c_uint(0)
        assert (
            raw("nvmlDeviceGetGpuInstancePossiblePlacements_v2", h, profile_id, None, ctypes.byref(count))
            == 0
        )
        assert count.value == len(want_places)
        places = (N.c_nvmlGpuInstancePlacement_t * count.value)()
        short = ctypes.c_uint(count.value - 1)
        rc = raw("nvmlDeviceGetGpuInstancePossiblePlacements_v2", h, profile_id, places, ctypes.byref(short))
        assert rc == N.NVML_ERROR_INSUFFICIENT_SIZE
        N.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, places, ctypes.byref(count))
        assert [(p.start, p.size) for p in places] == want_places
    assert code(lambda: N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 1234)) == N.NVML_ERROR_INVALID_ARGUMENT
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 7


def test_mig_devices_of_a_mig_mode_gpu(nvml: Any) -> None:
    gpu0 = N.nvmlDeviceGetHandleByIndex(0)
    assert N.nvmlDeviceGetMaxMigDeviceCount(gpu0) == 0
    assert code(lambda: N.nvmlDeviceGetMigDeviceHandleByIndex(gpu0, 0)) == N.NVML_ERROR_NOT_FOUND
    gpu = N.nvmlDeviceGetHandleByIndex(1)
    assert N.nvmlDeviceGetMigMode(gpu) == [1, 1]
    assert N.nvmlDeviceGetMaxMigDeviceCount(gpu) == 7
    assert code(lambda: N.nvmlDeviceGetUtilizationRates(gpu)) == N.NVML_ERROR_NOT_SUPPORTED
    assert code(lambda: N.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 2)) == N.NVML_ERROR_NOT_FOUND
    assert code(lambda: N.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 7)) == N.NVML_ERROR_INVALID_ARGUMENT
    migs = [N.nvmlDeviceGetMigDeviceHandleByIndex(gpu, i) for i in range(2)]
    for i, mig in enumerate(migs):
        assert N.nvmlDeviceIsMigDeviceHandle(mig).value == 1
        assert N.nvmlDeviceGetUUID(mig) == MIG_UUIDS[i]
        assert N.nvmlDeviceGetName(mig) == "NVIDIA H200 MIG 1g.18gb"
        assert N.nvmlDeviceGetGpuInstanceId(mig) == 7 + i
        assert N.nvmlDeviceGetComputeInstanceId(mig) == 0
        parent = N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        assert N.nvmlDeviceGetUUID(parent) == MIG_GPU_UUID
        attrs = N.nvmlDeviceGetAttributes(mig)
        assert (attrs.multiprocessorCount, attrs.sharedCopyEngineCount, attrs.sharedDecoderCount) == (
            16,
            1,
            1,
        )
        assert (attrs.sharedJpegCount, attrs.gpuInstanceSliceCount, attrs.memorySizeMB) == (1, 1, 16384)
        assert N.nvmlDeviceGetComputeRunningProcesses(mig) == []
        assert N.nvmlDeviceGetBAR1MemoryInfo(mig).bar1Total == 32768 * MIB
        assert (
            code(lambda mig=mig: N.nvmlDeviceGetMigDeviceHandleByIndex(mig, 0))
            == N.NVML_ERROR_INVALID_ARGUMENT
        )
        assert code(lambda mig=mig: N.nvmlDeviceGetTemperature(mig, 0)) == N.NVML_ERROR_NOT_SUPPORTED
    assert N.nvmlDeviceIsMigDeviceHandle(gpu).value == 0
    assert code(lambda: N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(gpu)) == N.NVML_ERROR_INVALID_ARGUMENT
    # a MIG device's memory is its GPU instance's, and its own live usage
    mem = N.nvmlDeviceGetMemoryInfo(migs[0])
    assert (mem.total, mem.used, mem.free) == (16384 * MIB, 1024 * MIB, 15360 * MIB)
    assert N.nvmlDeviceGetMemoryInfo(migs[1]).used == 0
    assert N.nvmlDeviceGetMemoryInfo(gpu).used == (615 + 2048) * MIB + 64 * 1024  # the reserve: docs/nvml.md


def test_gpu_and_compute_instances_behind_the_mig_devices(nvml: Any) -> None:
    gpu = N.nvmlDeviceGetHandleByIndex(1)
    gis = (N.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint(0)
    N.nvmlDeviceGetGpuInstances(gpu, 19, gis, ctypes.byref(count))
    assert count.value == 2
    infos = [N.nvmlGpuInstanceGetInfo(gis[i]) for i in range(2)]
    assert [(i.id, i.profileId, i.placement.start, i.placement.size) for i in infos] == [
        (7, 19, 0, 1),
        (8, 19, 1, 1),
    ]
    assert N.nvmlDeviceGetUUID(infos[0].device) == MIG_GPU_UUID
    N.nvmlDeviceGetGpuInstances(gpu, 14, gis, ctypes.byref(count))
    assert count.value == 0
    gi = N.nvmlDeviceGetGpuInstanceById(gpu, 8)
    assert N.nvmlGpuInstanceGetInfo(gi).id == 8
    assert code(lambda: N.nvmlDeviceGetGpuInstanceById(gpu, 9)) == N.NVML_ERROR_NOT_FOUND
    # two 1-slice instances taken: 5 of 7 left, the 2-slice profile fits twice (at 2 and 4)
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, 19) == 5
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, 14) == 2
    assert N.nvmlDeviceGetGpuInstanceRemainingCapacity(gpu, 0) == 0
    ci_profile = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0
    )
    assert (ci_profile.sliceCount, ci_profile.multiprocessorCount, ci_profile.name) == (1, 16, "MIG 1g.18gb")
    two = N.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE
    assert (
        code(lambda: N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, two, 0)) == N.NVML_ERROR_NOT_SUPPORTED
    )
    cis = (N.c_nvmlComputeInstance_t * 1)()
    N.nvmlGpuInstanceGetComputeInstances(
        gi, N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, cis, ctypes.byref(count)
    )
    assert count.value == 1
    ci = N.nvmlComputeInstanceGetInfo(cis[0])
    assert (ci.id, ci.profileId, ci.placement.size) == (0, 0, 1)
    assert N.nvmlGpuInstanceGetInfo(ci.gpuInstance).id == 8
    assert N.nvmlComputeInstanceGetInfo(N.nvmlGpuInstanceGetComputeInstanceById(gi, 0)).id == 0
    # MIG disabled: no GPU instances
    gpu0 = N.nvmlDeviceGetHandleByIndex(0)
    assert code(lambda: N.nvmlDeviceGetGpuInstances(gpu0, 19, gis, ctypes.byref(count))) == 3


# ---- events ------------------------------------------------------------------------------------------


def test_event_wait_times_out_then_delivers_an_xid_once(nvml: Any, bed: Bed) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    es = N.nvmlEventSetCreate()
    N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError | N.nvmlEventTypeDoubleBitEccError, es)
    assert code(lambda: N.nvmlDeviceRegisterEvents(h, 0x20, es)) == N.NVML_ERROR_NOT_SUPPORTED
    assert code(lambda: N.nvmlEventSetWait_v2(es, 50)) == N.NVML_ERROR_TIMEOUT
    bed.set_live(H200_UUID, H200_LIVE | {"fault_xid": 79, "fault_xid_seq": 1})
    event = N.nvmlEventSetWait_v2(es, 10_000)
    assert (event.eventType, event.eventData) == (N.nvmlEventTypeXidCriticalError, 79)
    assert N.nvmlDeviceGetIndex(event.device) == 0
    assert (event.gpuInstanceId, event.computeInstanceId) == (0xFFFFFFFF, 0xFFFFFFFF)
    assert code(lambda: N.nvmlEventSetWait_v2(es, 0)) == N.NVML_ERROR_TIMEOUT  # delivered once
    bed.set_live(H200_UUID, H200_LIVE | {"fault_xid": 48, "fault_xid_seq": 2, "fault_ecc_dbe": 1})
    got = {N.nvmlEventSetWait_v2(es, 10_000).eventType, N.nvmlEventSetWait_v2(es, 10_000).eventType}
    assert got == {N.nvmlEventTypeXidCriticalError, N.nvmlEventTypeDoubleBitEccError}
    # the first version of the call fills the first version of the structure: no instance IDs
    bed.set_live(H200_UUID, H200_LIVE | {"fault_xid": 31, "fault_xid_seq": 3, "fault_ecc_dbe": 1})
    data = N.c_nvmlEventData_t()
    data.gpuInstanceId = 1234
    assert raw("nvmlEventSetWait", es, ctypes.byref(data), ctypes.c_uint(10_000)) == 0
    assert (data.eventData, data.gpuInstanceId) == (31, 1234)
    N.nvmlEventSetFree(es)
    assert raw("nvmlEventSetFree", es) == N.NVML_ERROR_INVALID_ARGUMENT
    assert (
        raw("nvmlEventSetWait_v2", es, ctypes.byref(data), ctypes.c_uint(0)) == N.NVML_ERROR_INVALID_ARGUMENT
    )


# ---- the library as a whole --------------------------------------------------------------------------


def exported(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


def test_every_nvml_name_is_a_symbol_and_nothing_else_is(lib_path: Path) -> None:
    names = {
        line.strip()
        for line in (REPO / "native/nvml/symbols.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert len(names) > 400
    assert exported(lib_path) == names


def test_stubs_answer_not_supported_or_no_permission(nvml: Any) -> None:
    h = N.nvmlDeviceGetHandleByIndex(0)
    assert code(lambda: N.nvmlDeviceGetNvLinkState(h, 0)) == N.NVML_ERROR_NOT_SUPPORTED
    assert code(lambda: N.nvmlDeviceGetCpuAffinity(h, 4)) == N.NVML_ERROR_NOT_SUPPORTED
    assert code(lambda: N.nvmlDeviceSetPersistenceMode(h, 0)) == N.NVML_ERROR_NO_PERMISSION
    assert code(lambda: N.nvmlDeviceClearEccErrorCounts(h, 0)) == N.NVML_ERROR_NO_PERMISSION
    assert code(lambda: N.nvmlDeviceCreateGpuInstance(h, 19)) == N.NVML_ERROR_NO_PERMISSION
    assert code(lambda: N.nvmlDeviceResetGpuLockedClocks(h)) == N.NVML_ERROR_NO_PERMISSION


GLIBC = re.compile(r"GLIBC_(\d+)\.(\d+)(?:\.(\d+))?")


def test_the_library_needs_nothing_newer_than_glibc_2_17(lib_path: Path) -> None:
    out = subprocess.run(["objdump", "-T", str(lib_path)], capture_output=True, text=True, check=True).stdout
    versions = {tuple(int(p or 0) for p in m.groups()) for m in GLIBC.finditer(out)}
    assert versions, "objdump shows no glibc symbol versions"
    assert max(versions) <= (2, 17, 0), sorted(versions)
    assert not re.search(r"\b(f?stat|lstat|fstatat|statx)(64)?\b", out)  # GLIBC_2.33 in new glibc
    assert "pthread_" not in out
    check = subprocess.run(
        ["make", "-s", "-C", "native", "check-glibc"], cwd=REPO, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    assert "GLIBC_2.17 (<= 2.17)" in check.stdout


def test_the_soname_and_the_static_library(lib_path: Path) -> None:
    dynamic = subprocess.run(
        ["objdump", "-p", str(lib_path)], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"SONAME\s+libnvidia-ml\.so\.1\b", dynamic)
    assert re.findall(r"NEEDED\s+(\S+)", dynamic) == ["libc.so.6"]
    assert (lib_path.parent / "libdranvml.a").is_file()
    assert (REPO / "dra_fake/gpu/nvidia_smi/native/libnvidia-ml.so.1").read_bytes() == lib_path.read_bytes()


def test_the_probe_runs_cleanly(lib_path: Path, bed: Bed) -> None:
    env = {"PATH": "/usr/bin:/bin", "DRA_FAKE_ROOT": str(bed.root), "NVML_PROBE_LIB": str(lib_path)}
    out = subprocess.run(
        [sys.executable, str(REPO / "hack/nvml/probe.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert (result["init"], result["count"], result["shutdown.third"]) == (
        None,
        3,
        "ERR NVML_ERROR_UNINITIALIZED",
    )
    assert result["devices"][2] == {"handle": "ERR NVML_ERROR_GPU_IS_LOST"}
    for dev in result["devices"][:2]:
        assert set(dev) == {"values", "mig", "lookups", "raw"}
        # only the bindings the probe calls with too few arguments fail to call (as on the real GPU)
        broken = {k: v for k, v in dev["values"].items() if isinstance(v, str) and v.startswith("EXC")}
        assert all("TypeError" in v and "missing" in v for v in broken.values()), broken
    values = result["devices"][0]["values"]
    assert (values["Name"], values["UUID"], values["PowerUsage"]) == ("NVIDIA H200", H200_UUID, 77447)
    assert result["devices"][0]["lookups"]["ByPciBusId.nodomain"] == "same"
    assert result["devices"][0]["mig"] == []
    migs = result["devices"][1]["mig"]
    assert [(m["UUID"], m["Name"], m["GpuInstanceId"], m["IsMigDeviceHandle"]) for m in migs] == [
        (MIG_UUIDS[0], "NVIDIA H200 MIG 1g.18gb", 7, 1),
        (MIG_UUIDS[1], "NVIDIA H200 MIG 1g.18gb", 8, 1),
    ]
    assert migs[0]["MemoryInfo_v2"]["used"] == 1024 << 20
    assert result["events.xid.wait200ms"] == "wait ERR NVML_ERROR_TIMEOUT"


def test_a_go_nvml_program_reads_the_devices(lib_path: Path, bed: Bed, tmp_path: Path) -> None:
    go = shutil.which("go")
    assert go is not None, "go is needed to build hack/nvml/gonvml (a go-nvml consumer)"
    program = tmp_path / "gonvml"
    env = dict(os.environ, CGO_CFLAGS="-Wno-deprecated-declarations", CGO_ENABLED="1")
    build = subprocess.run(
        [go, "build", "-o", str(program), "."],
        cwd=REPO / "hack/nvml/gonvml",
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr
    run_env = {
        "PATH": "/usr/bin:/bin",
        "LD_LIBRARY_PATH": str(lib_path.parent),
        "DRA_FAKE_ROOT": str(bed.root),
    }
    # the lost GPU: go-nvml gets GPU_IS_LOST for its handle, as with NVIDIA's library
    lost = subprocess.run([str(program)], env=run_env, capture_output=True, text=True, timeout=60)
    assert lost.returncode == 1
    assert "DeviceGetHandleByIndex(2): GPU is lost" in lost.stderr
    (bed.devices / "00000000-3B-00.0_gpu").unlink()
    out = subprocess.run([str(program)], env=run_env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert (report["driver"], report["nvml"], report["cuda"], report["count"]) == (
        "580.159.04",
        "13.580.159.04",
        13000,
        2,
    )
    h200, mig_gpu = report["devices"]
    assert (h200["name"], h200["uuid"], h200["busId"], h200["powerMilliW"]) == (
        "NVIDIA H200",
        H200_UUID,
        "00000000:00:06.0",
        77447,
    )
    assert "errors" not in h200
    assert mig_gpu["migCurrent"] == 1
    assert mig_gpu["errors"] == {"utilization": "Not Supported"}
    assert [(m["uuid"], m["name"], m["gi"], m["sms"]) for m in mig_gpu["migDevices"]] == [
        (MIG_UUIDS[0], "NVIDIA H200 MIG 1g.18gb", 7, 16),
        (MIG_UUIDS[1], "NVIDIA H200 MIG 1g.18gb", 8, 16),
    ]
