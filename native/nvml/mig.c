/*
 * MIG: the mode, MIG device handles (only the container's MIG devices exist), their attributes,
 * GPU-instance profiles and placements (gi_profiles, gi_placements of the GPU's files), and the
 * GPU and compute instances behind the container's MIG devices. A MIG device file is one
 * compute instance; the files with the same gi_id are the compute instances of one GPU instance.
 * Compute-instance profiles: only the one spanning its whole GPU instance is known (the MIG
 * file's engine counts), as dra-fake's MIG devices are.
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"

/* ---- lookups ---------------------------------------------------------------------------------- */

static const struct dn_profile *profile_by_index(const struct nvmlDevice_st *gpu, unsigned index)
{
    unsigned i;
    for (i = 0; i < gpu->nprofiles; i++) {
        if (gpu->profiles[i].index == index)
            return &gpu->profiles[i];
    }
    return NULL;
}

static const struct dn_profile *profile_by_id(const struct nvmlDevice_st *gpu, unsigned id)
{
    unsigned i;
    for (i = 0; i < gpu->nprofiles; i++) {
        if (gpu->profiles[i].id == id)
            return &gpu->profiles[i];
    }
    return NULL;
}

static unsigned key_or(const struct nvmlDevice_st *dev, const char *key, unsigned fallback)
{
    unsigned v;
    return dn_static_uint(dev, key, &v) ? v : fallback;
}

static unsigned gi_id(const struct nvmlDevice_st *mig)
{
    return key_or(mig, "gi_id", 0xffffffffU);
}

/* the slices of a MIG device's GPU instance (a 7g profile spans 7 slices, placed on 8) */
static unsigned gi_slices(const struct nvmlDevice_st *mig)
{
    const struct dn_profile *p = profile_by_id(mig->gpu, key_or(mig, "gi_profile_id", 0xffffffffU));
    return p != NULL ? p->slices : key_or(mig, "gi_size", 1);
}

/* the GPU instance of a MIG device: its first MIG device's record */
static struct nvmlGpuInstance_st *gi_of(const struct nvmlDevice_st *mig)
{
    unsigned m;
    for (m = 0; m < mig->gpu->nmig; m++) {
        if (gi_id(mig->gpu->migs[m]) == gi_id(mig))
            return mig->gpu->migs[m]->gi;
    }
    return mig->gi;
}

/* nvmlComputeInstanceProfile index of a compute instance of `slices` slices */
static unsigned ci_profile_of(unsigned slices)
{
    static const unsigned by_index[] = {1, 2, 3, 4, 7, 8, 6};
    unsigned i;
    for (i = 0; i < sizeof by_index / sizeof by_index[0]; i++) {
        if (by_index[i] == slices)
            return i;
    }
    return 0xffffffffU;
}

/* ---- mode and MIG device handles ------------------------------------------------------------ */

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    unsigned on;
    nvmlReturn_t rc = dn_check_gpu(device, currentMode);
    if (rc != NVML_SUCCESS)
        return rc;
    if (pendingMode == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dn_static_flag(device, "mig_mode", &on))
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = *pendingMode = on; /* changing it needs root: nothing pending */
    return NVML_SUCCESS;
}

/* the most MIG devices the GPU can hold: 0 with MIG disabled (NVML), else its largest
 * GPU-instance count (7 on an H100 or H200) */
static unsigned max_mig_devices(const struct nvmlDevice_st *gpu)
{
    unsigned i, most = 0;
    if (!dn_mig_enabled(gpu))
        return 0;
    for (i = 0; i < gpu->nprofiles; i++) {
        if (gpu->profiles[i].instances > most)
            most = gpu->profiles[i].instances;
    }
    if (most == 0 || most > DN_MAX_MIGS)
        most = 7;
    return most < gpu->nmig ? gpu->nmig : most;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    nvmlReturn_t rc = dn_check_gpu(device, count);
    if (rc == NVML_SUCCESS)
        *count = max_mig_devices(device);
    return rc;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *migDevice)
{
    nvmlReturn_t rc = dn_check(device, migDevice);
    if (rc != NVML_SUCCESS)
        return rc;
    if (device->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!dn_mig_enabled(device))
        return NVML_ERROR_NOT_FOUND; /* NVIDIA's answer with MIG disabled (tests/data/nvml) */
    if (index >= max_mig_devices(device))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= device->nmig)
        return NVML_ERROR_NOT_FOUND; /* a MIG device of another container, or none */
    *migDevice = device->migs[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    nvmlReturn_t rc = dn_check(migDevice, device);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!migDevice->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    *device = migDevice->gpu;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    nvmlReturn_t rc = dn_check(device, isMigDevice);
    if (rc == NVML_SUCCESS)
        *isMigDevice = (unsigned)device->is_mig;
    return rc;
}

