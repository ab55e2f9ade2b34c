/* Memory, utilization, power, thermal, clocks, performance state and clocks event reasons. */
#include <time.h>

#include "internal.h"

#define MIB (1024ULL * 1024ULL)

/* ---- memory ------------------------------------------------------------------------------------ */

struct memory {
    unsigned long long total, reserved, used; /* bytes; used without reserved */
};

/* A GPU: memory_mib, fb_reserved, the live memory_used. A MIG device: its GPU instance's memory
 * (mig_memory_mib) and the live mig_memory_used of its own live file. A share with its own view:
 * the share's memory, nothing reserved, the memory_used of the share's live file. */
static nvmlReturn_t memory_of(nvmlDevice_t device, struct memory *m)
{
    unsigned long long total, reserved = 0, used = 0;
    if (dn_share_view(device, &total)) {
        if (!dn_share_live_u64(device, "memory_used", &used))
            used = 0;
        m->total = total * MIB;
        m->reserved = 0;
        m->used = used > total ? m->total : used * MIB;
        return NVML_SUCCESS;
    }
    if (!dn_static_u64(device, device->is_mig ? "mig_memory_mib" : "memory_mib", &total) || total > (1ULL << 40))
        return NVML_ERROR_NOT_SUPPORTED;
    if (!device->is_mig)
        dn_static_u64(device, "fb_reserved", &reserved);
    if (!dn_live_u64(device, device->is_mig ? "mig_memory_used" : "memory_used", &used))
        used = 0;
    m->total = total * MIB;
    /* The driver reserves a fraction of a MiB less than nvidia-smi prints (H200: 644939776 B =
     * 615.06 MiB, printed 616): docs/nvml.md, "Free memory". */
    m->reserved = reserved > total ? m->total : reserved ? (reserved - 1) * MIB + 64 * 1024 : 0;
    m->used = used > total ? m->total : used * MIB;
    if (m->reserved + m->used > m->total)
        m->used = m->total - m->reserved;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct memory m;
    nvmlReturn_t rc = dn_check(device, memory);
    if (rc == NVML_SUCCESS)
        rc = memory_of(device, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    memory->total = m.total;
    memory->used = m.reserved + m.used; /* the first version counts the reserved memory as used */
    memory->free = m.total - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct memory m;
    nvmlReturn_t rc = dn_check(device, memory);
    if (rc != NVML_SUCCESS)
        return rc;
    if (memory->version != nvmlMemory_v2)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    rc = memory_of(device, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    memory->total = m.total;
    memory->reserved = m.reserved;
    memory->used = m.used;
    memory->free = m.total - m.reserved - m.used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    unsigned long long total;
    nvmlReturn_t rc = dn_check(device, bar1Memory);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dn_static_u64(device, device->is_mig ? "mig_bar1_mib" : "bar1_mib", &total) || total > (1ULL << 40))
        return NVML_ERROR_NOT_SUPPORTED;
    bar1Memory->bar1Total = total * MIB;
    bar1Memory->bar1Used = 0; /* no mappings: no process of the container runs on a real GPU */
    bar1Memory->bar1Free = bar1Memory->bar1Total;
    return NVML_SUCCESS;
}

/* ---- utilization --------------------------------------------------------------------------------- */

/* a live percentage of the GPU, 0 until the plugin writes one; a GPU in MIG mode has none; a
 * share with its own view: its own file's */
static nvmlReturn_t percent(nvmlDevice_t device, const char *key, unsigned *out)
{
    unsigned long long v = 0, mib;
    int found;
    if (dn_mig_enabled(device))
        return NVML_ERROR_NOT_SUPPORTED;
    found = dn_share_view(device, &mib) ? dn_share_live_u64(device, key, &v) : dn_live_u64(device, key, &v);
    if (!found || v > 100)
        v = 0;
    *out = (unsigned)v;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    unsigned gpu, memory;
    nvmlReturn_t rc = dn_check_gpu(device, utilization);
    if (rc == NVML_SUCCESS)
        rc = percent(device, "utilization", &gpu);
    if (rc == NVML_SUCCESS)
        rc = percent(device, "memory_util", &memory);
    if (rc == NVML_SUCCESS) {
        utilization->gpu = gpu;
        utilization->memory = memory;
    }
    return rc;
}

/* encoder, decoder, JPEG, OFA: NVML samples them over 100 ms windows (samplingPeriodUs) */
static nvmlReturn_t engine_util(nvmlDevice_t device, const char *key, unsigned *utilization,
                                unsigned *samplingPeriodUs)
{
    nvmlReturn_t rc = dn_check_gpu(device, utilization);
    if (rc != NVML_SUCCESS)
        return rc;
    if (samplingPeriodUs == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = percent(device, key, utilization);
    if (rc == NVML_SUCCESS)
        *samplingPeriodUs = 100000;
    return rc;
}

nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    return engine_util(device, "enc_util", utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                             unsigned int *samplingPeriodUs)
{
    return engine_util(device, "dec_util", utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetJpgUtilization(nvmlDevice_t device, unsigned int *utilization,
                                         unsigned int *samplingPeriodUs)
{
    return engine_util(device, "jpg_util", utilization, samplingPeriodUs);
}

nvmlReturn_t nvmlDeviceGetOfaUtilization(nvmlDevice_t device, unsigned int *utilization,
                                         unsigned int *samplingPeriodUs)
{
    return engine_util(device, "ofa_util", utilization, samplingPeriodUs);
}

/* ---- power ------------------------------------------------------------------------------------- */

/* watts (a static or live value, "77.51") as milliwatts */
static nvmlReturn_t milliwatts(nvmlDevice_t device, const char *key, int reading, unsigned *out)
{
    unsigned long long mw;
    int ok = reading ? dn_reading_milli(device, key, &mw) : dn_parse_milli(dn_static(device, key), &mw);
    if (!ok || mw > 0xffffffffULL)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned)mw;
    return NVML_SUCCESS;
}

static nvmlReturn_t power_value(nvmlDevice_t device, const char *key, int reading, unsigned *out)
{
    nvmlReturn_t rc = dn_check_gpu(device, out);
    return rc != NVML_SUCCESS ? rc : milliwatts(device, key, reading, out);
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    return power_value(device, "power_draw", 1, power);
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    unsigned mw;
    unsigned long long mj = 0;
    nvmlReturn_t rc = dn_check_gpu(device, energy);
    if (rc == NVML_SUCCESS)
        rc = milliwatts(device, "power_draw", 1, &mw); /* a GPU with a power reading counts energy */
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dn_live_u64(device, "energy_mj", &mj))
        mj = 0;
    *energy = mj;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerManagementMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    unsigned mw;
    nvmlReturn_t rc = dn_check_gpu(device, mode);
    if (rc == NVML_SUCCESS)
        rc = milliwatts(device, "power_cap", 0, &mw); /* a GPU with a power limit manages power */
    if (rc == NVML_SUCCESS)
        *mode = NVML_FEATURE_ENABLED;
    return rc;
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    return power_value(device, "power_cap", 0, limit);
}

nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    return power_value(device, "power_cap", 0, limit);
}

nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device, unsigned int *defaultLimit)
{
    return power_value(device, "power_default_limit", 0, defaultLimit);
}

nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                          unsigned int *maxLimit)
{
    unsigned lo, hi;
    nvmlReturn_t rc = dn_check_gpu(device, minLimit);
    if (rc == NVML_SUCCESS && maxLimit == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        rc = milliwatts(device, "power_min_limit", 0, &lo);
    if (rc == NVML_SUCCESS)
        rc = milliwatts(device, "power_max_limit", 0, &hi);
    if (rc == NVML_SUCCESS) {
        *minLimit = lo;
        *maxLimit = hi;
    }
    return rc;
}

nvmlReturn_t nvmlDeviceGetPowerSource(nvmlDevice_t device, nvmlPowerSource_t *powerSource)
{
    nvmlReturn_t rc = dn_check_gpu(device, powerSource);
    if (rc == NVML_SUCCESS)
        *powerSource = NVML_POWER_SOURCE_AC;
    return rc;
}

/* ---- thermal ------------------------------------------------------------------------------------ */

static nvmlReturn_t temperature(nvmlDevice_t device, unsigned *out)
{
    unsigned long long t;
    if (!dn_reading_u64(device, "temperature", &t) || t > 1000)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned)t;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
    nvmlReturn_t rc = dn_check_gpu(device, temp);
    if (rc != NVML_SUCCESS)
        return rc;
    if (sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    return temperature(device, temp);
}

nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t *t)
{
    unsigned v;
    nvmlReturn_t rc = dn_check_gpu(device, t);
    if (rc != NVML_SUCCESS)
        return rc;
    if (t->version != nvmlTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (t->sensorType != NVML_TEMPERATURE_GPU)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = temperature(device, &v);
    if (rc == NVML_SUCCESS)
        t->temperature = (int)v;
    return rc;
}

static const char *const threshold_keys[] = {"temp_shutdown", "temp_slowdown", "temp_mem_max", "temp_gpu_max"};

nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                               unsigned int *temp)
{
    nvmlReturn_t rc = dn_check_gpu(device, temp);
    if (rc != NVML_SUCCESS)
        return rc;
    if ((unsigned)thresholdType >= NVML_TEMPERATURE_THRESHOLD_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if ((unsigned)thresholdType >= sizeof threshold_keys / sizeof threshold_keys[0])
        return NVML_ERROR_NOT_SUPPORTED; /* acoustic and GPS thresholds: not on datacenter GPUs */
    return dn_static_out(device, threshold_keys[thresholdType], temp);
}

/* the distance to the GPU's maximum operating temperature (nvidia-smi's temperature.gpu.tlimit) */
nvmlReturn_t nvmlDeviceGetMarginTemperature(nvmlDevice_t device, nvmlMarginTemperature_t *margin)
{
    unsigned t, max;
    nvmlReturn_t rc = dn_check_gpu(device, margin);
    if (rc != NVML_SUCCESS)
        return rc;
    if (margin->version != nvmlMarginTemperature_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    rc = temperature(device, &t);
    if (rc == NVML_SUCCESS)
        rc = dn_static_out(device, "temp_gpu_max", &max);
    if (rc == NVML_SUCCESS)
        margin->marginTemperature = (int)max - (int)t;
    return rc;
}

/* Datacenter GPUs are cooled by the chassis: no fans of their own. */
nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    nvmlReturn_t rc = dn_check_gpu(device, numFans);
    if (rc == NVML_SUCCESS)
        *numFans = 0;
    return rc;
}

nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    nvmlReturn_t rc = dn_check_gpu(device, speed);
    return rc != NVML_SUCCESS ? rc : NVML_ERROR_NOT_SUPPORTED;
}

