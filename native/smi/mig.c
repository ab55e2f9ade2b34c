/*
 * nvidia-smi mig -lgip, -lgipp, -lgi, -lci, -lcip. Layouts: lgip.txt, lgipp.txt, lgi.txt, lci.txt of
 * the H200 capture (-lgip and -lgipp list a MIG-capable GPU's profiles also with MIG disabled;
 * the instance listings say "No MIG-enabled devices found." then). In a container the instances
 * listed are those of its MIG devices: NVML shows it nothing else.
 */
#include <stdlib.h>
#include <string.h>

#include "values.h"

#define LGIP_RULE "+-------------------------------------------------------------------------------+\n"
#define LGI_RULE "+-------------------------------------------------------+\n"
#define LCI_RULE "+--------------------------------------------------------------------+\n"
#define LCIP_RULE "+--------------------------------------------------------------------------------------+\n"

struct profile {
    nvmlGpuInstanceProfileInfo_v2_t info;
    unsigned index;
};

static int mig_capable(nvmlDevice_t gpu)
{
    unsigned cur, pend;
    return nvmlDeviceGetMigMode(gpu, &cur, &pend) == NVML_SUCCESS;
}

static void mig_name(const char *name, char *buf, size_t size)
{
    /* NVML names the profiles "MIG 1g.18gb"; nvidia-smi prints that name */
    snprintf(buf, size, "%s%s", strncmp(name, "MIG ", 4) == 0 ? "" : "MIG ", name);
}