/* GPU and compute instance IDs: only MIG devices have them (a GPU handle: INVALID_ARGUMENT, as
 * NVIDIA's library answers: tests/data/nvml) */
static nvmlReturn_t mig_key(nvmlDevice_t device, const char *key, unsigned *out)
{
    nvmlReturn_t rc = dn_check(device, out);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device->is_mig)
        return NVML_ERROR_INVALID_ARGUMENT;
    return dn_static_out(device, key, out);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return mig_key(device, "gi_id", id);
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id)
{
    return mig_key(device, "ci_id", id);
}

nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    nvmlDeviceAttributes_t a;
    unsigned long long memory;
    nvmlReturn_t rc = dn_check(device, attributes);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!device->is_mig)
        return NVML_ERROR_NOT_SUPPORTED; /* a whole GPU: NVIDIA's answer too */
    memset(&a, 0, sizeof a);
    if (!dn_static_uint(device, "sm", &a.multiprocessorCount) || !dn_static_u64(device, "mig_memory_mib", &memory))
        return NVML_ERROR_NOT_SUPPORTED;
    a.sharedCopyEngineCount = key_or(device, "ce", 0);
    a.sharedDecoderCount = key_or(device, "dec", 0);
    a.sharedEncoderCount = key_or(device, "enc", 0);
    a.sharedJpegCount = key_or(device, "jpg", 0);
    a.sharedOfaCount = key_or(device, "ofa", 0);
    a.gpuInstanceSliceCount = gi_slices(device);
    a.computeInstanceSliceCount = a.gpuInstanceSliceCount; /* one compute instance spans it */
    a.memorySizeMB = memory;
    *attributes = a;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return nvmlDeviceGetAttributes_v2(device, attributes);
}

/* ---- GPU-instance profiles and placements ---------------------------------------------------- */

static void profile_v1(const struct dn_profile *p, nvmlGpuInstanceProfileInfo_t *info)
{
    memset(info, 0, sizeof *info);
    info->id = p->id;
    info->isP2pSupported = 0;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->sm;
    info->copyEngineCount = p->ce;
    info->decoderCount = p->dec;
    info->encoderCount = p->enc;
    info->jpegCount = p->jpg;
    info->ofaCount = p->ofa;
    info->memorySizeMB = p->memory_mib;
}

/* the versioned structures (v3 drops isP2pSupported and adds capabilities) */
static nvmlReturn_t profile_versioned(const struct dn_profile *p, nvmlGpuInstanceProfileInfo_v2_t *info)
{
    nvmlGpuInstanceProfileInfo_t v1;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    profile_v1(p, &v1);
    snprintf(name, sizeof name, "MIG %s", p->name);
    if (info->version == nvmlGpuInstanceProfileInfo_v2) {
        nvmlGpuInstanceProfileInfo_v2_t out;
        memset(&out, 0, sizeof out);
        out.version = info->version;
        out.id = v1.id;
        out.isP2pSupported = v1.isP2pSupported;
        out.sliceCount = v1.sliceCount;
        out.instanceCount = v1.instanceCount;
        out.multiprocessorCount = v1.multiprocessorCount;
        out.copyEngineCount = v1.copyEngineCount;
        out.decoderCount = v1.decoderCount;
        out.encoderCount = v1.encoderCount;
        out.jpegCount = v1.jpegCount;
        out.ofaCount = v1.ofaCount;
        out.memorySizeMB = v1.memorySizeMB;
        memcpy(out.name, name, sizeof name);
        *info = out;
        return NVML_SUCCESS;
    }
    if (info->version == nvmlGpuInstanceProfileInfo_v3) {
        nvmlGpuInstanceProfileInfo_v3_t out;
        memset(&out, 0, sizeof out);
        out.version = info->version;
        out.id = v1.id;
        out.sliceCount = v1.sliceCount;
        out.instanceCount = v1.instanceCount;
        out.multiprocessorCount = v1.multiprocessorCount;
        out.copyEngineCount = v1.copyEngineCount;
        out.decoderCount = v1.decoderCount;
        out.encoderCount = v1.encoderCount;
        out.jpegCount = v1.jpegCount;
        out.ofaCount = v1.ofaCount;
        out.memorySizeMB = v1.memorySizeMB;
        memcpy(out.name, name, sizeof name);
        out.capabilities = 0; /* no peer-to-peer, no graphics: datacenter MIG profiles */
        memcpy(info, &out, sizeof out);
        return NVML_SUCCESS;
    }
    return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
}

