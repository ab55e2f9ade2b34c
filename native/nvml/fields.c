/*
 * nvmlDeviceGetFieldValues: the common field IDs (ECC, power, energy, temperature limits, PCIe,
 * row remapping, recovery action, time held back by each clock event reason), each with its own nvmlReturn; every other field ID is NOT_SUPPORTED.
 */
#include <time.h>

#include "internal.h"

static void set_uint(nvmlFieldValue_t *v, unsigned value)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = value;
    v->nvmlReturn = NVML_SUCCESS;
}

static void set_ull(nvmlFieldValue_t *v, unsigned long long value)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    v->value.ullVal = value;
    v->nvmlReturn = NVML_SUCCESS;
}

static void set_int(nvmlFieldValue_t *v, int value)
{
    v->valueType = NVML_VALUE_TYPE_SIGNED_INT;
    v->value.siVal = value;
    v->nvmlReturn = NVML_SUCCESS;
}

/* an unsigned getter of the library into a field */
static void from_getter(nvmlFieldValue_t *v, nvmlDevice_t device, nvmlReturn_t (*get)(nvmlDevice_t, unsigned *))
{
    unsigned value = 0;
    nvmlReturn_t rc = get(device, &value);
    if (rc == NVML_SUCCESS)
        set_uint(v, value);
    else
        v->nvmlReturn = rc;
}

static nvmlReturn_t nvlink_link_count(nvmlDevice_t device, unsigned *count)
{
    return dn_static_out(device, "nvlink_link_count", count);
}

static nvmlReturn_t power_min_limit(nvmlDevice_t device, unsigned *limit)
{
    unsigned max;
    return nvmlDeviceGetPowerManagementLimitConstraints(device, limit, &max);
}

static nvmlReturn_t power_max_limit(nvmlDevice_t device, unsigned *limit)
{
    unsigned min;
    return nvmlDeviceGetPowerManagementLimitConstraints(device, &min, limit);
}

static nvmlReturn_t remapped(nvmlDevice_t device, unsigned which, unsigned *out)
{
    unsigned r[4] = {0, 0, 0, 0};
    nvmlReturn_t rc = nvmlDeviceGetRemappedRows(device, &r[0], &r[1], &r[2], &r[3]);
    *out = r[which];
    return rc;
}

static nvmlReturn_t remapped_cor(nvmlDevice_t device, unsigned *out)
{
    return remapped(device, 0, out);
}

static nvmlReturn_t remapped_unc(nvmlDevice_t device, unsigned *out)
{
    return remapped(device, 1, out);
}

static nvmlReturn_t remapped_pending(nvmlDevice_t device, unsigned *out)
{
    return remapped(device, 2, out);
}

static nvmlReturn_t remapped_failure(nvmlDevice_t device, unsigned *out)
{
    return remapped(device, 3, out);
}

/* a temperature limit: how far the reading is below the threshold (signed) */
static void margin(nvmlDevice_t device, nvmlFieldValue_t *v, const char *threshold, const char *reading)
{
    unsigned long long t, max;
    if (dn_static_u64(device, threshold, &max) && dn_reading_u64(device, reading, &t) && max < 1000 && t < 1000)
        set_int(v, (int)max - (int)t);
}

