/* The value getters (values.h): one NVML call each, formatted as the real tool prints the value. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "values.h"

#define MIB (1024ULL * 1024ULL)

void v_set(struct val *v, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->s, sizeof v->s, fmt, ap);
    va_end(ap);
    v->rc = NVML_SUCCESS;
}

void v_err(struct val *v, nvmlReturn_t rc)
{
    v->rc = rc;
    v->s[0] = '\0';
}

int v_ok(struct val *v, nvmlReturn_t rc)
{
    if (rc != NVML_SUCCESS)
        v_err(v, rc);
    return rc == NVML_SUCCESS;
}

const char *err_text(nvmlReturn_t rc)
{
    /* nvidia-smi prints N/A where NVML says NOT_SUPPORTED, NVML's own text for other errors */
    return rc == NVML_ERROR_NOT_SUPPORTED ? "N/A" : nvmlErrorString(rc);
}

const char *enable_text(unsigned on)
{
    return on ? "Enabled" : "Disabled";
}

static const char *yes_no(unsigned on)
{
    return on ? "Yes" : "No";
}

/* ---- identity, board, PCI -------------------------------------------------------------------- */

typedef nvmlReturn_t str_fn(nvmlDevice_t, char *, unsigned int);

static void str_value(struct val *v, nvmlReturn_t rc)
{
    if (rc == NVML_SUCCESS)
        v->rc = NVML_SUCCESS;
    else
        v_err(v, rc);
}

void g_name(nvmlDevice_t d, int arg, struct val *v)
{
    (void)arg;
    str_value(v, nvmlDeviceGetName(d, v->s, sizeof v->s));
}

void g_uuid(nvmlDevice_t d, int arg, struct val *v)
{
    (void)arg;
    str_value(v, nvmlDeviceGetUUID(d, v->s, sizeof v->s));
}

void g_serial(nvmlDevice_t d, int arg, struct val *v)
{
    (void)arg;
    str_value(v, nvmlDeviceGetSerial(d, v->s, sizeof v->s));
}

void g_vbios(nvmlDevice_t d, int arg, struct val *v)
{
    (void)arg;
    str_value(v, nvmlDeviceGetVbiosVersion(d, v->s, sizeof v->s));
}

void g_board_part(nvmlDevice_t d, int arg, struct val *v)
{
    (void)arg;
    str_value(v, nvmlDeviceGetBoardPartNumber(d, v->s, sizeof v->s));
}

void g_gpu_part(nvmlDevice_t d, int arg, struct val *v)
{
    (void)arg;
    str_value(v, draFakeDeviceGetGpuPartNumber(d, v->s, sizeof v->s));
}

void g_bus_id(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlPciInfo_t pci;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetPciInfo_v3(d, &pci)))
        v_set(v, "%s", pci.busId);
}

void g_index(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned i;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetIndex(d, &i)))
        v_set(v, "%u", i);
}

void g_minor(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned i;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetMinorNumber(d, &i)))
        v_set(v, "%u", i);
}

void g_brand(nvmlDevice_t d, int arg, struct val *v)
{
    /* nvidia-smi's names of nvmlBrandType_t */
    static const char *const names[] = {"Unknown", "Quadro", "Tesla", "NVS", "Grid", "GeForce", "Titan",
                                        "NVIDIA Virtual Applications", "NVIDIA Virtual PC",
                                        "NVIDIA Virtual Compute Server", "NVIDIA RTX Virtual Workstation",
                                        "NVIDIA Cloud Gaming", "Quadro RTX", "NVIDIA RTX", "NVIDIA",
                                        "GeForce RTX", "Titan RTX"};
    nvmlBrandType_t b;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetBrand(d, &b)))
        v_set(v, "%s", (unsigned)b < sizeof names / sizeof names[0] ? names[b] : "Unknown");
}

void g_architecture(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const names[] = {"", "", "Kepler", "Maxwell", "Pascal", "Volta", "Turing", "Ampere",
                                        "Ada Lovelace", "Hopper", "Blackwell"};
    nvmlDeviceArchitecture_t a;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetArchitecture(d, &a)))
        v_set(v, "%s", a >= 2 && a < sizeof names / sizeof names[0] ? names[a] : "Unknown");
}

void g_board_id(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned id;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetBoardId(d, &id)))
        v_set(v, "0x%x", id);
}

void g_multigpu(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned on;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetMultiGpuBoard(d, &on)))
        v_set(v, "%s", yes_no(on));
}

