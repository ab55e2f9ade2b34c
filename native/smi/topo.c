/*
 * nvidia-smi topo -m and nvlink -s / -c. topo.txt and nvl.txt of the H200 capture: a GPU without
 * NVLink prints no nvlink lines; the matrix names each pair's path (NV# for # NVLinks, else the
 * PCIe path NVML reports), the CPUs and NUMA node near each GPU.
 */
#include <string.h>

#include "values.h"

#define CPU_WORDS 16 /* 1024 CPUs */

/* a bit mask as a list of ranges: "0-15,32-47" */
static void ranges(const unsigned long *mask, unsigned words, char *buf, size_t size)
{
    const unsigned bits = (unsigned)(8 * sizeof(unsigned long));
    size_t len = 0;
    buf[0] = '\0';
    for (unsigned i = 0; i < words * bits;) {
        if (!(mask[i / bits] >> (i % bits) & 1UL)) {
            i++;
            continue;
        }
        unsigned j = i;
        while (j + 1 < words * bits && mask[(j + 1) / bits] >> ((j + 1) % bits) & 1UL)
            j++;
        if (j > i)
            len += (size_t)snprintf(buf + len, size - len, "%s%u-%u", len ? "," : "", i, j);
        else
            len += (size_t)snprintf(buf + len, size - len, "%s%u", len ? "," : "", i);
        if (len >= size)
            break;
        i = j + 1;
    }
}

static unsigned nvlinks_between(nvmlDevice_t a, nvmlDevice_t b)
{
    nvmlPciInfo_t mine, remote;
    unsigned n = 0;
    if (nvmlDeviceGetPciInfo_v3(b, &mine) != NVML_SUCCESS)
        return 0;
    for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
        nvmlEnableState_t active;
        if (nvmlDeviceGetNvLinkState(a, link, &active) != NVML_SUCCESS)
            break;
        if (active && nvmlDeviceGetNvLinkRemotePciInfo_v2(a, link, &remote) == NVML_SUCCESS &&
            strcmp(remote.busId, mine.busId) == 0)
            n++;
    }
    return n;
}

static const char *path(nvmlDevice_t a, nvmlDevice_t b, char *buf, size_t size)
{
    nvmlGpuTopologyLevel_t level;
    unsigned links = nvlinks_between(a, b);
    if (links > 0) {
        snprintf(buf, size, "NV%u", links);
        return buf;
    }
    if (nvmlDeviceGetTopologyCommonAncestor(a, b, &level) != NVML_SUCCESS)
        return "N/A";
    switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
    case NVML_TOPOLOGY_SINGLE: return "PIX";
    case NVML_TOPOLOGY_MULTIPLE: return "PXB";
    case NVML_TOPOLOGY_HOSTBRIDGE: return "PHB";
    case NVML_TOPOLOGY_NODE: return "NODE";
    default: return "SYS";
    }
}