/* ---- clocks --------------------------------------------------------------------------------------- */

static nvmlReturn_t clock_key(nvmlDevice_t device, unsigned *out, const char *key, int reading)
{
    unsigned long long v;
    int ok = reading ? dn_reading_u64(device, key, &v) : dn_static_u64(device, key, &v);
    if (!ok || v > 0xffffffffULL)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = (unsigned)v;
    return NVML_SUCCESS;
}

/* keys by clock type (graphics, SM, memory, video); NULL: the clock has no such value */
static nvmlReturn_t clock_of(nvmlDevice_t device, nvmlClockType_t type, unsigned *out, const char *const keys[4],
                             int reading)
{
    nvmlReturn_t rc = dn_check_gpu(device, out);
    if (rc != NVML_SUCCESS)
        return rc;
    if ((unsigned)type >= NVML_CLOCK_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (keys[type] == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    return clock_key(device, out, keys[type], reading);
}

static const char *const current_keys[4] = {"sm_clock", "sm_clock", "mem_clock", "video_clock"};
static const char *const max_keys[4] = {"clock_max_graphics", "clock_max_sm", "clock_max_mem", "clock_max_video"};
static const char *const app_keys[4] = {"clock_app_graphics", "clock_app_graphics", "clock_app_mem", NULL};
static const char *const boost_keys[4] = {"clock_max_graphics", "clock_max_sm", NULL, NULL};

nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    return clock_of(device, type, clock, current_keys, 1);
}

nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    return clock_of(device, type, clock, max_keys, 0);
}