void g_pdi(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlPdi_t pdi;
    (void)arg;
    memset(&pdi, 0, sizeof pdi);
    pdi.version = nvmlPdi_v1;
    if (v_ok(v, nvmlDeviceGetPdi(d, &pdi)))
        v_set(v, "0x%016llx", pdi.value);
}

void g_module_id(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned id;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetModuleId(d, &id)))
        v_set(v, "%u", id);
}

void g_platform(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const peer[] = {"Switch Connected", "Direct Connected", "Unknown"};
    nvmlPlatformInfo_t p;
    memset(&p, 0, sizeof p);
    p.version = nvmlPlatformInfo_v2;
    if (!v_ok(v, nvmlDeviceGetPlatformInfo(d, &p))) {
        if (arg == PLAT_MODULE) /* the module ID has its own NVML call */
            g_module_id(d, 0, v);
        return;
    }
    switch (arg) {
    case PLAT_CHASSIS:
        v_set(v, "%.16s", (const char *)p.chassisSerialNumber);
        break;
    case PLAT_SLOT:
        v_set(v, "%u", p.slotNumber);
        break;
    case PLAT_TRAY:
        v_set(v, "%u", p.trayIndex);
        break;
    case PLAT_HOST:
        v_set(v, "%u", p.hostId);
        break;
    case PLAT_PEER:
        v_set(v, "%s", peer[p.peerType < 2 ? p.peerType : 2]);
        break;
    case PLAT_MODULE:
        v_set(v, "%u", p.moduleId);
        break;
    default: {
        unsigned long long guid = 0;
        for (int i = 0; i < 8; i++)
            guid = guid << 8 | p.ibGuid[i];
        v_set(v, "0x%016llx", guid);
    }
    }
}

void g_pci(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlPciInfo_t p;
    if (!v_ok(v, nvmlDeviceGetPciInfo_v3(d, &p)))
        return;
    switch (arg) {
    case PCI_DOMAIN: v_set(v, "0x%04X", p.domain); break;
    case PCI_BUS: v_set(v, "0x%02X", p.bus); break;
    case PCI_DEVICE: v_set(v, "0x%02X", p.device); break;
    case PCI_DEVICE_ID: v_set(v, "0x%08X", p.pciDeviceId); break;
    default: v_set(v, "0x%08X", p.pciSubSystemId); break;
    }
}

/* arg: 0 base class, 1 sub class */
void g_pci_ext(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlPciInfoExt_t p;
    memset(&p, 0, sizeof p);
    p.version = nvmlPciInfoExt_v1;
    if (v_ok(v, nvmlDeviceGetPciInfoExt(d, &p)))
        v_set(v, "0x%X", arg ? p.subClass : p.baseClass);
}

void g_pcie_gen(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned g;
    nvmlReturn_t rc;
    switch (arg) {
    case GEN_CURRENT:
    case GEN_GPU_CURRENT: rc = nvmlDeviceGetCurrPcieLinkGeneration(d, &g); break;
    case GEN_MAX: rc = nvmlDeviceGetMaxPcieLinkGeneration(d, &g); break;
    case GEN_GPU_MAX: rc = nvmlDeviceGetGpuMaxPcieLinkGeneration(d, &g); break;
    default: rc = NVML_ERROR_NOT_SUPPORTED; /* the root port's maximum: no NVML call; N/A as on the H200 */
    }
    if (v_ok(v, rc))
        v_set(v, "%u", g);
}

/* arg: 0 current, 1 max */
void g_pcie_width(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned w;
    if (v_ok(v, arg ? nvmlDeviceGetMaxPcieLinkWidth(d, &w) : nvmlDeviceGetCurrPcieLinkWidth(d, &w)))
        v_set(v, "%u", w);
}

void g_pcie_tput(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned kb;
    if (v_ok(v, nvmlDeviceGetPcieThroughput(d, (nvmlPcieUtilCounter_t)arg, &kb)))
        v_set(v, "%u", kb);
}

void g_replay(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned n;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetPcieReplayCounter(d, &n)))
        v_set(v, "%u", n);
}

static nvmlReturn_t field(nvmlDevice_t d, unsigned id, unsigned scope, nvmlFieldValue_t *f)
{
    nvmlReturn_t rc;
    memset(f, 0, sizeof *f);
    f->fieldId = id;
    f->scopeId = scope;
    rc = nvmlDeviceGetFieldValues(d, 1, f);
    return rc != NVML_SUCCESS ? rc : f->nvmlReturn;
}

