/* Starting NVML, the GPUs a command targets (-i), their MIG devices, and the clock. */
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "smi.h"

void smi_init(void)
{
    nvmlReturn_t rc = nvmlInit_v2();
    if (rc == NVML_ERROR_DRIVER_NOT_LOADED)
        fail(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that "
                "the latest NVIDIA driver is installed and running.\n\n");
    if (rc != NVML_SUCCESS)
        fail(RC_NOT_FOUND, "No devices were found\n");
}

/* The real tool names a lost GPU by its bus ID with a four-digit domain ("0000:18:00.0"). */
static void exit_lost(unsigned index)
{
    char bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE] = "";
    const char *shown = bus;
    if (draFakeGetPciBusIdByIndex(index, bus, sizeof bus) == NVML_SUCCESS && strlen(bus) == 16)
        shown = bus + 4;
    emit("Unable to determine the device handle for GPU%s: GPU is lost.  Reboot the system to recover this GPU\n",
         shown);
    fflush(smi_out);
    exit(RC_LOST);
}

static int add(struct targets *t, unsigned index)
{
    nvmlDevice_t h;
    nvmlPciInfo_t pci;
    nvmlReturn_t rc = nvmlDeviceGetHandleByIndex_v2(index, &h);
    if (rc == NVML_SUCCESS)
        rc = nvmlDeviceGetPciInfo_v3(h, &pci);
    if (rc == NVML_ERROR_GPU_IS_LOST)
        exit_lost(index);
    if (rc != NVML_SUCCESS)
        return 0;
    for (unsigned i = 0; i < t->n; i++)
        if (t->gpu[i].index == index)
            return 1;
    if (t->n < MAX_GPUS) {
        t->gpu[t->n].h = h;
        t->gpu[t->n].index = index;
        t->n++;
    }
    return 1;
}

/* One -i value: an index, a GPU or MIG UUID (its GPU), a PCI bus ID, or a serial number. */
static int find_one(const char *id, unsigned *index)
{
    nvmlDevice_t h;
    nvmlReturn_t rc;
    char *end;
    unsigned long n = strtoul(id, &end, 10);
    if (*id != '\0' && *end == '\0') {
        unsigned count;
        if (nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS || n >= count)
            return 0;
        *index = (unsigned)n;
        return 1;
    }
    if (strncmp(id, "GPU-", 4) == 0 || strncmp(id, "MIG-", 4) == 0)
        rc = nvmlDeviceGetHandleByUUID(id, &h);
    else if (strchr(id, ':') != NULL)
        rc = nvmlDeviceGetHandleByPciBusId_v2(id, &h);
    else
        rc = nvmlDeviceGetHandleBySerial(id, &h);
    if (rc != NVML_SUCCESS)
        return 0;
    unsigned is_mig = 0;
    if (nvmlDeviceIsMigDeviceHandle(h, &is_mig) == NVML_SUCCESS && is_mig &&
        nvmlDeviceGetDeviceHandleFromMigDeviceHandle(h, &h) != NVML_SUCCESS)
        return 0;
    return nvmlDeviceGetIndex(h, index) == NVML_SUCCESS;
}

int select_gpus(const char *ids, struct targets *t)
{
    unsigned count = 0;
    t->n = 0;
    if (nvmlDeviceGetCount_v2(&count) != NVML_SUCCESS || count == 0)
        return RC_NOT_FOUND;
    if (ids == NULL) {
        for (unsigned i = 0; i < count; i++)
            add(t, i);
        return t->n ? RC_OK : RC_NOT_FOUND;
    }
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", ids);
    for (char *save = NULL, *id = strtok_r(buf, ",", &save); id != NULL; id = strtok_r(NULL, ",", &save)) {
        unsigned index;
        while (*id == ' ')
            id++;
        if (!find_one(id, &index) || !add(t, index))
            return RC_NOT_FOUND;
    }
    return t->n ? RC_OK : RC_NOT_FOUND;
}

int mig_enabled(nvmlDevice_t gpu)
{
    unsigned cur, pend;
    return nvmlDeviceGetMigMode(gpu, &cur, &pend) == NVML_SUCCESS && cur == NVML_DEVICE_MIG_ENABLE;
}

unsigned mig_devices(nvmlDevice_t gpu, nvmlDevice_t *migs, unsigned max)
{
    unsigned n = 0, slots = 0;
    if (!mig_enabled(gpu) || nvmlDeviceGetMaxMigDeviceCount(gpu, &slots) != NVML_SUCCESS)
        return 0;
    for (unsigned i = 0; i < slots && n < max; i++)
        if (nvmlDeviceGetMigDeviceHandleByIndex(gpu, i, &migs[n]) == NVML_SUCCESS)
            n++;
    return n;
}

void gpu_bus_id(nvmlDevice_t dev, char *buf, unsigned size)
{
    nvmlPciInfo_t pci;
    if (nvmlDeviceGetPciInfo_v3(dev, &pci) == NVML_SUCCESS)
        snprintf(buf, size, "%s", pci.busId);
    else
        snprintf(buf, size, "N/A");
}

/* The MIG device's GPU-instance profile name as nvidia-smi prints it ("1g.18gb"). */
void mig_profile_name(nvmlDevice_t mig, char *buf, unsigned size)
{
    nvmlDevice_t gpu;
    nvmlGpuInstance_t gi;
    nvmlGpuInstanceInfo_t info;
    nvmlGpuInstanceProfileInfo_v2_t p;
    unsigned id;
    snprintf(buf, size, "N/A");
    memset(&p, 0, sizeof p);
    p.version = nvmlGpuInstanceProfileInfo_v2;
    if (nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig, &gpu) != NVML_SUCCESS ||
        nvmlDeviceGetGpuInstanceId(mig, &id) != NVML_SUCCESS ||
        nvmlDeviceGetGpuInstanceById(gpu, id, &gi) != NVML_SUCCESS || nvmlGpuInstanceGetInfo(gi, &info) != NVML_SUCCESS ||
        nvmlDeviceGetGpuInstanceProfileInfoByIdV(gpu, info.profileId, &p) != NVML_SUCCESS)
        return;
    snprintf(buf, size, "%s", strncmp(p.name, "MIG ", 4) == 0 ? p.name + 4 : p.name);
}

void now_text(char *buf, unsigned size, int iso)
{
    struct timeval tv;
    struct tm tm;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    if (iso) {
        size_t n = strftime(buf, size, "%Y/%m/%d %H:%M:%S", &tm);
        snprintf(buf + n, size - n, ".%03ld", (long)(tv.tv_usec / 1000));
    } else {
        strftime(buf, size, "%a %b %e %H:%M:%S %Y", &tm);
    }
}
