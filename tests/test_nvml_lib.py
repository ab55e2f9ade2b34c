"""dra-fake's NVML library (native/, docs/nvml.md) through NVIDIA's Python bindings (nvidia-ml-py):
init and shutdown, identity, memory, argument checks, lookups and faults. Telemetry and events are in
tests/test_nvml_telemetry.py, MIG in tests/test_nvml_mig.py, the library as a whole (its symbols,
glibc, soname, the probe and a go-nvml program) in tests/test_nvml_symbols.py.

The library is built once per session (`make native`); each test writes device and live files in
a temporary root exactly as docs/nvml.md describes them and loads the library there
(DRA_FAKE_ROOT; tests/nvmlbed.py). Values the fixture shares with the real H200 of tests/data/nvml
are compared with that capture.
"""

from __future__ import annotations

import ast
import ctypes
import os
from pathlib import Path
from typing import Any

import pynvml as N
import pytest

from tests.nvmlbed import (
    H200,
    H200_LIVE,
    H200_UUID,
    LOST_UUID,
    MIB,
    MIG_GPU_UUID,
    MIG_UUIDS,
    Bed,
    code,
    load,
    mig_fields,
    nvdump,
    plain,
    poll,
    raw,
    shutdown_all,
)

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
