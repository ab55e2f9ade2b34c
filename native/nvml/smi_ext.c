/*
 * dra-fake's own extensions for nvidia-smi (native/smi/nvml_extra.h, docs/nvml.md#nvidia-smi):
 * what nvidia-smi prints but NVML has no public call for. Under the draFake prefix, never an nvml
 * name, and hidden: nvidia-smi links the static archive; the shared library exports NVML's names
 * only (native/nvml/symbols.txt).
 */
#include <stddef.h>

#include "internal.h"

nvmlReturn_t draFakeDeviceGetGpuPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length);
nvmlReturn_t draFakeGetPciBusIdByIndex(unsigned int index, char *busId, unsigned int length);

/* The -q GPU Part Number: the device file's gpu_part_number (absent: NOT_SUPPORTED). */
nvmlReturn_t draFakeDeviceGetGpuPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    nvmlReturn_t rc = dn_check_gpu(device, partNumber);
    if (rc != NVML_SUCCESS)
        return rc;
    return dn_copy_str(dn_static(device, "gpu_part_number"), partNumber, length);
}

/* The bus ID of the GPU at an NVML index, also when it is lost (its handle refused). */
nvmlReturn_t draFakeGetPciBusIdByIndex(unsigned int index, char *busId, unsigned int length)
{
    struct nvmlDevice_st *gpu;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    gpu = dn_gpu(index);
    if (gpu == NULL || busId == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return dn_copy_str(dn_static(gpu, "bus_id"), busId, length);
}