static unsigned long long field_u64(const nvmlFieldValue_t *f)
{
    switch (f->valueType) {
    case NVML_VALUE_TYPE_DOUBLE: return (unsigned long long)f->value.dVal;
    case NVML_VALUE_TYPE_UNSIGNED_INT: return f->value.uiVal;
    case NVML_VALUE_TYPE_UNSIGNED_LONG: return f->value.ulVal;
    case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return (unsigned long long)f->value.sllVal;
    case NVML_VALUE_TYPE_SIGNED_INT: return (unsigned long long)f->value.siVal;
    case NVML_VALUE_TYPE_UNSIGNED_SHORT: return f->value.usVal;
    default: return f->value.ullVal;
    }
}

/* arg: an NVML field ID; its value as an integer */
void g_field(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlFieldValue_t f;
    if (v_ok(v, field(d, (unsigned)arg, 0, &f)))
        v_set(v, "%llu", field_u64(&f));
}

/* arg: 0 outbound, 1 inbound */
void g_atomics(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const names[] = {"FETCHADD_32", "FETCHADD_64", "SWAP_32", "SWAP_64", "CAS_32", "CAS_64",
                                        "CAS_128"};
    nvmlFieldValue_t f;
    unsigned long long mask;
    size_t n = 0;
    if (!v_ok(v, field(d, arg ? NVML_FI_DEV_PCIE_INBOUND_ATOMICS_MASK : NVML_FI_DEV_PCIE_OUTBOUND_ATOMICS_MASK, 0,
                       &f)))
        return;
    mask = field_u64(&f);
    v->s[0] = '\0';
    for (unsigned i = 0; i < sizeof names / sizeof names[0]; i++)
        if (mask & (1ULL << i))
            n += (size_t)snprintf(v->s + n, sizeof v->s - n, "%s ", names[i]);
    v->rc = NVML_SUCCESS;
}

/* ---- modes and states -------------------------------------------------------------------------- */

void g_enable(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlEnableState_t a = NVML_FEATURE_DISABLED, b = NVML_FEATURE_DISABLED;
    nvmlReturn_t rc;
    switch (arg) {
    case EN_PERSISTENCE: rc = nvmlDeviceGetPersistenceMode(d, &a); break;
    case EN_DISPLAY_ACTIVE: rc = nvmlDeviceGetDisplayActive(d, &a); break;
    case EN_DISPLAY_ATTACHED: rc = nvmlDeviceGetDisplayMode(d, &a); break;
    case EN_ACCOUNTING: rc = nvmlDeviceGetAccountingMode(d, &a); break;
    case EN_POWER: rc = nvmlDeviceGetPowerManagementMode(d, &a); break;
    default: rc = nvmlDeviceGetEccMode(d, &a, &b); break;
    }
    if (!v_ok(v, rc))
        return;
    if (arg == EN_DISPLAY_ATTACHED) /* 580: nvmlDeviceGetDisplayMode tells whether a display is attached */
        v_set(v, "%s", yes_no(a));
    else
        v_set(v, "%s", enable_text(arg == EN_ECC_PENDING ? b : a));
}

void g_addressing_mode(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const names[] = {"None", "HMM", "ATS"};
    nvmlDeviceAddressingMode_t m;
    (void)arg;
    memset(&m, 0, sizeof m);
    m.version = nvmlDeviceAddressingMode_v1;
    if (v_ok(v, nvmlDeviceGetAddressingMode(d, &m)))
        v_set(v, "%s", m.value < 3 ? names[m.value] : "Unknown");
}

void g_accounting_buffer(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned n;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetAccountingBufferSize(d, &n)))
        v_set(v, "%u", n);
}

void g_driver_model(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const names[] = {"WDDM", "TCC", "MCDM"};
    unsigned cur, pend;
    if (v_ok(v, nvmlDeviceGetDriverModel_v2(d, &cur, &pend))) {
        unsigned m = arg ? pend : cur;
        v_set(v, "%s", m < 3 ? names[m] : "Unknown");
    }
}

/* arg: -1 the image version, else nvmlInforomObject_t */
void g_inforom(nvmlDevice_t d, int arg, struct val *v)
{
    if (arg < 0)
        str_value(v, nvmlDeviceGetInforomImageVersion(d, v->s, sizeof v->s));
    else
        str_value(v, nvmlDeviceGetInforomVersion(d, (nvmlInforomObject_t)arg, v->s, sizeof v->s));
}

void g_inforom_checksum(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlReturn_t rc = nvmlDeviceValidateInforom(d);
    (void)arg;
    if (rc == NVML_ERROR_CORRUPTED_INFOROM)
        v_set(v, "invalid");
    else if (v_ok(v, rc))
        v_set(v, "valid");
}

