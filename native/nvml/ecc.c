/*
 * ECC mode and error counts, row remapping. The counts are the live file's fault_ecc_sbe and
 * fault_ecc_dbe (docs/faults.md): corrected (single-bit) and uncorrected (double-bit) errors of
 * the GPU's DRAM. Each uncorrectable error remaps a row, pending until the GPU is reset. SRAM
 * (on-chip) error counts are 0: no fault makes one.
 */
#include <stddef.h>
#include <string.h>

#include "internal.h"

/* ECC getters answer only with ECC enabled (NVML: NOT_SUPPORTED otherwise) */
static nvmlReturn_t ecc_enabled(nvmlDevice_t device)
{
    unsigned on;
    if (!dn_static_flag(device, "ecc_mode", &on) || !on)
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* the GPU's error count of a type (corrected or uncorrected): 0 until a fault sets one */
unsigned long long dn_ecc_count(nvmlDevice_t device, int uncorrected)
{
    unsigned long long v = 0;
    if (!dn_live_u64(device->gpu, uncorrected ? "fault_ecc_dbe" : "fault_ecc_sbe", &v))
        v = 0;
    return v;
}

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    unsigned on;
    nvmlReturn_t rc = dn_check_gpu(device, current);
    if (rc != NVML_SUCCESS)
        return rc;
    if (pending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dn_static_flag(device, "ecc_mode", &on))
        return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = (nvmlEnableState_t)on; /* a container cannot change it: nothing pending */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDefaultEccMode(nvmlDevice_t device, nvmlEnableState_t *defaultMode)
{
    unsigned on;
    nvmlReturn_t rc = dn_check_gpu(device, defaultMode);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dn_static_flag(device, "ecc_mode", &on))
        return NVML_ERROR_NOT_SUPPORTED;
    *defaultMode = (nvmlEnableState_t)on;
    return NVML_SUCCESS;
}

static nvmlReturn_t check_counter(nvmlMemoryErrorType_t errorType, nvmlEccCounterType_t counterType)
{
    if ((unsigned)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT || (unsigned)counterType >= NVML_ECC_COUNTER_TYPE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

/* volatile (since the driver loaded) and aggregate (lifetime) counts are the same: the
 * simulated GPU has no errors from before */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    nvmlReturn_t rc = dn_check_gpu(device, eccCounts);
    if (rc == NVML_SUCCESS)
        rc = check_counter(errorType, counterType);
    if (rc == NVML_SUCCESS)
        rc = ecc_enabled(device);
    if (rc == NVML_SUCCESS)
        *eccCounts = dn_ecc_count(device, errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED);
    return rc;
}

/* Hopper and Ampere datacenter GPUs count DRAM and SRAM errors; the per-cache counters of older
 * GPUs are not supported (an H200: tests/data/nvml) */
nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                             nvmlEccCounterType_t counterType, nvmlMemoryLocation_t locationType,
                                             unsigned long long *count)
{
    nvmlReturn_t rc = dn_check_gpu(device, count);
    if (rc == NVML_SUCCESS)
        rc = check_counter(errorType, counterType);
    if (rc == NVML_SUCCESS && (unsigned)locationType >= NVML_MEMORY_LOCATION_COUNT)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        rc = ecc_enabled(device);
    if (rc != NVML_SUCCESS)
        return rc;
    if (locationType == NVML_MEMORY_LOCATION_DRAM) {
        *count = dn_ecc_count(device, errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED);
        return NVML_SUCCESS;
    }
    if (locationType == NVML_MEMORY_LOCATION_SRAM) {
        *count = 0;
        return NVML_SUCCESS;
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred)
{
    unsigned long long dbe;
    nvmlReturn_t rc = dn_check_gpu(device, corrRows);
    if (rc != NVML_SUCCESS)
        return rc;
    if (uncRows == NULL || isPending == NULL || failureOccurred == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    rc = ecc_enabled(device);
    if (rc != NVML_SUCCESS)
        return rc;
    dbe = dn_ecc_count(device, 1);
    *corrRows = 0;
    *uncRows = dbe > 0xffffffffULL ? 0xffffffffU : (unsigned)dbe;
    *isPending = dbe > 0; /* a remapped row takes effect at the next GPU reset */
    *failureOccurred = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRemappedRows_v2(nvmlDevice_t device, nvmlRemappedRowsInfo_v2_t *info)
{
    unsigned corr, unc, pending, failure;
    nvmlReturn_t rc = dn_check_gpu(device, info);
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetRemappedRows(device, &corr, &unc, &pending, &failure);
    if (rc != NVML_SUCCESS)
        return rc;
    /* every remapping is active: none waits on a bank the simulation does not have */
    info->corrActiveRemaps = corr;
    info->corrInactiveRemaps = 0;
    info->uncActiveRemaps = unc;
    info->uncInactiveRemaps = 0;
    info->bPending = pending;
    info->bFailureOccurred = failure;
    return NVML_SUCCESS;
}

/* SRAM (on-chip) errors: no fault makes one, so every count is 0 and no threshold is exceeded */
nvmlReturn_t nvmlDeviceGetSramEccErrorStatus(nvmlDevice_t device, nvmlEccSramErrorStatus_t *status)
{
    nvmlReturn_t rc = dn_check_gpu(device, status);
    if (rc != NVML_SUCCESS)
        return rc;
    if (status->version != nvmlEccSramErrorStatus_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    rc = ecc_enabled(device);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(status, 0, sizeof *status);
    status->version = nvmlEccSramErrorStatus_v1;
    return NVML_SUCCESS;
}
