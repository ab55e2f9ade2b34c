/*
 * NVML functions nvidia-smi calls that dra-fake's native/nvml/nvml.h does not declare (yet):
 * NVIDIA's public NVML API, declared here under NVIDIA's names with NVML's signatures and structure
 * layouts (facts of the ABI: NVIDIA's NVML API reference and nvidia-ml-py 13.615.71's ctypes
 * definitions). dra-fake's library exports every public NVML name; one it does not implement
 * answers NVML_ERROR_NOT_SUPPORTED, which nvidia-smi prints as N/A.
 *
 * Each block is guarded by the version macro (or a name) NVML defines with it, so this header
 * keeps compiling once nvml.h declares the same function or structure.
 */
#ifndef DRA_FAKE_SMI_NVML_EXTRA_H
#define DRA_FAKE_SMI_NVML_EXTRA_H

#include "nvml.h"

#ifndef nvmlPciInfoExt_v1
typedef struct nvmlPciInfoExt_v1_st {
    unsigned int version;
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int baseClass;
    unsigned int subClass;
    char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfoExt_v1_t;
typedef nvmlPciInfoExt_v1_t nvmlPciInfoExt_t;
#define nvmlPciInfoExt_v1 NVML_STRUCT_VERSION(PciInfoExt, 1)
#endif

#ifndef nvmlC2cModeInfo_v1
typedef struct nvmlC2cModeInfo_v1_st {
    unsigned int isC2cEnabled;
} nvmlC2cModeInfo_v1_t;
#define nvmlC2cModeInfo_v1 NVML_STRUCT_VERSION(C2cModeInfo, 1)
#endif

#ifndef nvmlRepairStatus_v1
typedef struct nvmlRepairStatus_v1_st {
    unsigned int version;
    unsigned int bChannelRepairPending;
    unsigned int bTpcRepairPending;
} nvmlRepairStatus_v1_t;
typedef nvmlRepairStatus_v1_t nvmlRepairStatus_t;
#define nvmlRepairStatus_v1 NVML_STRUCT_VERSION(RepairStatus, 1)
#endif

#ifndef nvmlPdi_v1
typedef struct nvmlPdi_v1_st {
    unsigned int version;
    unsigned long long value;
} nvmlPdi_v1_t;
typedef nvmlPdi_v1_t nvmlPdi_t;
#define nvmlPdi_v1 NVML_STRUCT_VERSION(Pdi, 1)
#endif

#ifndef nvmlPlatformInfo_v2
typedef struct nvmlPlatformInfo_v2_st {
    unsigned int version;
    unsigned char ibGuid[16];
    unsigned char chassisSerialNumber[16];
    unsigned char slotNumber;
    unsigned char trayIndex;
    unsigned char hostId;
    unsigned char peerType;
    unsigned char moduleId;
} nvmlPlatformInfo_v2_t;
typedef nvmlPlatformInfo_v2_t nvmlPlatformInfo_t;
#define nvmlPlatformInfo_v2 NVML_STRUCT_VERSION(PlatformInfo, 2)
#endif

#ifndef nvmlGpuFabricInfo_v3
#define NVML_GPU_FABRIC_UUID_LEN 16
typedef struct nvmlGpuFabricInfo_v3_st {
    unsigned int version;
    unsigned char clusterUuid[NVML_GPU_FABRIC_UUID_LEN];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned char state; /* NVML_GPU_FABRIC_STATE_* */
    unsigned int healthMask;
    unsigned char healthSummary;
} nvmlGpuFabricInfo_v3_t;
typedef nvmlGpuFabricInfo_v3_t nvmlGpuFabricInfoV_t;
#define nvmlGpuFabricInfo_v3 NVML_STRUCT_VERSION(GpuFabricInfo, 3)
#define NVML_GPU_FABRIC_STATE_NOT_SUPPORTED 0
#define NVML_GPU_FABRIC_STATE_NOT_STARTED 1
#define NVML_GPU_FABRIC_STATE_IN_PROGRESS 2
#define NVML_GPU_FABRIC_STATE_COMPLETED 3
#endif

#ifndef NVML_ROW_REMAPPER_HISTOGRAM_DECLARED
#define NVML_ROW_REMAPPER_HISTOGRAM_DECLARED
typedef struct nvmlRowRemapperHistogramValues_st {
    unsigned int max;
    unsigned int high;
    unsigned int partial;
    unsigned int low;
    unsigned int none;
} nvmlRowRemapperHistogramValues_t;
#endif

#ifndef NVML_FBC_STATS_DECLARED
#define NVML_FBC_STATS_DECLARED
typedef struct nvmlFBCStats_st {
    unsigned int sessionsCount;
    unsigned int averageFPS;
    unsigned int averageLatency;
} nvmlFBCStats_t;
#endif

#ifndef nvmlDramEncryptionInfo_v1
typedef struct nvmlDramEncryptionInfo_v1_st {
    unsigned int version;
    nvmlEnableState_t encryptionState;
} nvmlDramEncryptionInfo_v1_t;
typedef nvmlDramEncryptionInfo_v1_t nvmlDramEncryptionInfo_t;
#define nvmlDramEncryptionInfo_v1 NVML_STRUCT_VERSION(DramEncryptionInfo, 1)
#endif

#ifndef NVML_DEVICE_HOSTNAME_BUFFER_SIZE
#define NVML_DEVICE_HOSTNAME_BUFFER_SIZE 64
typedef struct nvmlHostname_v1_st {
    char value[NVML_DEVICE_HOSTNAME_BUFFER_SIZE];
} nvmlHostname_v1_t;
#endif

#ifndef nvmlDeviceCapabilities_v1
typedef struct nvmlDeviceCapabilities_v1_st {
    unsigned int version;
    unsigned int capMask; /* NVML_DEV_CAP_* */
} nvmlDeviceCapabilities_v1_t;
typedef nvmlDeviceCapabilities_v1_t nvmlDeviceCapabilities_t;
#define nvmlDeviceCapabilities_v1 NVML_STRUCT_VERSION(DeviceCapabilities, 1)
#define NVML_DEV_CAP_EGM (1U << 0)
#endif

#ifndef NVML_TOPOLOGY_INTERNAL
#define NVML_TOPOLOGY_INTERNAL 0
#define NVML_TOPOLOGY_SINGLE 10
#define NVML_TOPOLOGY_MULTIPLE 20
#define NVML_TOPOLOGY_HOSTBRIDGE 30
#define NVML_TOPOLOGY_NODE 40
#define NVML_TOPOLOGY_SYSTEM 50
typedef unsigned int nvmlGpuTopologyLevel_t;
#endif

#ifndef NVML_NVLINK_MAX_LINKS
#define NVML_NVLINK_MAX_LINKS 18 /* links nvidia-smi asks about (NVLink 4/5 boards have 18) */
#endif

#ifndef NVML_FI_DEV_NVLINK_GET_SPEED
#define NVML_FI_DEV_NVLINK_GET_SPEED 164 /* per link (scopeId), MB/s */
#endif
#ifndef NVML_FI_DEV_PCIE_OUTBOUND_ATOMICS_MASK
#define NVML_FI_DEV_PCIE_OUTBOUND_ATOMICS_MASK 228
#define NVML_FI_DEV_PCIE_INBOUND_ATOMICS_MASK 229
#endif
#ifndef NVML_POWER_SCOPE_MODULE
#define NVML_POWER_SCOPE_MODULE 1
#endif

NVML_PUBLIC nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_t *pci);
NVML_PUBLIC nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetEncoderStats(nvmlDevice_t device, unsigned int *sessionCount,
                                                   unsigned int *averageFps, unsigned int *averageLatency);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetConfComputeProtectedMemoryUsage(nvmlDevice_t device, nvmlMemory_t *memory);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetRowRemapperHistogram(nvmlDevice_t device,
                                                           nvmlRowRemapperHistogramValues_t *values);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetC2cModeInfoV(nvmlDevice_t device, nvmlC2cModeInfo_v1_t *c2cModeInfo);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetRepairStatus(nvmlDevice_t device, nvmlRepairStatus_t *repairStatus);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetPdi(nvmlDevice_t device, nvmlPdi_t *pdi);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetPlatformInfo(nvmlDevice_t device, nvmlPlatformInfo_t *platformInfo);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetSupportedMemoryClocks(nvmlDevice_t device, unsigned int *count,
                                                            unsigned int *clocksMHz);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetSupportedGraphicsClocks(nvmlDevice_t device, unsigned int memoryClockMHz,
                                                              unsigned int *count, unsigned int *clocksMHz);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetGpuOperationMode(nvmlDevice_t device, unsigned int *current,
                                                       unsigned int *pending);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetDriverModel_v2(nvmlDevice_t device, unsigned int *current,
                                                     unsigned int *pending);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, unsigned int cause, unsigned int *pageCount,
                                                   unsigned long long *addresses);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                             nvmlGpuTopologyLevel_t *pathInfo);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                             nvmlPciInfo_t *pci);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize, unsigned long *cpuSet);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetFBCStats(nvmlDevice_t device, nvmlFBCStats_t *fbcStats);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetDramEncryptionMode(nvmlDevice_t device, nvmlDramEncryptionInfo_t *current,
                                                         nvmlDramEncryptionInfo_t *pending);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetHostname_v1(nvmlDevice_t device, nvmlHostname_v1_t *hostname);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetCapabilities(nvmlDevice_t device, nvmlDeviceCapabilities_t *caps);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetAutoBoostedClocksEnabled(nvmlDevice_t device, nvmlEnableState_t *isEnabled,
                                                               nvmlEnableState_t *defaultIsEnabled);
