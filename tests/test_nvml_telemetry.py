"""dra-fake's NVML library through nvidia-ml-py (docs/nvml.md): readings and limits, live values, ECC,
field values, row remapping, and XID events (the bed of tests/nvmlbed.py)."""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml as N

from tests.nvmlbed import H200_LIVE, H200_UUID, Bed, code, nvdump, plain, poll, raw

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
