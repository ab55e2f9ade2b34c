/* Enumeration, handles by index / UUID / serial / PCI bus ID, identity, PCI and PCIe. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "internal.h"

/* ---- enumeration and handles ---------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (deviceCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = dn_gpu_count(); /* a lost GPU still counts, as with NVIDIA's driver */
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

/* the handle of a device found by a lookup: lost GPUs are found but not handed out */
static nvmlReturn_t found(struct nvmlDevice_st *dev, nvmlDevice_t *out)
{
    if (dn_lost(dev))
        return NVML_ERROR_GPU_IS_LOST;
    *out = dev;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (device == NULL || dn_gpu(index) == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    return found(dn_gpu(index), device);
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

/* every GPU and MIG device, for the lookups */
static struct nvmlDevice_st *device_at(unsigned gpu, unsigned slot)
{
    struct nvmlDevice_st *g = dn_gpu(gpu);
    if (g == NULL)
        return NULL;
    if (slot == 0)
        return g;
    return slot - 1 < g->nmig ? g->migs[slot - 1] : NULL;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    unsigned g, s;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (g = 0; g < dn_gpu_count(); g++) {
        for (s = 0; s <= DN_MAX_MIGS; s++) {
            struct nvmlDevice_st *dev = device_at(g, s);
            if (dev != NULL && dev->uuid != NULL && strcasecmp(dev->uuid, uuid) == 0)
                return found(dev, device);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* "GPU-1cc3f679-2929-ae9e-513c-87e6150fcaf5" -> its 16 bytes */
static int uuid_bytes(const char *uuid, unsigned char *out)
{
    unsigned n = 0;
    const char *p = strchr(uuid, '-');
    if (p == NULL)
        return 0;
    for (p++; *p; p++) {
        int hi;
        if (*p == '-')
            continue;
        hi = (*p >= '0' && *p <= '9') ? *p - '0' : (*p | 0x20) - 'a' + 10;
        if (hi < 0 || hi > 15 || n >= 32)
            return 0;
        out[n / 2] = (unsigned char)(n % 2 == 0 ? hi << 4 : out[n / 2] | hi);
        n++;
    }
    return n == 32;
}

nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t *uuid, nvmlDevice_t *device)
{
    unsigned g, s;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (uuid == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (uuid->version != nvmlUUID_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (uuid->type == NVML_UUID_TYPE_ASCII) {
        char text[NVML_DEVICE_UUID_ASCII_LEN + 1];
        memcpy(text, uuid->value.str, NVML_DEVICE_UUID_ASCII_LEN);
        text[NVML_DEVICE_UUID_ASCII_LEN] = '\0';
        return nvmlDeviceGetHandleByUUID(text, device);
    }
    if (uuid->type != NVML_UUID_TYPE_BINARY)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (g = 0; g < dn_gpu_count(); g++) {
        for (s = 0; s <= DN_MAX_MIGS; s++) {
            struct nvmlDevice_st *dev = device_at(g, s);
            unsigned char bytes[16];
            if (dev != NULL && dev->uuid != NULL && uuid_bytes(dev->uuid, bytes) &&
                memcmp(bytes, uuid->value.bytes, sizeof bytes) == 0)
                return found(dev, device);
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    unsigned g;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (serial == NULL || device == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (g = 0; g < dn_gpu_count(); g++) {
        const char *s = dn_static(dn_gpu(g), "serial");
        if (s != NULL && strcmp(s, serial) == 0)
            return found(dn_gpu(g), device);
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    unsigned d, b, dv, f, g;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (pciBusId == NULL || device == NULL || !dn_parse_bus_id(pciBusId, &d, &b, &dv, &f))
        return NVML_ERROR_INVALID_ARGUMENT;
    for (g = 0; g < dn_gpu_count(); g++) {
        struct nvmlDevice_st *gpu = dn_gpu(g);
        if (gpu->domain == d && gpu->bus == b && gpu->device == dv && gpu->function == f)
            return found(gpu, device);
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ---- identity ------------------------------------------------------------------------------- */

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    nvmlReturn_t rc = dn_check_gpu(device, index);
    if (rc == NVML_SUCCESS)
        *index = device->index;
    return rc;
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    nvmlReturn_t rc = dn_check(device, name);
    char mig_name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    const char *gpu_name, *profile;
    if (rc != NVML_SUCCESS)
        return rc;
    gpu_name = dn_static(device, "name");
    if (!device->is_mig)
        return dn_copy_str(gpu_name, name, length);
    /* a MIG device: "NVIDIA H200 MIG 1g.18gb" */
    profile = dn_static(device, "mig_profile");
    if (gpu_name == NULL || profile == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    if (snprintf(mig_name, sizeof mig_name, "%s MIG %s", gpu_name, profile) >= (int)sizeof mig_name)
        return NVML_ERROR_NOT_SUPPORTED;
    return dn_copy_str(mig_name, name, length);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    nvmlReturn_t rc = dn_check(device, uuid);
    return rc != NVML_SUCCESS ? rc : dn_copy_str(device->uuid, uuid, length);
}

/* a string key of the GPU: NVML's string getters (INSUFFICIENT_SIZE below the value's length) */
static nvmlReturn_t gpu_str(nvmlDevice_t device, const char *key, char *out, unsigned length)
{
    nvmlReturn_t rc = dn_check_gpu(device, out);
    return rc != NVML_SUCCESS ? rc : dn_copy_str(dn_static(device, key), out, length);
}

static nvmlReturn_t gpu_uint(nvmlDevice_t device, const char *key, unsigned *out)
{
    nvmlReturn_t rc = dn_check_gpu(device, out);
    return rc != NVML_SUCCESS ? rc : dn_static_out(device, key, out);
}

static nvmlReturn_t gpu_flag(nvmlDevice_t device, const char *key, unsigned *out)
{
    nvmlReturn_t rc = dn_check_gpu(device, out);
    if (rc != NVML_SUCCESS)
        return rc;
    return dn_static_flag(device, key, out) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    return gpu_str(device, "serial", serial, length);
}

nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    return gpu_str(device, "board_part_number", partNumber, length);
}

nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    return gpu_str(device, "vbios_version", version, length);
}

nvmlReturn_t nvmlDeviceGetInforomImageVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    return gpu_str(device, "inforom_image", version, length);
}

nvmlReturn_t nvmlDeviceGetInforomVersion(nvmlDevice_t device, nvmlInforomObject_t object, char *version,
                                         unsigned int length)
{
    static const char *const keys[] = {"inforom_oem", "inforom_ecc", "inforom_pwr", "inforom_den"};
    nvmlReturn_t rc = dn_check_gpu(device, version);
    if (rc != NVML_SUCCESS)
        return rc;
    if ((unsigned)object >= NVML_INFOROM_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    return dn_copy_str(dn_static(device, keys[object]), version, length);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    return gpu_uint(device, "minor", minorNumber);
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
    unsigned v;
    nvmlReturn_t rc = dn_check_gpu(device, type);
    if (rc == NVML_SUCCESS)
        rc = dn_static_out(device, "brand", &v);
    if (rc == NVML_SUCCESS)
        *type = (nvmlBrandType_t)v;
    return rc;
}

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch)
{
    return gpu_uint(device, "architecture", arch);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    nvmlReturn_t rc = dn_check_gpu(device, major);
    const char *cc;
    char buf[16], *dot;
    unsigned long long ma, mi;
    if (rc != NVML_SUCCESS)
        return rc;
    if (minor == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    cc = dn_static(device, "compute_cap");
    if (cc == NULL || strlen(cc) >= sizeof buf)
        return NVML_ERROR_NOT_SUPPORTED;
    memcpy(buf, cc, strlen(cc) + 1);
    dot = strchr(buf, '.');
    if (dot == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    *dot = '\0';
    if (!dn_parse_u64(buf, &ma) || !dn_parse_u64(dot + 1, &mi) || ma > 1000 || mi > 1000)
        return NVML_ERROR_NOT_SUPPORTED;
    *major = (int)ma;
    *minor = (int)mi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetBoardId(nvmlDevice_t device, unsigned int *boardId)
{
    return gpu_uint(device, "board_id", boardId);
}

nvmlReturn_t nvmlDeviceGetMultiGpuBoard(nvmlDevice_t device, unsigned int *multiGpuBool)
{
    return gpu_flag(device, "multi_gpu_board", multiGpuBool);
}

nvmlReturn_t nvmlDeviceGetModuleId(nvmlDevice_t device, unsigned int *moduleId)
{
    return gpu_uint(device, "module_id", moduleId);
}

nvmlReturn_t nvmlDeviceGetNumGpuCores(nvmlDevice_t device, unsigned int *numCores)
{
    return gpu_uint(device, "num_gpu_cores", numCores);
}

nvmlReturn_t nvmlDeviceGetMemoryBusWidth(nvmlDevice_t device, unsigned int *busWidth)
{
    return gpu_uint(device, "memory_bus_width", busWidth);
}

nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t *mode)
{
    unsigned v;
    nvmlReturn_t rc = dn_check_gpu(device, mode);
    if (rc == NVML_SUCCESS)
        rc = dn_static_flag(device, "persistence_mode", &v) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        *mode = (nvmlEnableState_t)v;
    return rc;
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
    unsigned v;
    nvmlReturn_t rc = dn_check_gpu(device, mode);
    if (rc == NVML_SUCCESS)
        rc = dn_static_out(device, "compute_mode", &v);
    if (rc == NVML_SUCCESS)
        *mode = (nvmlComputeMode_t)v;
    return rc;
}

static nvmlReturn_t enable_state(nvmlDevice_t device, const char *key, nvmlEnableState_t *out)
{
    unsigned v;
    nvmlReturn_t rc = dn_check_gpu(device, out);
    if (rc == NVML_SUCCESS)
        rc = dn_static_flag(device, key, &v) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        *out = (nvmlEnableState_t)v;
    return rc;
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display)
{
    return enable_state(device, "display_mode", display);
}

nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, nvmlEnableState_t *isActive)
{
    return enable_state(device, "display_active", isActive);
}

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device, nvmlGpuVirtualizationMode_t *mode)
{
    unsigned v;
    nvmlReturn_t rc = dn_check_gpu(device, mode);
    if (rc == NVML_SUCCESS)
        rc = dn_static_out(device, "virtualization_mode", &v);
    if (rc == NVML_SUCCESS)
        *mode = (nvmlGpuVirtualizationMode_t)v;
    return rc;
}

nvmlReturn_t nvmlDeviceGetAddressingMode(nvmlDevice_t device, nvmlDeviceAddressingMode_t *mode)
{
    static const char *const names[] = {"None", "HMM", "ATS"};
    const char *v;
    unsigned i;
    nvmlReturn_t rc = dn_check_gpu(device, mode);
    if (rc != NVML_SUCCESS)
        return rc;
    if (mode->version != nvmlDeviceAddressingMode_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    v = dn_static(device, "addressing_mode");
    for (i = 0; v != NULL && i < 3; i++) {
        if (strcmp(v, names[i]) == 0) {
            mode->value = i;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetGspFirmwareMode(nvmlDevice_t device, unsigned int *isEnabled, unsigned int *defaultMode)
{
    unsigned v;
    nvmlReturn_t rc = dn_check_gpu(device, isEnabled);
    if (rc != NVML_SUCCESS)
        return rc;
    if (defaultMode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dn_static_flag(device, "gsp_firmware_mode", &v))
        return NVML_ERROR_NOT_SUPPORTED;
    *isEnabled = *defaultMode = v;
    return NVML_SUCCESS;
}

/* NVML_GSP_FIRMWARE_VERSION_BUF_SIZE: the caller's buffer holds 64 bytes */
nvmlReturn_t nvmlDeviceGetGspFirmwareVersion(nvmlDevice_t device, char *version)
{
    unsigned v;
    nvmlReturn_t rc = dn_check_gpu(device, version);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dn_static_flag(device, "gsp_firmware_mode", &v) || !v)
        return NVML_ERROR_NOT_SUPPORTED;
    return dn_copy_str(dn_static(device, "driver_version"), version, 64); /* GSP firmware ships with the driver */
}

/* ---- PCI and PCIe ----------------------------------------------------------------------------- */

static unsigned pci_id(const nvmlDevice_t device, const char *key)
{
    unsigned v = 0;
    return dn_static_uint(device, key, &v) ? v : 0;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    nvmlReturn_t rc = dn_check_gpu(device, pci);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", device->domain & 0xffffU,
             device->bus, device->device, device->function);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", device->domain, device->bus, device->device,
             device->function);
    pci->domain = device->domain;
    pci->bus = device->bus;
    pci->device = device->device;
    pci->pciDeviceId = pci_id(device, "pci_device_id");
    pci->pciSubSystemId = pci_id(device, "pci_subsystem_id");
    return NVML_SUCCESS;
}

/* the 52-byte layout of the first two versions (the caller's structure may be that small) */
static nvmlReturn_t pci_info_legacy(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    nvmlPciInfo_t full;
    nvmlPciInfo_v2_t old;
    nvmlReturn_t rc = dn_check_gpu(device, pci);
    if (rc != NVML_SUCCESS)
        return rc;
    nvmlDeviceGetPciInfo_v3(device, &full);
    memset(&old, 0, sizeof old);
    memcpy(old.busId, full.busIdLegacy, sizeof old.busId);
    old.domain = full.domain;
    old.bus = full.bus;
    old.device = full.device;
    old.pciDeviceId = full.pciDeviceId;
    old.pciSubSystemId = full.pciSubSystemId;
    memcpy(pci, &old, sizeof old);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return pci_info_legacy(device, pci);
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return pci_info_legacy(device, pci);
}

nvmlReturn_t nvmlDeviceGetBusType(nvmlDevice_t device, nvmlBusType_t *type)
{
    nvmlReturn_t rc = dn_check_gpu(device, type);
    if (rc == NVML_SUCCESS)
        *type = NVML_BUS_TYPE_PCIE; /* SXM modules too: the GPU sits on PCIe */
    return rc;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen)
{
    return gpu_uint(device, "pcie_max_gen", maxLinkGen);
}

nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGenDevice)
{
    /* the GPU's own maximum, above the link's on GB200 (docs/nvml.md) */
    nvmlReturn_t rc = gpu_uint(device, "pcie_gpu_max_gen", maxLinkGenDevice);
    if (rc == NVML_ERROR_NOT_SUPPORTED)
        rc = gpu_uint(device, "pcie_max_gen", maxLinkGenDevice);
    return rc;
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth)
{
    return gpu_uint(device, "pcie_max_width", maxLinkWidth);
}

/* The link trains to its maximum and stays there (an idle H200 reports gen 5 x16). */
nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen)
{
    return gpu_uint(device, "pcie_max_gen", currLinkGen);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth)
{
    return gpu_uint(device, "pcie_max_width", currLinkWidth);
}

/* PCIe generation -> transfer rate (MT/s per lane) */
static unsigned gen_speed(unsigned gen)
{
    static const unsigned speed[] = {0, 2500, 5000, 8000, 16000, 32000, 64000};
    return gen < sizeof speed / sizeof speed[0] ? speed[gen] : 0;
}

nvmlReturn_t nvmlDeviceGetPcieLinkMaxSpeed(nvmlDevice_t device, unsigned int *maxSpeed)
{
    unsigned gen;
    nvmlReturn_t rc = dn_check_gpu(device, maxSpeed);
    if (rc == NVML_SUCCESS)
        rc = dn_static_out(device, "pcie_max_gen", &gen);
    if (rc == NVML_SUCCESS && gen_speed(gen) == 0)
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        *maxSpeed = gen; /* NVML_PCIE_LINK_MAX_SPEED_<n>MBPS: 1 for gen 1 ... 6 for gen 6 */
    return rc;
}

nvmlReturn_t nvmlDeviceGetPcieSpeed(nvmlDevice_t device, unsigned int *pcieSpeed)
{
    unsigned gen;
    nvmlReturn_t rc = dn_check_gpu(device, pcieSpeed);
    if (rc == NVML_SUCCESS)
        rc = dn_static_out(device, "pcie_max_gen", &gen);
    if (rc == NVML_SUCCESS && gen_speed(gen) == 0)
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        *pcieSpeed = gen_speed(gen);
    return rc;
}

/* a live counter of the GPU: 0 until the plugin writes one (an idle GPU) */
static nvmlReturn_t live_counter(nvmlDevice_t device, const char *key, unsigned *out)
{
    unsigned long long v = 0;
    nvmlReturn_t rc = dn_check_gpu(device, out);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!dn_live_u64(device, key, &v) || v > 0xffffffffULL)
        v = 0;
    *out = (unsigned)v;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value)
{
    if ((unsigned)counter >= NVML_PCIE_UTIL_COUNT && dn_initialized())
        return NVML_ERROR_INVALID_ARGUMENT;
    return live_counter(device, counter == NVML_PCIE_UTIL_TX_BYTES ? "pcie_tx" : "pcie_rx", value);
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value)
{
    return live_counter(device, "pcie_replay", value);
}
