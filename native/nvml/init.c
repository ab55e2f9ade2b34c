/* Initialization and shutdown, error strings, system queries, and the checks every call makes. */
#include <string.h>

#include "internal.h"

/* NVML's layouts on 64-bit Linux (docs/reference/nvml.md#5-buffer-sizes-and-structure-layouts) */
_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t");
_Static_assert(sizeof(nvmlPciInfo_v2_t) == 52, "nvmlPciInfo_v2_t");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t");
_Static_assert(sizeof(nvmlProcessInfo_t) == 24, "nvmlProcessInfo_t");
_Static_assert(sizeof(nvmlProcessInfo_v1_t) == 16, "nvmlProcessInfo_v1_t");
_Static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48, "nvmlGpuInstanceProfileInfo_t");
_Static_assert(nvmlGpuInstanceProfileInfo_v2 == 0x02000098, "nvmlGpuInstanceProfileInfo_v2");
_Static_assert(nvmlGpuInstanceProfileInfo_v3 == 0x03000098, "nvmlGpuInstanceProfileInfo_v3");
_Static_assert(nvmlComputeInstanceProfileInfo_v2 == 0x02000088, "nvmlComputeInstanceProfileInfo_v2");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t");
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t");
_Static_assert(nvmlMemory_v2 == 0x02000028, "nvmlMemory_v2");

/* nvmlInit* calls not yet matched by nvmlShutdown; the store is loaded while it is above 0 */
static int g_refcount;

int dn_initialized(void)
{
    return __atomic_load_n(&g_refcount, __ATOMIC_ACQUIRE) > 0;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    (void)flags; /* NO_GPUS: an empty device directory initializes anyway; NO_ATTACH: nothing to attach */
    dn_lock();
    if (g_refcount == 0)
        rc = dn_store_load();
    if (rc == NVML_SUCCESS)
        __atomic_store_n(&g_refcount, g_refcount + 1, __ATOMIC_RELEASE);
    dn_unlock();
    return rc;
}

nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    dn_lock();
    if (g_refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else
        __atomic_store_n(&g_refcount, g_refcount - 1, __ATOMIC_RELEASE);
    /* The store's memory stays until the next load: a thread still inside a getter keeps reading
     * valid memory; handles are refused from here on (dn_initialized). */
    dn_unlock();
    return rc;
}

/* NVML 580's texts (docs/reference/nvml.md#4-return-codes-and-their-texts) */
const char *nvmlErrorString(nvmlReturn_t result)
{
    static const char *const text[] = {
        "Success",
        "Uninitialized",
        "Invalid Argument",
        "Not Supported",
        "Insufficient Permissions",
        "Already Initialized",
        "Not Found",
        "Insufficient Size",
        "Insufficient External Power",
        "Driver Not Loaded",
        "Timeout",
        "Interrupt Request Issue",
        "NVML Shared Library Not Found",
        "Function Not Found",
        "Corrupted infoROM",
        "GPU is lost",
        "GPU requires reset",
        "GPU access blocked by the operating system",
        "Driver/library version mismatch",
        "In use by another client",
        "Insufficient Memory",
        "No data",
        "vGPU ECC not supported",
        "Insufficient Resources",
        "Invalid Frequency",
        "Argument version mismatch",
        "Requested functionality has been deprecated",
        "System is not in ready state",
        "No supported GPUs were found",
        "Resource not in correct state to perform requested operation",
    };
    if ((unsigned)result < sizeof text / sizeof text[0])
        return text[result];
    return "Unknown Error";
}

/* ---- checks ---------------------------------------------------------------------------------- */

nvmlReturn_t dn_check(nvmlDevice_t device, const void *out)
{
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!dn_valid_device(device) || out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dn_lost(device))
        return NVML_ERROR_GPU_IS_LOST;
    return NVML_SUCCESS;
}

nvmlReturn_t dn_check_gpu(nvmlDevice_t device, const void *out)
{
    nvmlReturn_t rc = dn_check(device, out);
    if (rc == NVML_SUCCESS && device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED;
    return rc;
}

nvmlReturn_t dn_copy_str(const char *value, char *out, unsigned length)
{
    size_t n;
    if (value == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    n = strlen(value);
    if (n + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, n + 1);
    return NVML_SUCCESS;
}

nvmlReturn_t dn_static_out(const struct nvmlDevice_st *dev, const char *key, unsigned *out)
{
    return dn_static_uint(dev, key, out) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

int dn_static_flag(const struct nvmlDevice_st *dev, const char *key, unsigned *out)
{
    const char *v = dn_static(dev, key);
    if (v == NULL)
        return 0;
    if (strcmp(v, "1") == 0 || strcmp(v, "Enabled") == 0 || strcmp(v, "On") == 0) {
        *out = 1;
        return 1;
    }
    if (strcmp(v, "0") == 0 || strcmp(v, "Disabled") == 0 || strcmp(v, "Off") == 0) {
        *out = 0;
        return 1;
    }
    return 0;
}

int dn_mig_enabled(const struct nvmlDevice_st *gpu)
{
    unsigned on = 0;
    return dn_static_flag(gpu->gpu, "mig_mode", &on) && on;
}

/* ---- system ---------------------------------------------------------------------------------- */

/* System-wide facts are in every device file; the first GPU's are read. */
static nvmlReturn_t system_str(const char *key, char *out, unsigned length)
{
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (dn_gpu(0) == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    return dn_copy_str(dn_static(dn_gpu(0), key), out, length);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    return system_str("driver_version", version, length);
}

nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    return system_str("nvml_version", version, length);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    struct nvmlDevice_st *gpu = dn_gpu(0);
    unsigned v;
    const char *cuda;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (cudaDriverVersion == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (gpu == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    if (dn_static_uint(gpu, "cuda_driver_version", &v) && v <= 0x7fffffffU) {
        *cudaDriverVersion = (int)v;
        return NVML_SUCCESS;
    }
    /* "13.0" -> 13000: NVML's encoding, major * 1000 + minor * 10 */
    cuda = dn_static(gpu, "cuda_version");
    if (cuda != NULL && strlen(cuda) < 16) {
        char major[16], *dot;
        unsigned long long ma, mi;
        memcpy(major, cuda, strlen(cuda) + 1);
        dot = strchr(major, '.');
        if (dot != NULL) {
            *dot = '\0';
            if (dn_parse_u64(major, &ma) && dn_parse_u64(dot + 1, &mi) && ma < 1000 && mi < 100) {
                *cudaDriverVersion = (int)(ma * 1000 + mi * 10);
                return NVML_SUCCESS;
            }
        }
    }
    return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion_v2(cudaDriverVersion);
}

nvmlReturn_t nvmlSystemGetDriverBranch(nvmlSystemDriverBranchInfo_t *branchInfo, unsigned int length)
{
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (branchInfo == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (branchInfo->version != nvmlSystemDriverBranchInfo_v1)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (length > sizeof branchInfo->branch)
        length = sizeof branchInfo->branch;
    return system_str("driver_branch", branchInfo->branch, length);
}

nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount)
{
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (unitCount == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *unitCount = 0; /* S-class units: none in a datacenter node */
    return NVML_SUCCESS;
}