void g_recovery_action(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const names[] = {"None", "Reset", "Reboot", "Drain P2P", "Drain and Reset"};
    nvmlFieldValue_t f;
    (void)arg;
    if (v_ok(v, field(d, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, 0, &f))) {
        unsigned long long a = field_u64(&f);
        v_set(v, "%s", a < 5 ? names[a] : "Unknown");
    }
}

void g_gom(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const names[] = {"All On", "Compute", "Low Double Precision"};
    unsigned cur, pend;
    if (v_ok(v, nvmlDeviceGetGpuOperationMode(d, &cur, &pend))) {
        unsigned m = arg ? pend : cur;
        v_set(v, "%s", m < 3 ? names[m] : "Unknown");
    }
}

/* arg: 0 the mode, 1 host vGPU mode, 2 vGPU heterogeneous mode (no simulated host runs vGPU) */
void g_virtualization(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const names[] = {"None", "Pass-Through", "VGPU", "Host VGPU", "Host VSGA"};
    nvmlGpuVirtualizationMode_t m;
    if (arg != 0) {
        v_err(v, NVML_ERROR_NOT_SUPPORTED);
        return;
    }
    if (v_ok(v, nvmlDeviceGetVirtualizationMode(d, &m)))
        v_set(v, "%s", (unsigned)m < 5 ? names[m] : "Unknown");
}

void g_gsp_version(nvmlDevice_t d, int arg, struct val *v)
{
    char buf[80];
    (void)arg;
    if (v_ok(v, nvmlDeviceGetGspFirmwareVersion(d, buf)))
        v_set(v, "%s", buf);
}

/* arg: 0 current, 1 default */
void g_gsp_mode(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned on, def;
    if (v_ok(v, nvmlDeviceGetGspFirmwareMode(d, &on, &def)))
        v_set(v, "%s", enable_text(arg ? def : on));
}

void g_c2c(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlC2cModeInfo_v1_t c;
    (void)arg;
    memset(&c, 0, sizeof c);
    if (v_ok(v, nvmlDeviceGetC2cModeInfoV(d, &c)))
        v_set(v, "%s", enable_text(c.isC2cEnabled));
}

void g_compute_mode(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const names[] = {"Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process"};
    nvmlComputeMode_t m;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetComputeMode(d, &m)))
        v_set(v, "%s", (unsigned)m < 4 ? names[m] : "Unknown");
}

void g_compute_cap(nvmlDevice_t d, int arg, struct val *v)
{
    int major, minor;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetCudaComputeCapability(d, &major, &minor)))
        v_set(v, "%d.%d", major, minor);
}

/* arg: 0 current, 1 pending */
void g_mig_mode(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned cur, pend;
    if (v_ok(v, nvmlDeviceGetMigMode(d, &cur, &pend)))
        v_set(v, "%s", enable_text(arg ? pend : cur));
}

static const char *fabric_health(unsigned mask, unsigned shift)
{
    /* the two-bit NOT_SUPPORTED / TRUE / FALSE fields of nvmlGpuFabricInfo_v3.healthMask */
    switch ((mask >> shift) & 3) {
    case 1: return "True";
    case 2: return "False";
    default: return "N/A";
    }
}

void g_fabric(nvmlDevice_t d, int arg, struct val *v)
{
    static const char *const states[] = {"N/A", "Not Started", "In Progress", "Completed"};
    nvmlGpuFabricInfoV_t f;
    memset(&f, 0, sizeof f);
    f.version = nvmlGpuFabricInfo_v3;
    /* the real tool prints a plain N/A (no brackets, also in --query-gpu) for a GPU outside a fabric */
    if (nvmlDeviceGetGpuFabricInfoV(d, &f) != NVML_SUCCESS || f.state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) {
        v_set(v, "N/A");
        return;
    }
    switch (arg) {
    case FABRIC_STATE: v_set(v, "%s", states[f.state < 4 ? f.state : 0]); break;
    case FABRIC_STATUS: v_set(v, "%s", nvmlErrorString(f.status)); break;
    case FABRIC_CLIQUE: v_set(v, "%u", f.cliqueId); break;
    case FABRIC_CLUSTER: {
        const unsigned char *u = f.clusterUuid;
        v_set(v, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1], u[2], u[3],
              u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
        break;
    }
    case FABRIC_BANDWIDTH: v_set(v, "%s", fabric_health(f.healthMask, 0)); break;
    case FABRIC_ROUTE_RECOVERY: v_set(v, "%s", fabric_health(f.healthMask, 2)); break;
    case FABRIC_ROUTE_UNHEALTHY: v_set(v, "%s", fabric_health(f.healthMask, 4)); break;
    case FABRIC_ACCESS_TIMEOUT: v_set(v, "%s", fabric_health(f.healthMask, 6)); break;
    default: v_set(v, "N/A"); break; /* summary, configuration, partition: not simulated */
    }
}

