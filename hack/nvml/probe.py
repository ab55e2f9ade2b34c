"""Probe an NVML library through nvidia-ml-py and print what every call returned, as JSON.

The same probe runs against NVIDIA's libnvidia-ml.so.1 on a real GPU and against dra-fake's
(select it with LD_LIBRARY_PATH, or NVML_PROBE_LIB=/path/to/libnvidia-ml.so.1): the two outputs
are compared key by key (hack/nvml/compare.py). Only getters are called; nothing changes a
GPU's settings. Values that belong to one machine or one moment are still printed; the
comparison decides what to ignore.

    python3 hack/nvml/probe.py > probe.json
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import pynvml as N


def _load_library() -> None:
    path = os.environ.get("NVML_PROBE_LIB")
    if path:  # pynvml loads "libnvidia-ml.so.1" by name; hand it the library to probe instead
        N.nvmlLib = ctypes.CDLL(path)


def _error_name(code: int) -> str:
    for name, value in vars(N).items():
        if name.startswith("NVML_ERROR_") and value == code:
            return name
    return f"NVML_ERROR_{code}"


def plain(value: Any) -> Any:
    """ctypes structures, bytes and lists as JSON values."""
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    if isinstance(value, (ctypes.Structure, ctypes.Union)):
        out = {}
        for field in value._fields_:
            name = field[0]
            if name.startswith("_"):
                continue
            out[name] = plain(getattr(value, name))
        return out
    if isinstance(value, ctypes._SimpleCData):
        return plain(value.value)
    if hasattr(value, "__dict__") and not isinstance(value, type):  # nvmlFriendlyObject
        return {k: plain(v) for k, v in vars(value).items()}
    return value


def call(fn: Callable[[], Any]) -> Any:
    try:
        return plain(fn())
    except N.NVMLError as err:
        return f"ERR {_error_name(err.value)}"
    except Exception as err:  # a binding that cannot even call the function
        return f"EXC {type(err).__name__}: {err}"[:160]


def raw(name: str, *args: Any) -> Any:
    """The return code of a C call with exactly these arguments (buffer sizes, NULLs)."""
    try:
        fn = N._nvmlGetFunctionPointer(name)
    except N.NVMLError as err:
        return f"ERR {_error_name(err.value)}"
    code = fn(*args)
    return "SUCCESS" if code == 0 else f"ERR {_error_name(code)}"


def device_probe(h: Any) -> dict[str, Any]:
    d: dict[str, Any] = {}

    def put(key: str, fn: Callable[[], Any]) -> None:
        d[key] = call(fn)

    for name in (
        "Name",
        "UUID",
        "Serial",
        "Index",
        "MinorNumber",
        "Brand",
        "Architecture",
        "CudaComputeCapability",
        "BoardPartNumber",
        "BoardId",
        "MultiGpuBoard",
        "VbiosVersion",
        "InforomImageVersion",
        "PciInfo",
        "PciInfo_v3",
        "MemoryInfo",
        "BAR1MemoryInfo",
        "UtilizationRates",
        "EncoderUtilization",
        "DecoderUtilization",
        "JpgUtilization",
        "OfaUtilization",
        "PowerUsage",
        "TotalEnergyConsumption",
        "PowerManagementLimit",
        "PowerManagementDefaultLimit",
        "PowerManagementLimitConstraints",
        "EnforcedPowerLimit",
        "PowerState",
        "PerformanceState",
        "CurrentClocksEventReasons",
        "SupportedClocksEventReasons",
        "CurrentClocksThrottleReasons",
        "FanSpeed",
        "NumFans",
        "PersistenceMode",
        "ComputeMode",
        "DisplayMode",
        "DisplayActive",
        "EccMode",
        "CurrPcieLinkGeneration",
        "CurrPcieLinkWidth",
        "MaxPcieLinkGeneration",
        "MaxPcieLinkWidth",
        "GpuMaxPcieLinkGeneration",
        "PcieLinkMaxSpeed",
        "PcieSpeed",
        "PcieReplayCounter",
        "ComputeRunningProcesses",
        "GraphicsRunningProcesses",
        "MPSComputeRunningProcesses",
        "MigMode",
        "MaxMigDeviceCount",
        "IsMigDeviceHandle",
        "GpuInstanceId",
        "ComputeInstanceId",
        "Attributes",
        "NumGpuCores",
        "MemoryBusWidth",
        "BusType",
        "GpuFabricInfo",
        "RetiredPagesPendingStatus",
        "RemappedRows",
        "AccountingMode",
        "AccountingBufferSize",
        "AutoBoostedClocksEnabled",
        "GspFirmwareMode",
        "GspFirmwareVersion",
        "VirtualizationMode",
        "HostVgpuMode",
        "NumaNodeId",
        "AdaptiveClockInfoStatus",
        "SupportedMemoryClocks",
        "PowerSource",
        "DynamicPstatesInfo",
        "CurrentClockFreqs",
        "ModuleId",
        "PlatformInfo",
        "SramEccErrorStatus",
        "ConfComputeMemSizeInfo",
        "MemoryAffinity",
        "CpuAffinity",
        "SupportedEventTypes",
    ):
        fn = getattr(N, f"nvmlDevice{'Get' if name != 'IsMigDeviceHandle' else ''}{name}", None)
        if fn is None:
            d[name] = "EXC no such binding"
            continue
        if name in ("MemoryAffinity", "CpuAffinity"):
            put(name, lambda fn=fn, name=name: fn(h, 4) if name == "CpuAffinity" else fn(h, 4, 0))
        else:
            put(name, lambda fn=fn: fn(h))
    put("MemoryInfo_v2", lambda: N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2))
    for sensor, label in ((N.NVML_TEMPERATURE_GPU, "gpu"),):
        put(f"Temperature.{label}", lambda s=sensor: N.nvmlDeviceGetTemperature(h, s))
    for t in range(N.NVML_TEMPERATURE_THRESHOLD_COUNT):
        put(f"TemperatureThreshold.{t}", lambda t=t: N.nvmlDeviceGetTemperatureThreshold(h, t))
    clocks = {
        "graphics": N.NVML_CLOCK_GRAPHICS,
        "sm": N.NVML_CLOCK_SM,
        "mem": N.NVML_CLOCK_MEM,
        "video": N.NVML_CLOCK_VIDEO,
    }
    for label, c in clocks.items():
        put(f"ClockInfo.{label}", lambda c=c: N.nvmlDeviceGetClockInfo(h, c))
        put(f"MaxClockInfo.{label}", lambda c=c: N.nvmlDeviceGetMaxClockInfo(h, c))
        put(f"ApplicationsClock.{label}", lambda c=c: N.nvmlDeviceGetApplicationsClock(h, c))
        put(f"DefaultApplicationsClock.{label}", lambda c=c: N.nvmlDeviceGetDefaultApplicationsClock(h, c))
        put(f"MaxCustomerBoostClock.{label}", lambda c=c: N.nvmlDeviceGetMaxCustomerBoostClock(h, c))
        for cid in range(N.NVML_CLOCK_ID_COUNT):
            put(f"Clock.{label}.{cid}", lambda c=c, cid=cid: N.nvmlDeviceGetClock(h, c, cid))
    for err_type in (0, 1):
        for counter in (0, 1):
            put(
                f"TotalEccErrors.{err_type}.{counter}",
                lambda e=err_type, c=counter: N.nvmlDeviceGetTotalEccErrors(h, e, c),
            )
            for loc in range(5):
                put(
                    f"MemoryErrorCounter.{err_type}.{counter}.{loc}",
                    lambda e=err_type, c=counter, loc=loc: N.nvmlDeviceGetMemoryErrorCounter(h, e, c, loc),
                )
    for cause in (0, 1):
        put(f"RetiredPages.{cause}", lambda c=cause: N.nvmlDeviceGetRetiredPages(h, c))
    put("PcieThroughput.tx", lambda: N.nvmlDeviceGetPcieThroughput(h, 0))
    put("PcieThroughput.rx", lambda: N.nvmlDeviceGetPcieThroughput(h, 1))
    for link in (0, 1, 17, 18):
        put(f"NvLinkState.{link}", lambda link=link: N.nvmlDeviceGetNvLinkState(h, link))
        put(f"NvLinkVersion.{link}", lambda link=link: N.nvmlDeviceGetNvLinkVersion(h, link))
    for perf in (N.NVML_PERF_POLICY_POWER, N.NVML_PERF_POLICY_THERMAL):
        put(f"ViolationStatus.{perf}", lambda p=perf: N.nvmlDeviceGetViolationStatus(h, p))
    fields = [1, 2, 3, 4, 5, 6, 84, 140, 150, 151, 152, 153, 154, 155, 186, 187, 188, 189, 190]
    put(
        "FieldValues",
        lambda: [
            {
                "fieldId": v.fieldId,
                "nvmlReturn": v.nvmlReturn,
                "valueType": v.valueType,
                "value": v.value.ullVal if v.nvmlReturn == 0 else None,
            }
            for v in N.nvmlDeviceGetFieldValues(h, fields)
        ],
    )
    # MIG: the profiles the GPU offers, their placements, and what exists now.
    for p in range(N.NVML_GPU_INSTANCE_PROFILE_COUNT):
        put(f"GpuInstanceProfileInfo.{p}", lambda p=p: N.nvmlDeviceGetGpuInstanceProfileInfo(h, p))
        put(f"GpuInstanceProfileInfoV.{p}", lambda p=p: N.nvmlDeviceGetGpuInstanceProfileInfoV(h, p))
        info = call(lambda p=p: N.nvmlDeviceGetGpuInstanceProfileInfo(h, p))
        if isinstance(info, dict):
            pid = info["id"]
            put(
                f"GpuInstancePossiblePlacements.{pid}",
                lambda pid=pid: [
                    {"start": x.start, "size": x.size}
                    for x in N.nvmlDeviceGetGpuInstancePossiblePlacements(h, pid)
                ],
            )
            put(
                f"GpuInstanceRemainingCapacity.{pid}",
                lambda pid=pid: N.nvmlDeviceGetGpuInstanceRemainingCapacity(h, pid),
            )
            put(f"GpuInstances.{pid}", lambda pid=pid: len(N.nvmlDeviceGetGpuInstances(h, pid)))
    put("MigDeviceHandleByIndex.0", lambda: N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0) and "handle")
    put(
        "DeviceHandleFromMigDeviceHandle",
        lambda: N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h) and "handle",
    )
    return d


def mig_probe(h: Any) -> list[dict[str, Any]]:
    """The MIG devices NVML shows of a GPU in MIG mode (none otherwise), by MIG device index."""
    devices = []
    try:
        count = N.nvmlDeviceGetMaxMigDeviceCount(h) if N.nvmlDeviceGetMigMode(h)[0] else 0
    except N.NVMLError:
        return []
    for i in range(count):
        try:
            m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except N.NVMLError:  # NOT_FOUND: no MIG device at this index
            continue
        d = {"index": i}
        for name in ("UUID", "Name", "GpuInstanceId", "ComputeInstanceId", "Attributes", "IsMigDeviceHandle"):
            fn = getattr(N, ("nvmlDevice" if name == "IsMigDeviceHandle" else "nvmlDeviceGet") + name)
            d[name] = call(lambda m=m, fn=fn: fn(m))
        d["MemoryInfo_v2"] = call(lambda m=m: N.nvmlDeviceGetMemoryInfo(m, version=N.nvmlMemory_v2))
        devices.append(d)
    return devices


def raw_probe(h: Any) -> dict[str, Any]:
    """Argument checks every binding relies on: short buffers, NULL outputs, bad handles."""
    out: dict[str, Any] = {}
    buf = ctypes.create_string_buffer(256)
    for length in (0, 1, 4, 16, 40, 41, 80, 96, 256):
        out[f"nvmlDeviceGetUUID.len{length}"] = raw("nvmlDeviceGetUUID", h, buf, ctypes.c_uint(length))
        out[f"nvmlDeviceGetName.len{length}"] = raw("nvmlDeviceGetName", h, buf, ctypes.c_uint(length))
        out[f"nvmlDeviceGetSerial.len{length}"] = raw("nvmlDeviceGetSerial", h, buf, ctypes.c_uint(length))
        out[f"nvmlSystemGetDriverVersion.len{length}"] = raw(
            "nvmlSystemGetDriverVersion", buf, ctypes.c_uint(length)
        )
        out[f"nvmlSystemGetNVMLVersion.len{length}"] = raw(
            "nvmlSystemGetNVMLVersion", buf, ctypes.c_uint(length)
        )
        out[f"nvmlDeviceGetVbiosVersion.len{length}"] = raw(
            "nvmlDeviceGetVbiosVersion", h, buf, ctypes.c_uint(length)
        )
        out[f"nvmlDeviceGetBoardPartNumber.len{length}"] = raw(
            "nvmlDeviceGetBoardPartNumber", h, buf, ctypes.c_uint(length)
        )
    out["nvmlDeviceGetName.nullbuf"] = raw("nvmlDeviceGetName", h, None, ctypes.c_uint(96))
    out["nvmlDeviceGetMemoryInfo.null"] = raw("nvmlDeviceGetMemoryInfo", h, None)
    out["nvmlDeviceGetCount_v2.null"] = raw("nvmlDeviceGetCount_v2", None)
    out["nvmlDeviceGetMemoryInfo.nullhandle"] = raw(
        "nvmlDeviceGetMemoryInfo", None, ctypes.byref(N.c_nvmlMemory_t())
    )
    mem2 = N.c_nvmlMemory_v2_t()
    mem2.version = 1
    out["nvmlDeviceGetMemoryInfo_v2.badversion"] = raw("nvmlDeviceGetMemoryInfo_v2", h, ctypes.byref(mem2))
    count = ctypes.c_uint(0)
    out["nvmlDeviceGetComputeRunningProcesses_v3.count0"] = raw(
        "nvmlDeviceGetComputeRunningProcesses_v3", h, ctypes.byref(count), None
    )
    out["nvmlDeviceGetComputeRunningProcesses_v3.count0.value"] = count.value
    handle = N.c_nvmlDevice_t()
    for name, arg in (
        ("nvmlDeviceGetHandleByUUID.bogus", b"GPU-00000000-0000-0000-0000-000000000000"),
        ("nvmlDeviceGetHandleByUUID.garbage", b"not-a-uuid"),
        ("nvmlDeviceGetHandleByUUID.empty", b""),
        ("nvmlDeviceGetHandleBySerial.bogus", b"0000000000000"),
        ("nvmlDeviceGetHandleByPciBusId_v2.bogus", b"00000000:FF:1F.0"),
        ("nvmlDeviceGetHandleByPciBusId_v2.garbage", b"xyz"),
    ):
        fn = name.split(".")[0]
        out[name] = raw(fn, ctypes.c_char_p(arg), ctypes.byref(handle))
    n = N.nvmlDeviceGetCount()
    out["nvmlDeviceGetHandleByIndex_v2.count"] = raw(
        "nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(n), ctypes.byref(handle)
    )
    out["nvmlDeviceGetHandleByIndex_v2.null"] = raw("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(0), None)
    return out


def handle_lookups(h: Any) -> dict[str, Any]:
    """Which spellings of a bus ID, UUID and serial find the same GPU."""
    out: dict[str, Any] = {}
    bus = N.nvmlDeviceGetPciInfo(h).busId
    bus = bus.decode() if isinstance(bus, bytes) else bus
    uuid = N.nvmlDeviceGetUUID(h)
    index = N.nvmlDeviceGetIndex(h)

    def same(fn: Callable[[], Any]) -> Any:
        r = call(fn)
        if isinstance(r, str) and r.startswith(("ERR", "EXC")):
            return r
        return "same" if N.nvmlDeviceGetIndex(fn()) == index else "other"

    domain, rest = bus.split(":", 1)
    for label, spelling in (
        ("full", bus),
        ("lower", bus.lower()),
        ("domain4", f"{domain[-4:]}:{rest}"),
        ("nodomain", rest),
        ("domain4lower", f"{domain[-4:]}:{rest}".lower()),
    ):
        out[f"ByPciBusId.{label}"] = same(lambda s=spelling: N.nvmlDeviceGetHandleByPciBusId(s))
    out["ByUUID"] = same(lambda: N.nvmlDeviceGetHandleByUUID(uuid))
    out["ByUUID.lower"] = same(lambda: N.nvmlDeviceGetHandleByUUID(uuid.lower()))
    out["ByUUID.upper"] = same(lambda: N.nvmlDeviceGetHandleByUUID("GPU-" + uuid[4:].upper()))
    out["ByUUID.nodash"] = same(lambda: N.nvmlDeviceGetHandleByUUID(uuid[4:]))
    out["BySerial"] = same(lambda: N.nvmlDeviceGetHandleBySerial(N.nvmlDeviceGetSerial(h)))
    return out


def main() -> int:
    _load_library()
    result: dict[str, Any] = {}
    result["before_init.DeviceGetCount"] = call(N.nvmlDeviceGetCount)
    result["before_init.SystemGetDriverVersion"] = call(N.nvmlSystemGetDriverVersion)
    result["init"] = call(N.nvmlInit)
    result["init.again"] = call(N.nvmlInit)
    system = {}
    for name in ("DriverVersion", "NVMLVersion", "CudaDriverVersion", "CudaDriverVersion_v2", "DriverBranch"):
        system[name] = call(getattr(N, f"nvmlSystemGet{name}"))
    system["ProcessName.1"] = call(lambda: N.nvmlSystemGetProcessName(1))
    system["ErrorString"] = {str(c): N.nvmlErrorString(c) for c in [*range(31), 999]}
    result["system"] = system
    count = call(N.nvmlDeviceGetCount)
    result["count"] = count
    result["devices"] = []
    for i in range(count if isinstance(count, int) else 0):
        try:
            h = N.nvmlDeviceGetHandleByIndex(i)
        except N.NVMLError as err:  # a lost GPU still counts but has no handle
            result["devices"].append({"handle": f"ERR {_error_name(err.value)}"})
            continue
        dev: dict[str, Any] = {}
        parts = (
            ("values", device_probe),
            ("mig", mig_probe),
            ("lookups", handle_lookups),
            ("raw", raw_probe),
        )
        for key, part in parts:
            try:
                dev[key] = part(h)
            except Exception as err:  # one broken section must not cost the rest of the capture
                dev[key] = f"EXC {type(err).__name__}: {err}"
        result["devices"].append(dev)
    # events: what a monitoring agent waits on; nothing is expected on an idle GPU
    if isinstance(count, int) and count:

        def events() -> Any:
            h = N.nvmlDeviceGetHandleByIndex(0)
            es = N.nvmlEventSetCreate()
            try:
                N.nvmlDeviceRegisterEvents(h, N.nvmlEventTypeXidCriticalError, es)
                try:
                    N.nvmlEventSetWait_v2(es, 200)
                    return "event"
                except N.NVMLError as err:
                    return f"wait ERR {_error_name(err.value)}"
            finally:
                N.nvmlEventSetFree(es)

        result["events.xid.wait200ms"] = call(events)
    result["shutdown"] = call(N.nvmlShutdown)
    result["shutdown.again"] = call(N.nvmlShutdown)
    result["shutdown.third"] = call(N.nvmlShutdown)
    result["after_shutdown.DeviceGetCount"] = call(N.nvmlDeviceGetCount)
    json.dump(result, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