/* profile info works with MIG disabled too (NVIDIA's library lists them: tests/data/nvml) */
static nvmlReturn_t profile_check(nvmlDevice_t device, const void *info, unsigned profile)
{
    nvmlReturn_t rc = dn_check_gpu(device, info);
    if (rc == NVML_SUCCESS && profile >= NVML_GPU_INSTANCE_PROFILE_COUNT)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    return rc;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                 nvmlGpuInstanceProfileInfo_t *info)
{
    const struct dn_profile *p;
    nvmlReturn_t rc = profile_check(device, info, profile);
    if (rc != NVML_SUCCESS)
        return rc;
    p = profile_by_index(device, profile);
    if (p == NULL)
        return NVML_ERROR_NOT_SUPPORTED;
    profile_v1(p, info);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                  nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const struct dn_profile *p;
    nvmlReturn_t rc = profile_check(device, info, profile);
    if (rc != NVML_SUCCESS)
        return rc;
    p = profile_by_index(device, profile);
    return p == NULL ? NVML_ERROR_NOT_SUPPORTED : profile_versioned(p, info);
}

nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device, unsigned int profileId,
                                                      nvmlGpuInstanceProfileInfo_v2_t *info)
{
    const struct dn_profile *p;
    nvmlReturn_t rc = dn_check_gpu(device, info);
    if (rc != NVML_SUCCESS)
        return rc;
    p = profile_by_id(device, profileId);
    return p == NULL ? NVML_ERROR_NOT_SUPPORTED : profile_versioned(p, info);
}