static int by_size(const void *a, const void *b)
{
    const struct profile *x = a, *y = b;
    if (x->info.sliceCount != y->info.sliceCount)
        return x->info.sliceCount < y->info.sliceCount ? -1 : 1;
    if (x->info.memorySizeMB != y->info.memorySizeMB)
        return x->info.memorySizeMB < y->info.memorySizeMB ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The GPU's GPU-instance profiles, smallest first (the order of lgip.txt). */
static unsigned profiles(nvmlDevice_t gpu, struct profile *p, unsigned max)
{
    unsigned n = 0;
    for (unsigned i = 0; i < NVML_GPU_INSTANCE_PROFILE_COUNT && n < max; i++) {
        memset(&p[n], 0, sizeof p[n]);
        p[n].info.version = nvmlGpuInstanceProfileInfo_v2;
        p[n].index = i;
        if (nvmlDeviceGetGpuInstanceProfileInfoV(gpu, i, &p[n].info) == NVML_SUCCESS)
            n++;
    }
    qsort(p, n, sizeof p[0], by_size);
    return n;
}

static int lgip(const struct targets *t)
{
    int any = 0;
    for (unsigned g = 0; g < t->n; g++) {
        struct profile p[NVML_GPU_INSTANCE_PROFILE_COUNT];
        unsigned n;
        if (!mig_capable(t->gpu[g].h))
            continue;
        n = profiles(t->gpu[g].h, p, NVML_GPU_INSTANCE_PROFILE_COUNT);
        for (unsigned i = 0; i < n; i++) {
            const nvmlGpuInstanceProfileInfo_v2_t *f = &p[i].info;
            unsigned free = 0;
            char name[112], inst[32], mem[32];
            if (!any) {
                emit(LGIP_RULE);
                emit("| GPU instance profiles:                                                        |\n");
                emit("| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |\n");
                emit("|                                Free/Total   GiB              CE    JPEG  OFA  |\n");
                emit("|===============================================================================|\n");
                any = 1;
            }
            nvmlDeviceGetGpuInstanceRemainingCapacity(t->gpu[g].h, f->id, &free);
            mig_name(f->name, name, sizeof name);
            snprintf(inst, sizeof inst, "%u/%u", free, f->instanceCount);
            snprintf(mem, sizeof mem, "%.2f", (double)f->memorySizeMB / 1024.0);
            emit("|%4u  %-18s%4u%8s        %-11s%-2s     %-3u%5u%6u   |\n", t->gpu[g].index, name, f->id, inst, mem,
                 f->isP2pSupported ? "Yes" : "No", f->multiprocessorCount, f->decoderCount, f->encoderCount);
            emit("|%63s%-2u%5u%6u   |\n", "", f->copyEngineCount, f->jpegCount, f->ofaCount);
            emit(LGIP_RULE);
        }
    }
    if (!any)
        emit("No MIG-supported devices found.\n");
    return RC_OK;
}

static int lgipp(const struct targets *t)
{
    int any = 0;
    for (unsigned g = 0; g < t->n; g++) {
        struct profile p[NVML_GPU_INSTANCE_PROFILE_COUNT];
        unsigned n;
        if (!mig_capable(t->gpu[g].h))
            continue;
        n = profiles(t->gpu[g].h, p, NVML_GPU_INSTANCE_PROFILE_COUNT);
        for (unsigned i = 0; i < n; i++) {
            nvmlGpuInstancePlacement_t pl[32];
            unsigned count = 32;
            char starts[256] = "";
            size_t len = 0;
            if (nvmlDeviceGetGpuInstancePossiblePlacements_v2(t->gpu[g].h, p[i].info.id, pl, &count) != NVML_SUCCESS ||
                count == 0)
                continue;
            for (unsigned k = 0; k < count && k < 32; k++)
                len += (size_t)snprintf(starts + len, sizeof starts - len, "%s%u", k ? "," : "", pl[k].start);
            emit("GPU %2u Profile ID %2u Placement%s: {%s}:%u\n", t->gpu[g].index, p[i].info.id, count > 1 ? "s" : " ",
                 starts, pl[0].size);
            any = 1;
        }
    }
    if (!any)
        emit("No MIG-supported devices found.\n");
    return RC_OK;
}

/* a MIG device's GPU instance, compute instance and their infos */
struct instance {
    nvmlGpuInstance_t gi;
    nvmlGpuInstanceInfo_t gi_info;
    nvmlComputeInstance_t ci;
    nvmlComputeInstanceInfo_t ci_info;
    int has_ci;
};

static int instance(nvmlDevice_t gpu, nvmlDevice_t mig, struct instance *in)
{
    unsigned gi_id, ci_id;
    memset(in, 0, sizeof *in);
    if (nvmlDeviceGetGpuInstanceId(mig, &gi_id) != NVML_SUCCESS ||
        nvmlDeviceGetGpuInstanceById(gpu, gi_id, &in->gi) != NVML_SUCCESS ||
        nvmlGpuInstanceGetInfo(in->gi, &in->gi_info) != NVML_SUCCESS)
        return 0;
    in->has_ci = nvmlDeviceGetComputeInstanceId(mig, &ci_id) == NVML_SUCCESS &&
                 nvmlGpuInstanceGetComputeInstanceById(in->gi, ci_id, &in->ci) == NVML_SUCCESS &&
                 nvmlComputeInstanceGetInfo_v2(in->ci, &in->ci_info) == NVML_SUCCESS;
    return 1;
}

static void gi_profile_name(nvmlDevice_t gpu, unsigned profile_id, char *buf, size_t size)
{
    nvmlGpuInstanceProfileInfo_v2_t p;
    memset(&p, 0, sizeof p);
    p.version = nvmlGpuInstanceProfileInfo_v2;
    if (nvmlDeviceGetGpuInstanceProfileInfoByIdV(gpu, profile_id, &p) == NVML_SUCCESS)
        mig_name(p.name, buf, size);
    else
        snprintf(buf, size, "N/A");
}

static int ci_profile(nvmlGpuInstance_t gi, unsigned profile_id, nvmlComputeInstanceProfileInfo_v2_t *p)
{
    memset(p, 0, sizeof *p);
    p->version = nvmlComputeInstanceProfileInfo_v2;
    return nvmlGpuInstanceGetComputeInstanceProfileInfoV(gi, profile_id, NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                                                         p) == NVML_SUCCESS;
}

enum listing { LIST_GI, LIST_CI, LIST_CIP };

static int list_instances(const struct targets *t, enum listing what)
{
    int any = 0;
    for (unsigned g = 0; g < t->n; g++) {
        nvmlDevice_t gpu = t->gpu[g].h, migs[MAX_MIGS];
        unsigned n = mig_devices(gpu, migs, MAX_MIGS);
        for (unsigned m = 0; m < n; m++) {
            struct instance in;
            char name[112], place[32];
            if (!instance(gpu, migs[m], &in))
                continue;
            if (!any) {
                if (what == LIST_GI) {
                    emit(LGI_RULE);
                    emit("| GPU instances:                                        |\n");
                    emit("| GPU   Name             Profile  Instance   Placement  |\n");
                    emit("|                          ID       ID       Start:Size |\n");
                    emit("|=======================================================|\n");
                } else if (what == LIST_CI) {
                    emit(LCI_RULE);
                    emit("| Compute instances:                                                 |\n");
                    emit("| GPU     GPU       Name             Profile   Instance   Placement  |\n");
                    emit("|       Instance                       ID        ID       Start:Size |\n");
                    emit("|         ID                                                         |\n");
                    emit("|====================================================================|\n");
                } else {
                    emit(LCIP_RULE);
                    emit("| Compute instance profiles:                                                           |\n");
                    emit("| GPU     GPU       Name          Profile  Instances   Exclusive       Shared          |\n");
                    emit("|       Instance                    ID     Free/Total     SM       DEC   ENC   OFA     |\n");
                    emit("|         ID                                                       CE    JPEG          |\n");
                    emit("|======================================================================================|\n");
                }
                any = 1;
            }
            if (what == LIST_GI) {
                gi_profile_name(gpu, in.gi_info.profileId, name, sizeof name);
                snprintf(place, sizeof place, "%u:%u", in.gi_info.placement.start, in.gi_info.placement.size);
                emit("|%4u  %-17s%5u%9u%13s     |\n", t->gpu[g].index, name, in.gi_info.profileId, in.gi_info.id,
                     place);
                emit(LGI_RULE);
            } else if (what == LIST_CI) {
                nvmlComputeInstanceProfileInfo_v2_t p;
                if (!in.has_ci)
                    continue;
                if (ci_profile(in.gi, in.ci_info.profileId, &p))
                    mig_name(p.name, name, sizeof name);
                else
                    snprintf(name, sizeof name, "N/A");
                snprintf(place, sizeof place, "%u:%u", in.ci_info.placement.start, in.ci_info.placement.size);
                emit("|%4u%7u       %-16s%6u%10u%13s     |\n", t->gpu[g].index, in.gi_info.id, name,
                     in.ci_info.profileId, in.ci_info.id, place);
                emit(LCI_RULE);
            } else {
                nvmlGpuInstanceProfileInfo_v2_t gp;
                memset(&gp, 0, sizeof gp);
                gp.version = nvmlGpuInstanceProfileInfo_v2;
                if (nvmlDeviceGetGpuInstanceProfileInfoByIdV(gpu, in.gi_info.profileId, &gp) != NVML_SUCCESS)
                    gp.sliceCount = 0;
                for (unsigned k = 0; k < NVML_COMPUTE_INSTANCE_PROFILE_COUNT; k++) {
                    nvmlComputeInstanceProfileInfo_v2_t p;
                    unsigned free = 0;
                    char inst[32], id[16];
                    if (!ci_profile(in.gi, k, &p))
                        continue;
                    nvmlGpuInstanceGetComputeInstanceRemainingCapacity(in.gi, p.id, &free);
                    mig_name(p.name, name, sizeof name);
                    snprintf(inst, sizeof inst, "%u/%u", free, p.instanceCount);
                    /* '*' marks the profile spanning the whole GPU instance (the default) */
                    snprintf(id, sizeof id, "%u%s", p.id, p.sliceCount == gp.sliceCount ? "*" : " ");
                    emit("|%4u%7u       %-14s%5s%9s%13u%10u%6u%6u     |\n", t->gpu[g].index, in.gi_info.id, name, id,
                         inst, p.multiprocessorCount, p.sharedDecoderCount, p.sharedEncoderCount, p.sharedOfaCount);
                    emit("|%66s%2u%8u%10s|\n", "", p.sharedCopyEngineCount, p.sharedJpegCount, "");
                    emit(LCIP_RULE);
                }
            }
        }
    }
    if (!any)
        emit("No MIG-enabled devices found.\n");
    return RC_OK;
}

int cmd_mig(const struct opts *o)
{
    struct targets t;
    if (o->sub == NULL)
        fail(RC_INVALID_ARG, "ERROR: Option mig requires an operation. Please run 'nvidia-smi mig -h' for help.\n\n");
    if (select_gpus(o->ids, &t) != RC_OK)
        fail(RC_NOT_FOUND, "No devices were found\n");
    if (strcmp(o->sub, "-lgip") == 0)
        return lgip(&t);
    if (strcmp(o->sub, "-lgipp") == 0)
        return lgipp(&t);
    if (strcmp(o->sub, "-lgi") == 0)
        return list_instances(&t, LIST_GI);
    if (strcmp(o->sub, "-lci") == 0)
        return list_instances(&t, LIST_CI);
    return list_instances(&t, LIST_CIP);
}