void g_capabilities(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlDeviceCapabilities_t c;
    (void)arg;
    memset(&c, 0, sizeof c);
    c.version = nvmlDeviceCapabilities_v1;
    if (v_ok(v, nvmlDeviceGetCapabilities(d, &c)))
        v_set(v, "%s", c.capMask & NVML_DEV_CAP_EGM ? "enabled" : "disabled");
}

/* arg: 0 current, 1 default */
void g_auto_boost(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlEnableState_t on, def;
    if (v_ok(v, nvmlDeviceGetAutoBoostedClocksEnabled(d, &on, &def)))
        v_set(v, "%s", arg ? (def ? "On" : "Off") : (on ? "On" : "Off"));
}

/* ---- performance, memory, utilization ------------------------------------------------------------ */

void g_fan(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned s;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetFanSpeed(d, &s)))
        v_set(v, "%u", s);
}

void g_pstate(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlPstates_t p;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetPerformanceState(d, &p)))
        v_set(v, "P%d", (int)p);
}

/* arg: 0 supported, 1 active */
void g_event_mask(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned long long m;
    if (v_ok(v, arg ? nvmlDeviceGetCurrentClocksEventReasons(d, &m) : nvmlDeviceGetSupportedClocksEventReasons(d, &m)))
        v_set(v, "0x%016llX", m);
}

/* arg: the reason's bit */
void g_event_reason(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned long long m;
    if (v_ok(v, nvmlDeviceGetCurrentClocksEventReasons(d, &m)))
        v_set(v, "%s", m & (1ULL << arg) ? "Active" : "Not Active");
}

/* arg: the NVML field of the counter (nanoseconds); printed in microseconds */
void g_event_counter(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlFieldValue_t f;
    if (v_ok(v, field(d, (unsigned)arg, 0, &f)))
        v_set(v, "%llu", field_u64(&f) / 1000);
}

/*
 * nvidia-smi's MiB from NVML's bytes: total and used rounded down, reserved and free rounded up
 * (the H200 reserves 615.06 MiB and prints 616; its free 143155.94 MiB prints 143156:
 * docs/nvml.md#free-memory).
 */
nvmlReturn_t memory_mib(nvmlDevice_t dev, unsigned long long mib[4])
{
    nvmlMemory_v2_t m;
    nvmlReturn_t rc;
    memset(&m, 0, sizeof m);
    m.version = nvmlMemory_v2;
    rc = nvmlDeviceGetMemoryInfo_v2(dev, &m);
    if (rc != NVML_SUCCESS)
        return rc;
    mib[MEM_TOTAL] = m.total / MIB;
    mib[MEM_RESERVED] = (m.reserved + MIB - 1) / MIB;
    mib[MEM_USED] = m.used / MIB;
    mib[MEM_FREE] = (m.free + MIB - 1) / MIB;
    return NVML_SUCCESS;
}

void g_memory(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned long long mib[4];
    if (v_ok(v, memory_mib(d, mib)))
        v_set(v, "%llu", mib[arg]);
}

/* arg: MEM_TOTAL, MEM_USED or MEM_FREE */
void g_bar1(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlBAR1Memory_t b;
    if (!v_ok(v, nvmlDeviceGetBAR1MemoryInfo(d, &b)))
        return;
    v_set(v, "%llu", (arg == MEM_TOTAL ? b.bar1Total : arg == MEM_USED ? b.bar1Used : b.bar1Free) / MIB);
}

void g_protected_memory(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlMemory_t m;
    if (v_ok(v, nvmlDeviceGetConfComputeProtectedMemoryUsage(d, &m)))
        v_set(v, "%llu", (arg == MEM_TOTAL ? m.total : arg == MEM_USED ? m.used : m.free) / MIB);
}

/* arg: 0 gpu, 1 memory */
void g_util(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlUtilization_t u;
    if (v_ok(v, nvmlDeviceGetUtilizationRates(d, &u)))
        v_set(v, "%u", arg ? u.memory : u.gpu);
}