/* applications clocks cannot be changed in a container: the target is the default */
nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType, unsigned int *clockMHz)
{
    return clock_of(device, clockType, clockMHz, app_keys, 0);
}

nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                   unsigned int *clockMHz)
{
    return clock_of(device, clockType, clockMHz, app_keys, 0);
}

nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                unsigned int *clockMHz)
{
    return clock_of(device, clockType, clockMHz, boost_keys, 0);
}

nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                unsigned int *clockMHz)
{
    switch (clockId) {
    case NVML_CLOCK_ID_CURRENT:
        return nvmlDeviceGetClockInfo(device, clockType, clockMHz);
    case NVML_CLOCK_ID_APP_CLOCK_TARGET:
        return nvmlDeviceGetApplicationsClock(device, clockType, clockMHz);
    case NVML_CLOCK_ID_APP_CLOCK_DEFAULT:
        return nvmlDeviceGetDefaultApplicationsClock(device, clockType, clockMHz);
    case NVML_CLOCK_ID_CUSTOMER_BOOST_MAX:
        return nvmlDeviceGetMaxCustomerBoostClock(device, clockType, clockMHz);
    default: {
        nvmlReturn_t rc = dn_check_gpu(device, clockMHz);
        return rc != NVML_SUCCESS ? rc : NVML_ERROR_INVALID_ARGUMENT;
    }
    }
}

/* ---- performance state and clocks event reasons ------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetPerformanceState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    unsigned long long p = 0;
    nvmlReturn_t rc = dn_check_gpu(device, pState);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dn_reading_u64(device, "pstate", &p) || p > 15)
        p = 0; /* datacenter GPUs stay in P0 while the driver is loaded (an idle H200 does) */
    *pState = (nvmlPstates_t)p;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerState(nvmlDevice_t device, nvmlPstates_t *pState)
{
    return nvmlDeviceGetPerformanceState(device, pState);
}

#define SUPPORTED_EVENT_REASONS 0x1FFULL /* an H200's: idle ... display clock setting */

nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    unsigned long long util = 0, hot = 0;
    nvmlReturn_t rc = dn_check_gpu(device, reasons);
    if (rc != NVML_SUCCESS)
        return rc;
    dn_live_u64(device, "utilization", &util);
    dn_live_u64(device, "fault_temperature", &hot);
    *reasons = 0;
    if (util == 0)
        *reasons |= nvmlClocksEventReasonGpuIdle;
    if (hot != 0) /* a thermal slowdown: the hardware slows the clocks down */
        *reasons |= nvmlClocksEventReasonHwSlowdown | nvmlClocksEventReasonHwThermalSlowdown;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    nvmlReturn_t rc = dn_check_gpu(device, reasons);
    if (rc == NVML_SUCCESS)
        *reasons = SUPPORTED_EVENT_REASONS;
    return rc;
}

nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return nvmlDeviceGetSupportedClocksEventReasons(device, reasons);
}

nvmlReturn_t nvmlDeviceGetViolationStatus(nvmlDevice_t device, nvmlPerfPolicyType_t perfPolicyType,
                                          nvmlViolationTime_t *violTime)
{
    struct timespec ts;
    nvmlReturn_t rc = dn_check_gpu(device, violTime);
    if (rc != NVML_SUCCESS)
        return rc;
    if ((unsigned)perfPolicyType >= NVML_PERF_POLICY_COUNT ||
        (perfPolicyType > NVML_PERF_POLICY_RELIABILITY && perfPolicyType < NVML_PERF_POLICY_TOTAL_APP_CLOCKS))
        return NVML_ERROR_INVALID_ARGUMENT;
    clock_gettime(CLOCK_REALTIME, &ts);
    violTime->referenceTime = (unsigned long long)ts.tv_sec * 1000000ULL + (unsigned long long)ts.tv_nsec / 1000ULL;
    violTime->violationTime = 0; /* no time spent held back by a policy */
    return NVML_SUCCESS;
}