NVML_PUBLIC nvmlReturn_t nvmlSystemGetProcessName(unsigned int pid, char *name, unsigned int length);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
                                                     unsigned long *nodeSet, unsigned int scope);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link, unsigned int capability,
                                                       unsigned int *capResult);
NVML_PUBLIC nvmlReturn_t nvmlDeviceSetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t mode);
NVML_PUBLIC nvmlReturn_t nvmlDeviceSetComputeMode(nvmlDevice_t device, nvmlComputeMode_t mode);
NVML_PUBLIC nvmlReturn_t nvmlDeviceSetEccMode(nvmlDevice_t device, nvmlEnableState_t ecc);
NVML_PUBLIC nvmlReturn_t nvmlDeviceSetAccountingMode(nvmlDevice_t device, nvmlEnableState_t mode);
NVML_PUBLIC nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node);

/*
 * dra-fake's own extensions, for what nvidia-smi prints but NVML has no public call for: in the
 * library's static archive only (hidden in libnvidia-ml.so.1, whose exports are NVML's names), under
 * the draFake prefix.
 */
/* The GPU part number nvidia-smi -q shows (device file key gpu_part_number); NOT_SUPPORTED when
 * the board has none. */
nvmlReturn_t draFakeDeviceGetGpuPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length);
/* The PCI bus ID ("00000000:18:00.0") of the GPU at an NVML index whatever its state: the real
 * nvidia-smi names a lost GPU, whose handle NVML refuses, by its bus ID. */
nvmlReturn_t draFakeGetPciBusIdByIndex(unsigned int index, char *busId, unsigned int length);

#endif