/* arg: 0 encoder, 1 decoder, 2 JPEG, 3 OFA */
void g_engine_util(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned u, period;
    nvmlReturn_t rc;
    switch (arg) {
    case 0: rc = nvmlDeviceGetEncoderUtilization(d, &u, &period); break;
    case 1: rc = nvmlDeviceGetDecoderUtilization(d, &u, &period); break;
    case 2: rc = nvmlDeviceGetJpgUtilization(d, &u, &period); break;
    default: rc = nvmlDeviceGetOfaUtilization(d, &u, &period); break;
    }
    if (v_ok(v, rc))
        v_set(v, "%u", u);
}

/* arg: 0 sessions, 1 average FPS, 2 average latency */
void g_encoder_stats(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned n, fps, latency;
    if (v_ok(v, nvmlDeviceGetEncoderStats(d, &n, &fps, &latency)))
        v_set(v, "%u", arg == 0 ? n : arg == 1 ? fps : latency);
}

void g_fbc_stats(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlFBCStats_t s;
    if (v_ok(v, nvmlDeviceGetFBCStats(d, &s)))
        v_set(v, "%u", arg == 0 ? s.sessionsCount : arg == 1 ? s.averageFPS : s.averageLatency);
}

/* ---- ECC, pages, rows ------------------------------------------------------------------------------ */

/* arg: 0 current, 1 pending */
void g_dram_encryption(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlDramEncryptionInfo_t cur, pend;
    memset(&cur, 0, sizeof cur);
    memset(&pend, 0, sizeof pend);
    cur.version = pend.version = nvmlDramEncryptionInfo_v1;
    if (v_ok(v, nvmlDeviceGetDramEncryptionMode(d, &cur, &pend)))
        v_set(v, "%s", enable_text(arg ? pend.encryptionState : cur.encryptionState));
}

void g_ecc_counter(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned long long n;
    nvmlReturn_t rc = nvmlDeviceGetMemoryErrorCounter(d, (nvmlMemoryErrorType_t)(arg / 100),
                                                      (nvmlEccCounterType_t)(arg / 10 % 10),
                                                      (nvmlMemoryLocation_t)(arg % 10), &n);
    if (v_ok(v, rc))
        v_set(v, "%llu", n);
}

/* arg: errorType * 10 + counterType */
void g_ecc_total(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned long long n;
    if (v_ok(v, nvmlDeviceGetTotalEccErrors(d, (nvmlMemoryErrorType_t)(arg / 10), (nvmlEccCounterType_t)(arg % 10),
                                            &n)))
        v_set(v, "%llu", n);
}

void g_sram(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlEccSramErrorStatus_t s;
    unsigned long long n;
    memset(&s, 0, sizeof s);
    s.version = nvmlEccSramErrorStatus_v1;
    if (!v_ok(v, nvmlDeviceGetSramEccErrorStatus(d, &s)))
        return;
    switch (arg) {
    case SRAM_VOL_PARITY: n = s.volatileUncParity; break;
    case SRAM_VOL_SECDED: n = s.volatileUncSecDed; break;
    case SRAM_AGG_PARITY: n = s.aggregateUncParity; break;
    case SRAM_AGG_SECDED: n = s.aggregateUncSecDed; break;
    case SRAM_THRESHOLD: v_set(v, "%s", yes_no(s.bThresholdExceeded)); return;
    case SRAM_L2: n = s.aggregateUncBucketL2; break;
    case SRAM_SM: n = s.aggregateUncBucketSm; break;
    case SRAM_MCU: n = s.aggregateUncBucketMcu; break;
    case SRAM_PCIE: n = s.aggregateUncBucketPcie; break;
    default: n = s.aggregateUncBucketOther; break;
    }
    v_set(v, "%llu", n);
}

/* arg: 0 multiple single-bit errors, 1 a double-bit error (nvmlPageRetirementCause_t) */
void g_retired(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned n = 0;
    if (v_ok(v, nvmlDeviceGetRetiredPages(d, (unsigned)arg, &n, NULL)))
        v_set(v, "%u", n);
}

/* arg: as g_retired; the retired pages' addresses */
void g_retired_list(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned long long pages[8];
    unsigned n = 8;
    size_t len = 0;
    if (!v_ok(v, nvmlDeviceGetRetiredPages(d, (unsigned)arg, &n, pages)))
        return;
    v_set(v, "%s", "");
    for (unsigned i = 0; i < n && i < 8; i++)
        len += (size_t)snprintf(v->s + len, sizeof v->s - len, "%s0x%016llx", i ? " " : "", pages[i]);
}

void g_retired_pending(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlEnableState_t p;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetRetiredPagesPendingStatus(d, &p)))
        v_set(v, "%s", yes_no(p));
}