static void field(nvmlDevice_t device, nvmlFieldValue_t *v)
{
    unsigned on = 0;
    unsigned long long ull = 0;
    int ecc = dn_static_flag(device, "ecc_mode", &on) && on;
    v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
    switch (v->fieldId) {
    case NVML_FI_DEV_ECC_CURRENT:
    case NVML_FI_DEV_ECC_PENDING:
        if (dn_static_flag(device, "ecc_mode", &on))
            set_uint(v, on);
        break;
    case NVML_FI_DEV_ECC_SBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_SBE_AGG_TOTAL:
    case NVML_FI_DEV_ECC_SBE_VOL_DEV:
    case NVML_FI_DEV_ECC_SBE_AGG_DEV:
        if (ecc)
            set_ull(v, dn_ecc_count(device, 0));
        break;
    case NVML_FI_DEV_ECC_DBE_VOL_TOTAL:
    case NVML_FI_DEV_ECC_DBE_AGG_TOTAL:
    case NVML_FI_DEV_ECC_DBE_VOL_DEV:
    case NVML_FI_DEV_ECC_DBE_AGG_DEV:
        if (ecc)
            set_ull(v, dn_ecc_count(device, 1));
        break;
    case NVML_FI_DEV_REMAPPED_COR:
        from_getter(v, device, remapped_cor);
        break;
    case NVML_FI_DEV_REMAPPED_UNC:
        from_getter(v, device, remapped_unc);
        break;
    case NVML_FI_DEV_REMAPPED_PENDING:
        from_getter(v, device, remapped_pending);
        break;
    case NVML_FI_DEV_REMAPPED_FAILURE:
        from_getter(v, device, remapped_failure);
        break;
    case NVML_FI_DEV_MEMORY_TEMP:
        if (dn_reading_u64(device, "memory_temperature", &ull) && ull < 1000)
            set_uint(v, (unsigned)ull);
        break;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
    case NVML_FI_DEV_ENERGY:
        if (nvmlDeviceGetTotalEnergyConsumption(device, &ull) == NVML_SUCCESS)
            set_ull(v, ull);
        break;
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
        from_getter(v, device, nvlink_link_count);
        break;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER:
        from_getter(v, device, nvmlDeviceGetPcieReplayCounter);
        break;
    /* power fields: scopeId 0 is the GPU; the module (1) and memory (2) scopes have no sensor */
    case NVML_FI_DEV_POWER_AVERAGE:
    case NVML_FI_DEV_POWER_INSTANT:
        if (v->scopeId == 0)
            from_getter(v, device, nvmlDeviceGetPowerUsage);
        break;
    case NVML_FI_DEV_POWER_MIN_LIMIT:
        if (v->scopeId == 0)
            from_getter(v, device, power_min_limit);
        break;
    case NVML_FI_DEV_POWER_MAX_LIMIT:
        if (v->scopeId == 0)
            from_getter(v, device, power_max_limit);
        break;
    case NVML_FI_DEV_POWER_DEFAULT_LIMIT:
        if (v->scopeId == 0)
            from_getter(v, device, nvmlDeviceGetPowerManagementDefaultLimit);
        break;
    case NVML_FI_DEV_POWER_CURRENT_LIMIT:
    case NVML_FI_DEV_POWER_REQUESTED_LIMIT:
        if (v->scopeId == 0)
            from_getter(v, device, nvmlDeviceGetPowerManagementLimit);
        break;
    case NVML_FI_DEV_TEMPERATURE_SHUTDOWN_TLIMIT:
        margin(device, v, "temp_shutdown", "temperature");
        break;
    case NVML_FI_DEV_TEMPERATURE_SLOWDOWN_TLIMIT:
        margin(device, v, "temp_slowdown", "temperature");
        break;
    case NVML_FI_DEV_TEMPERATURE_MEM_MAX_TLIMIT:
        margin(device, v, "temp_mem_max", "memory_temperature");
        break;
    case NVML_FI_DEV_TEMPERATURE_GPU_MAX_TLIMIT:
        margin(device, v, "temp_gpu_max", "temperature");
        break;
    case NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: /* a GPU that answers needs nothing; a lost one answers nothing */
        set_uint(v, NVML_GPU_RECOVERY_ACTION_NONE);
        break;
    case NVML_FI_DEV_PERF_POLICY_POWER: /* no time held back (nvmlDeviceGetViolationStatus) */
    case NVML_FI_DEV_PERF_POLICY_SYNC_BOOST:
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_SW_THERM_SLOWDOWN:
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_THERM_SLOWDOWN:
    case NVML_FI_DEV_CLOCKS_EVENT_REASON_HW_POWER_BRAKE_SLOWDOWN:
        set_ull(v, 0);
        break;
    default:
        break;
    }
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    struct timespec ts;
    long long now;
    int i;
    nvmlReturn_t rc = dn_check_gpu(device, values);
    if (rc != NVML_SUCCESS)
        return rc;
    if (valuesCount < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    clock_gettime(CLOCK_REALTIME, &ts);
    now = (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
    for (i = 0; i < valuesCount; i++) {
        values[i].timestamp = now;
        values[i].latencyUsec = 0;
        field(device, &values[i]);
    }
    return NVML_SUCCESS;
}