int cmd_topo(const struct opts *o)
{
    struct targets t;
    if (o->sub == NULL)
        fail(RC_INVALID_ARG, "ERROR: Option topo requires an operation. Please run 'nvidia-smi topo -h' for help.\n\n");
    if (select_gpus(o->ids, &t) != RC_OK)
        fail(RC_NOT_FOUND, "No devices were found\n");
    emit("\t\x1b[4m");
    for (unsigned g = 0; g < t.n; g++)
        emit("GPU%u\t", t.gpu[g].index);
    emit("CPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n");
    for (unsigned g = 0; g < t.n; g++) {
        unsigned long cpus[CPU_WORDS] = {0}, nodes[CPU_WORDS] = {0};
        char cpu_text[256] = "N/A", node_text[256] = "N/A", numa[16] = "N/A", buf[16];
        unsigned node;
        emit("GPU%u\t", t.gpu[g].index);
        for (unsigned k = 0; k < t.n; k++)
            emit("%s\t", k == g ? " X " : path(t.gpu[g].h, t.gpu[k].h, buf, sizeof buf));
        if (nvmlDeviceGetCpuAffinity(t.gpu[g].h, CPU_WORDS, cpus) == NVML_SUCCESS)
            ranges(cpus, CPU_WORDS, cpu_text, sizeof cpu_text);
        if (nvmlDeviceGetMemoryAffinity(t.gpu[g].h, CPU_WORDS, nodes, 0) == NVML_SUCCESS)
            ranges(nodes, CPU_WORDS, node_text, sizeof node_text);
        if (nvmlDeviceGetNumaNodeId(t.gpu[g].h, &node) == NVML_SUCCESS)
            snprintf(numa, sizeof numa, "%u", node);
        emit("%s\t%s\t\t%s\n", cpu_text, node_text, numa);
    }
    emit("\nLegend:\n\n");
    emit("  X    = Self\n");
    emit("  SYS  = Path through PCIe and the interconnect between NUMA nodes (e.g., QPI/UPI)\n");
    emit("  NODE = Path through PCIe and between the PCIe host bridges of one NUMA node\n");
    emit("  PHB  = Path through PCIe and a PCIe host bridge (typically the CPU)\n");
    emit("  PXB  = Path through several PCIe bridges (not through the PCIe host bridge)\n");
    emit("  PIX  = Path through at most one PCIe bridge\n");
    emit("  NV#  = Path through a bonded set of # NVLinks\n");
    return RC_OK;
}

int cmd_nvlink(const struct opts *o)
{
    static const char *const caps[] = {"P2P is supported", "Access to system memory supported",
                                       "P2P atomics supported", "System memory atomics supported",
                                       "SLI is supported", "Link is supported"};
    struct targets t;
    if (o->sub == NULL)
        fail(RC_INVALID_ARG, "ERROR: Option nvlink requires an operation. Please run 'nvidia-smi nvlink -h' for "
                             "help.\n\n");
    if (select_gpus(o->ids, &t) != RC_OK)
        fail(RC_NOT_FOUND, "No devices were found\n");
    for (unsigned g = 0; g < t.n; g++) {
        nvmlDevice_t d = t.gpu[g].h;
        nvmlEnableState_t active;
        struct val name, uuid;
        /* a GPU without NVLink is left out (nvl.txt: the H200 in a VM prints nothing) */
        if (nvmlDeviceGetNvLinkState(d, 0, &active) != NVML_SUCCESS)
            continue;
        g_name(d, 0, &name);
        g_uuid(d, 0, &uuid);
        emit("GPU %u: %s (UUID: %s)\n", t.gpu[g].index, name.rc ? "N/A" : name.s, uuid.rc ? "N/A" : uuid.s);
        for (unsigned link = 0; link < NVML_NVLINK_MAX_LINKS; link++) {
            nvmlFieldValue_t f;
            if (nvmlDeviceGetNvLinkState(d, link, &active) != NVML_SUCCESS)
                break;
            if (strcmp(o->sub, "-c") == 0) {
                for (unsigned c = 0; c < sizeof caps / sizeof caps[0]; c++) {
                    unsigned result;
                    if (nvmlDeviceGetNvLinkCapability(d, link, c, &result) == NVML_SUCCESS)
                        emit("\t Link %u, %s: %s\n", link, caps[c], result ? "true" : "false");
                }
                continue;
            }
            if (!active) {
                emit("\t Link %u: <inactive>\n", link);
                continue;
            }
            memset(&f, 0, sizeof f);
            f.fieldId = NVML_FI_DEV_NVLINK_GET_SPEED;
            f.scopeId = link;
            if (nvmlDeviceGetFieldValues(d, 1, &f) == NVML_SUCCESS && f.nvmlReturn == NVML_SUCCESS)
                emit("\t Link %u: %u.%03u GB/s\n", link, f.value.uiVal / 1000, f.value.uiVal % 1000);
            else
                emit("\t Link %u: N/A\n", link);
        }
    }
    return RC_OK;
}