void g_remapped(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned corr, unc, pending, failure;
    if (arg == ROWS_CORR_INACTIVE || arg == ROWS_UNC_INACTIVE) {
        nvmlRemappedRowsInfo_v2_t r;
        memset(&r, 0, sizeof r);
        if (v_ok(v, nvmlDeviceGetRemappedRows_v2(d, &r)))
            v_set(v, "%u", arg == ROWS_CORR_INACTIVE ? r.corrInactiveRemaps : r.uncInactiveRemaps);
        return;
    }
    if (!v_ok(v, nvmlDeviceGetRemappedRows(d, &corr, &unc, &pending, &failure)))
        return;
    switch (arg) {
    case ROWS_CORR: v_set(v, "%u", corr); break;
    case ROWS_UNC: v_set(v, "%u", unc); break;
    case ROWS_PENDING: v_set(v, "%s", yes_no(pending)); break;
    default: v_set(v, "%s", yes_no(failure)); break;
    }
}

/* arg: 0 max, 1 high, 2 partial, 3 low, 4 none */
void g_histogram(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlRowRemapperHistogramValues_t h;
    if (!v_ok(v, nvmlDeviceGetRowRemapperHistogram(d, &h)))
        return;
    const unsigned n[] = {h.max, h.high, h.partial, h.low, h.none};
    v_set(v, "%u", n[arg]);
}

/* arg: 0 channel repair, 1 TPC repair */
void g_repair(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlRepairStatus_t r;
    memset(&r, 0, sizeof r);
    r.version = nvmlRepairStatus_v1;
    if (v_ok(v, nvmlDeviceGetRepairStatus(d, &r)))
        v_set(v, "%s", yes_no(arg ? r.bTpcRepairPending : r.bChannelRepairPending));
}

/* ---- temperature, power, clocks ----------------------------------------------------------------- */

void g_temperature(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned t;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &t)))
        v_set(v, "%u", t);
}

/* GPU T.Limit: how far the GPU is below its maximum operating temperature */
void g_temperature_margin(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlMarginTemperature_t m;
    (void)arg;
    memset(&m, 0, sizeof m);
    m.version = nvmlMarginTemperature_v1;
    if (v_ok(v, nvmlDeviceGetMarginTemperature(d, &m)))
        v_set(v, "%d", m.marginTemperature);
}

void g_memory_temperature(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlFieldValue_t f;
    (void)arg;
    if (v_ok(v, field(d, NVML_FI_DEV_MEMORY_TEMP, 0, &f)))
        v_set(v, "%llu", field_u64(&f));
}

/* arg: nvmlTemperatureThresholds_t; the absolute threshold */
void g_threshold(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned t;
    if (v_ok(v, nvmlDeviceGetTemperatureThreshold(d, (nvmlTemperatureThresholds_t)arg, &t)))
        v_set(v, "%u", t);
}

/*
 * arg: nvmlTemperatureThresholds_t; the threshold as 580 prints it on T.Limit boards: relative to
 * the GPU's maximum operating temperature (the H100 capture: shutdown -8, slowdown -2, max 0); the
 * memory's against its own maximum.
 */
void g_threshold_tlimit(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned t, base;
    nvmlTemperatureThresholds_t ref =
        arg == NVML_TEMPERATURE_THRESHOLD_MEM_MAX ? NVML_TEMPERATURE_THRESHOLD_MEM_MAX : NVML_TEMPERATURE_THRESHOLD_GPU_MAX;
    if (v_ok(v, nvmlDeviceGetTemperatureThreshold(d, (nvmlTemperatureThresholds_t)arg, &t)) &&
        v_ok(v, nvmlDeviceGetTemperatureThreshold(d, ref, &base)))
        v_set(v, "%d", (int)base - (int)t);
}

static void watts(struct val *v, unsigned long long mw)
{
    v_set(v, "%llu.%02llu", mw / 1000, mw % 1000 / 10);
}

void g_power_draw(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned mw;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetPowerUsage(d, &mw)))
        watts(v, mw);
}

/* arg: an NVML power field (milliwatts) */
void g_power_field(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlFieldValue_t f;
    if (v_ok(v, field(d, (unsigned)arg, 0, &f)))
        watts(v, field_u64(&f));
}

/* arg: an NVML power field, asked for the whole module (Grace Hopper/Blackwell modules) */
void g_module_power(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlFieldValue_t f;
    if (v_ok(v, field(d, (unsigned)arg, NVML_POWER_SCOPE_MODULE, &f)))
        watts(v, field_u64(&f));
}

