/*
 * Running processes and accounting. No process of a container runs on a simulated GPU, so the
 * lists are empty (NVML: SUCCESS with a count of 0), whatever the caller's array size.
 */
#include <stddef.h>

#include "internal.h"

static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    nvmlReturn_t rc = dn_check(device, infoCount); /* GPUs and MIG devices alike */
    if (rc == NVML_SUCCESS)
        *infoCount = 0;
    return rc;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                  nvmlProcessInfo_v1_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v2_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                   nvmlProcessInfo_v1_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_v2_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                      nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
                                                     nvmlProcessInfo_v1_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_v2_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

nvmlReturn_t nvmlDeviceGetMPSComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
                                                        nvmlProcessInfo_t *infos)
{
    (void)infos;
    return no_processes(device, infoCount);
}

/* Accounting is off (the driver's default; turning it on needs root) with NVIDIA's buffer of
 * 4000 processes (an H200: tests/data/nvml). */
nvmlReturn_t nvmlDeviceGetAccountingMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    nvmlReturn_t rc = dn_check_gpu(device, mode);
    if (rc == NVML_SUCCESS)
        *mode = NVML_FEATURE_DISABLED;
    return rc;
}

nvmlReturn_t nvmlDeviceGetAccountingBufferSize(nvmlDevice_t device, unsigned int *bufferSize)
{
    nvmlReturn_t rc = dn_check_gpu(device, bufferSize);
    if (rc == NVML_SUCCESS)
        *bufferSize = 4000;
    return rc;
}

nvmlReturn_t nvmlDeviceGetAccountingPids(nvmlDevice_t device, unsigned int *count, unsigned int *pids)
{
    (void)pids;
    return no_processes(device, count);
}