/* A profile ID the GPU has: the profile; else INVALID_ARGUMENT (NVML's answer for an unknown ID) */
static nvmlReturn_t known_profile(nvmlDevice_t device, unsigned profileId, const struct dn_profile **p)
{
    *p = profile_by_id(device, profileId);
    if (*p == NULL)
        return device->nprofiles == 0 ? NVML_ERROR_NOT_SUPPORTED : NVML_ERROR_INVALID_ARGUMENT;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device, unsigned int profileId,
                                                           nvmlGpuInstancePlacement_t *placements,
                                                           unsigned int *count)
{
    const struct dn_profile *p;
    nvmlReturn_t rc = dn_check_gpu(device, count);
    if (rc == NVML_SUCCESS)
        rc = known_profile(device, profileId, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    if (p->nplacements == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    if (placements == NULL) { /* the caller asks how many */
        *count = p->nplacements;
        return NVML_SUCCESS;
    }
    if (*count < p->nplacements) {
        *count = p->nplacements;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    memcpy(placements, p->placements, p->nplacements * sizeof placements[0]);
    *count = p->nplacements;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements(nvmlDevice_t device, unsigned int profileId,
                                                        nvmlGpuInstancePlacement_t *placements, unsigned int *count)
{
    return nvmlDeviceGetGpuInstancePossiblePlacements_v2(device, profileId, placements, count);
}

/*
 * How many more GPU instances of the profile fit: its placements that overlap no GPU instance
 * the container knows of, taken in order as NVML places them. Other containers' instances on the
 * same GPU are not visible here, so this can be more than the GPU has room for.
 */
nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device, unsigned int profileId,
                                                       unsigned int *count)
{
    const struct dn_profile *p;
    unsigned long long used = 0;
    unsigned i, n = 0;
    nvmlReturn_t rc = dn_check_gpu(device, count);
    if (rc == NVML_SUCCESS)
        rc = known_profile(device, profileId, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    for (i = 0; i < device->nmig; i++) {
        unsigned start = key_or(device->migs[i], "gi_start", 64), size = key_or(device->migs[i], "gi_size", 0);
        if (start < 64 && size > 0 && size <= 64 - start)
            used |= (size == 64 ? ~0ULL : ((1ULL << size) - 1)) << start;
    }
    for (i = 0; i < p->nplacements && n < p->instances; i++) {
        unsigned start = p->placements[i].start, size = p->placements[i].size;
        unsigned long long span;
        if (start >= 64 || size > 64 - start)
            continue;
        span = (size == 64 ? ~0ULL : ((1ULL << size) - 1)) << start;
        if ((used & span) == 0) {
            used |= span;
            n++;
        }
    }
    *count = n;
    return NVML_SUCCESS;
}

/* ---- GPU instances ---------------------------------------------------------------------------------- */

static nvmlReturn_t instances_check(nvmlDevice_t device, const void *out)
{
    nvmlReturn_t rc = dn_check_gpu(device, out);
    if (rc == NVML_SUCCESS && !dn_mig_enabled(device))
        rc = NVML_ERROR_NOT_SUPPORTED;
    return rc;
}

nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId, nvmlGpuInstance_t *gpuInstances,
                                       unsigned int *count)
{
    const struct dn_profile *p;
    unsigned m, n = 0;
    nvmlReturn_t rc = instances_check(device, count);
    if (rc == NVML_SUCCESS && gpuInstances == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        rc = known_profile(device, profileId, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    /* the caller's array holds the profile's instance count (NVML's contract) */
    for (m = 0; m < device->nmig && n < p->instances; m++) {
        struct nvmlDevice_st *mig = device->migs[m];
        if (gi_of(mig) == mig->gi && key_or(mig, "gi_profile_id", 0xffffffffU) == profileId)
            gpuInstances[n++] = mig->gi;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id, nvmlGpuInstance_t *gpuInstance)
{
    unsigned m;
    nvmlReturn_t rc = instances_check(device, gpuInstance);
    if (rc != NVML_SUCCESS)
        return rc;
    for (m = 0; m < device->nmig; m++) {
        if (gi_id(device->migs[m]) == id) {
            *gpuInstance = gi_of(device->migs[m]);
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* the checks of a GPU-instance call; *mig: the instance's (first) MIG device */
static nvmlReturn_t gi_check(nvmlGpuInstance_t gi, const void *out, struct nvmlDevice_st **mig)
{
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!dn_valid_gi(gi) || out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *mig = gi->mig;
    return dn_lost(*mig) ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    struct nvmlDevice_st *mig;
    nvmlReturn_t rc = gi_check(gpuInstance, info, &mig);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(info, 0, sizeof *info);
    info->device = mig->gpu;
    info->id = gi_id(mig);
    info->profileId = key_or(mig, "gi_profile_id", 0);
    info->placement.start = key_or(mig, "gi_start", 0);
    info->placement.size = key_or(mig, "gi_size", gi_slices(mig));
    return NVML_SUCCESS;
}

/* ---- compute instances ----------------------------------------------------------------------------- */

/* the one compute-instance profile a GPU instance of the container has: all of its slices */
static nvmlReturn_t ci_profile_check(struct nvmlDevice_st *mig, unsigned profile, unsigned engProfile)
{
    if (profile >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT || engProfile >= NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    return profile == ci_profile_of(gi_slices(mig)) ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

static void ci_profile_v1(struct nvmlDevice_st *mig, nvmlComputeInstanceProfileInfo_t *info)
{
    memset(info, 0, sizeof *info);
    info->id = ci_profile_of(gi_slices(mig));
    info->sliceCount = gi_slices(mig);
    info->instanceCount = 1;
    info->multiprocessorCount = key_or(mig, "sm", 0);
    info->sharedCopyEngineCount = key_or(mig, "ce", 0);
    info->sharedDecoderCount = key_or(mig, "dec", 0);
    info->sharedEncoderCount = key_or(mig, "enc", 0);
    info->sharedJpegCount = key_or(mig, "jpg", 0);
    info->sharedOfaCount = key_or(mig, "ofa", 0);
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                          unsigned int engProfile,
                                                          nvmlComputeInstanceProfileInfo_t *info)
{
    struct nvmlDevice_st *mig;
    nvmlReturn_t rc = gi_check(gpuInstance, info, &mig);
    if (rc == NVML_SUCCESS)
        rc = ci_profile_check(mig, profile, engProfile);
    if (rc == NVML_SUCCESS)
        ci_profile_v1(mig, info);
    return rc;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(nvmlGpuInstance_t gpuInstance, unsigned int profile,
                                                           unsigned int engProfile,
                                                           nvmlComputeInstanceProfileInfo_v2_t *info)
{
    struct nvmlDevice_st *mig;
    nvmlComputeInstanceProfileInfo_t v1;
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    const char *profile_name;
    nvmlReturn_t rc = gi_check(gpuInstance, info, &mig);
    if (rc == NVML_SUCCESS && info->version != nvmlComputeInstanceProfileInfo_v2 &&
        info->version != nvmlComputeInstanceProfileInfo_v3)
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (rc == NVML_SUCCESS)
        rc = ci_profile_check(mig, profile, engProfile);
    if (rc != NVML_SUCCESS)
        return rc;
    ci_profile_v1(mig, &v1);
    profile_name = dn_static(mig, "mig_profile");
    snprintf(name, sizeof name, "MIG %s", profile_name != NULL ? profile_name : "");
    if (info->version == nvmlComputeInstanceProfileInfo_v2) {
        nvmlComputeInstanceProfileInfo_v2_t out;
        memset(&out, 0, sizeof out);
        out.version = info->version;
        memcpy(&out.id, &v1, sizeof v1); /* id ... sharedOfaCount (all unsigned): v1's layout */
        memcpy(out.name, name, sizeof name);
        *info = out;
    } else {
        nvmlComputeInstanceProfileInfo_v3_t out;
        memset(&out, 0, sizeof out);
        out.version = info->version;
        memcpy(&out.id, &v1, sizeof v1);
        memcpy(out.name, name, sizeof name);
        memcpy(info, &out, sizeof out);
    }
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(nvmlGpuInstance_t gpuInstance,
                                                                unsigned int profileId, unsigned int *count)
{
    struct nvmlDevice_st *mig;
    nvmlReturn_t rc = gi_check(gpuInstance, count, &mig);
    if (rc == NVML_SUCCESS)
        rc = ci_profile_check(mig, profileId, 0);
    if (rc == NVML_SUCCESS)
        *count = 0; /* the compute instance takes the whole GPU instance */
    return rc;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(nvmlGpuInstance_t gpuInstance,
                                                                 unsigned int profileId,
                                                                 nvmlComputeInstancePlacement_t *placements,
                                                                 unsigned int *count)
{
    struct nvmlDevice_st *mig;
    nvmlReturn_t rc = gi_check(gpuInstance, count, &mig);
    if (rc == NVML_SUCCESS)
        rc = ci_profile_check(mig, profileId, 0);
    if (rc != NVML_SUCCESS)
        return rc;
    if (placements != NULL) {
        if (*count < 1) {
            *count = 1;
            return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        placements[0].start = 0;
        placements[0].size = gi_slices(mig);
    }
    *count = 1;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance, unsigned int profileId,
                                                nvmlComputeInstance_t *computeInstances, unsigned int *count)
{
    struct nvmlDevice_st *mig;
    unsigned m, n = 0;
    nvmlReturn_t rc = gi_check(gpuInstance, count, &mig);
    if (rc == NVML_SUCCESS && computeInstances == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && profileId >= NVML_COMPUTE_INSTANCE_PROFILE_COUNT)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return rc;
    for (m = 0; m < mig->gpu->nmig; m++) {
        struct nvmlDevice_st *other = mig->gpu->migs[m];
        if (gi_id(other) == gi_id(mig) && profileId == ci_profile_of(gi_slices(other)))
            computeInstances[n++] = other->ci;
    }
    *count = n;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance, unsigned int id,
                                                   nvmlComputeInstance_t *computeInstance)
{
    struct nvmlDevice_st *mig;
    unsigned m;
    nvmlReturn_t rc = gi_check(gpuInstance, computeInstance, &mig);
    if (rc != NVML_SUCCESS)
        return rc;
    for (m = 0; m < mig->gpu->nmig; m++) {
        struct nvmlDevice_st *other = mig->gpu->migs[m];
        if (gi_id(other) == gi_id(mig) && key_or(other, "ci_id", 0xffffffffU) == id) {
            *computeInstance = other->ci;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    struct nvmlDevice_st *mig;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!dn_valid_ci(computeInstance) || info == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    mig = computeInstance->mig;
    if (dn_lost(mig))
        return NVML_ERROR_GPU_IS_LOST;
    memset(info, 0, sizeof *info);
    info->device = mig->gpu;
    info->gpuInstance = gi_of(mig);
    info->id = key_or(mig, "ci_id", 0);
    info->profileId = ci_profile_of(gi_slices(mig));
    info->placement.start = 0;
    info->placement.size = gi_slices(mig);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance, nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}