void g_power_limit(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned mw = 0, lo, hi;
    nvmlReturn_t rc;
    switch (arg) {
    case LIMIT_REQUESTED: rc = nvmlDeviceGetPowerManagementLimit(d, &mw); break;
    case LIMIT_ENFORCED: rc = nvmlDeviceGetEnforcedPowerLimit(d, &mw); break;
    case LIMIT_DEFAULT: rc = nvmlDeviceGetPowerManagementDefaultLimit(d, &mw); break;
    default:
        rc = nvmlDeviceGetPowerManagementLimitConstraints(d, &lo, &hi);
        mw = arg == LIMIT_MIN ? lo : hi;
    }
    if (v_ok(v, rc))
        watts(v, mw);
}

void g_clock(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned mhz;
    if (v_ok(v, nvmlDeviceGetClockInfo(d, (nvmlClockType_t)arg, &mhz)))
        v_set(v, "%u", mhz);
}

void g_app_clock(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned mhz;
    nvmlClockType_t t = (nvmlClockType_t)(arg % APP_DEFAULT);
    if (v_ok(v, arg >= APP_DEFAULT ? nvmlDeviceGetDefaultApplicationsClock(d, t, &mhz)
                                   : nvmlDeviceGetApplicationsClock(d, t, &mhz)))
        v_set(v, "%u", mhz);
}

void g_max_clock(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned mhz;
    if (v_ok(v, nvmlDeviceGetMaxClockInfo(d, (nvmlClockType_t)arg, &mhz)))
        v_set(v, "%u", mhz);
}

void g_boost_clock(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned mhz;
    if (v_ok(v, nvmlDeviceGetMaxCustomerBoostClock(d, (nvmlClockType_t)arg, &mhz)))
        v_set(v, "%u", mhz);
}

/* ---- MIG devices ----------------------------------------------------------------------------------- */

void g_mig_attr(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlDeviceAttributes_t a;
    if (!v_ok(v, nvmlDeviceGetAttributes_v2(d, &a)))
        return;
    const unsigned n[] = {a.multiprocessorCount, a.sharedCopyEngineCount, a.sharedEncoderCount,
                          a.sharedDecoderCount, a.sharedOfaCount, a.sharedJpegCount};
    v_set(v, "%u", n[arg]);
}

/* arg: 0 GPU instance ID, 1 compute instance ID */
void g_mig_id(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned id;
    if (v_ok(v, arg ? nvmlDeviceGetComputeInstanceId(d, &id) : nvmlDeviceGetGpuInstanceId(d, &id)))
        v_set(v, "%u", id);
}

/* ---- without a device ------------------------------------------------------------------------------ */

void g_timestamp(nvmlDevice_t d, int arg, struct val *v)
{
    (void)d;
    (void)arg;
    now_text(v->s, sizeof v->s, 1);
    v->rc = NVML_SUCCESS;
}

void g_driver_version(nvmlDevice_t d, int arg, struct val *v)
{
    (void)d;
    (void)arg;
    str_value(v, nvmlSystemGetDriverVersion(v->s, sizeof v->s));
}

/* nvidia-smi's "CUDA Version": NVML's major * 1000 + minor * 10 as major.minor */
void g_cuda_version(nvmlDevice_t d, int arg, struct val *v)
{
    int cuda;
    (void)d;
    (void)arg;
    if (v_ok(v, nvmlSystemGetCudaDriverVersion_v2(&cuda)))
        v_set(v, "%d.%d", cuda / 1000, cuda % 1000 / 10);
}

void g_count(nvmlDevice_t d, int arg, struct val *v)
{
    unsigned n;
    (void)d;
    (void)arg;
    if (v_ok(v, nvmlDeviceGetCount_v2(&n)))
        v_set(v, "%u", n);
}

void g_na(nvmlDevice_t d, int arg, struct val *v)
{
    (void)d;
    (void)arg;
    v_err(v, NVML_ERROR_NOT_SUPPORTED);
}

void g_deprecated(nvmlDevice_t d, int arg, struct val *v)
{
    (void)d;
    (void)arg;
    v_err(v, NVML_ERROR_DEPRECATED);
}

void g_hostname(nvmlDevice_t d, int arg, struct val *v)
{
    nvmlHostname_v1_t h;
    (void)arg;
    memset(&h, 0, sizeof h);
    if (v_ok(v, nvmlDeviceGetHostname_v1(d, &h)))
        v_set(v, "%.63s", h.value);
}
