/*
 * NVML calls nvidia-smi prints from that the library's own files do not implement yet, each with
 * an answer that holds for every simulated board (the integrator moves them where they belong;
 * until then, without them, the generated stubs answer NOT_SUPPORTED). Facts: the -q -x captures
 * of tests/data/nvidia-smi/qx and the H200 capture (docs/reference/nvidia-smi.md).
 */
#include <string.h>

#include "internal.h"

/* nvmlPciInfoExt_v1_t of NVML (as native/smi/nvml_extra.h declares it) */
typedef struct {
    unsigned int version;
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId, baseClass, subClass;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} dn_pci_ext_t;
#define DN_PCI_EXT_V1 ((unsigned int)(sizeof(dn_pci_ext_t) | (1U << 24)))

NVML_PUBLIC nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, dn_pci_ext_t *pci);
NVML_PUBLIC nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount,
                                                   unsigned int *averageFps, unsigned int *averageLatency);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetConfComputeProtectedMemoryUsage(nvmlDevice_t device, nvmlMemory_t *memory);

/* The PCI identity with its class: every NVIDIA data center GPU is a 3D controller (base class 3,
 * sub class 2: all seven -q -x captures, the H200's pci.baseClass/subClass). */
nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, dn_pci_ext_t *pci)
{
    nvmlPciInfo_t p;
    nvmlReturn_t rc = dn_check(device, pci);
    if (rc != NVML_SUCCESS)
        return rc;
    if (pci->version != DN_PCI_EXT_V1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    rc = nvmlDeviceGetPciInfo_v3(device, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    pci->domain = p.domain;
    pci->bus = p.bus;
    pci->device = p.device;
    pci->pciDeviceId = p.pciDeviceId;
    pci->pciSubSystemId = p.pciSubSystemId;
    pci->baseClass = 0x3;
    pci->subClass = 0x2;
    memcpy(pci->busId, p.busId, sizeof pci->busId);
    return NVML_SUCCESS;
}

/* The inforom's checksum: valid wherever the board has an inforom image (H200: "valid"). */
nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device)
{
    nvmlReturn_t rc = dn_check_gpu(device, device);
    if (rc != NVML_SUCCESS)
        return rc;
    return dn_static(device, "inforom_image") != NULL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

/* No encoder sessions run in the simulation (the H200 capture: 0, 0, 0). */
nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount, unsigned int *averageFps,
                                       unsigned int *averageLatency)
{
    nvmlReturn_t rc = dn_check(device, sessionCount);
    if (rc != NVML_SUCCESS)
        return rc;
    if (averageFps == NULL || averageLatency == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *sessionCount = *averageFps = *averageLatency = 0;
    return NVML_SUCCESS;
}

/* Confidential computing is off on every simulated node: no protected memory (every capture: 0). */
nvmlReturn_t nvmlDeviceGetConfComputeProtectedMemoryUsage(nvmlDevice_t device, nvmlMemory_t *memory)
{
    nvmlReturn_t rc = dn_check_gpu(device, memory);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(memory, 0, sizeof *memory);
    return NVML_SUCCESS;
}
