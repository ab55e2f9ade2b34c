/*
 * The summary table (nvidia-smi without arguments, -i) and -L. Layout of nvidia-smi 570/580:
 * smi.txt of the H200 capture, and the public MIG captures tests/test_nvidia_smi.py compares with.
 */
#include <string.h>

#include "values.h"

#define LINE "+-----------------------------------------------------------------------------------------+\n"
#define GPU_SEP "+-----------------------------------------+------------------------+----------------------+\n"
#define MIG_SEP "+------------------+----------------------------------+-----------+-----------------------+\n"

/* ---- -L --------------------------------------------------------------------------------------- */

int cmd_list(const struct opts *o)
{
    struct targets t;
    (void)o;
    if (select_gpus(NULL, &t) != RC_OK)
        fail(RC_NOT_FOUND, "No devices were found\n");
    for (unsigned g = 0; g < t.n; g++) {
        struct val name, uuid;
        nvmlDevice_t migs[MAX_MIGS];
        unsigned n;
        g_name(t.gpu[g].h, 0, &name);
        g_uuid(t.gpu[g].h, 0, &uuid);
        emit("GPU %u: %s (UUID: %s)\n", t.gpu[g].index, name.rc ? "N/A" : name.s, uuid.rc ? "N/A" : uuid.s);
        n = mig_devices(t.gpu[g].h, migs, MAX_MIGS);
        for (unsigned m = 0; m < n; m++) {
            char profile[64];
            mig_profile_name(migs[m], profile, sizeof profile);
            g_uuid(migs[m], 0, &uuid);
            emit("  MIG %-12sDevice %2u: (UUID: %s)\n", profile, m, uuid.rc ? "N/A" : uuid.s);
        }
    }
    return RC_OK;
}

/* ---- the table ---------------------------------------------------------------------------------- */

/* a value as the table shows it: the text, or N/A */
static const char *cell(struct val *v, const char *fmt_suffix)
{
    if (v->rc != NVML_SUCCESS)
        return "N/A";
    if (fmt_suffix != NULL) {
        size_t n = strlen(v->s);
        snprintf(v->s + n, sizeof v->s - n, "%s", fmt_suffix);
    }
    return v->s;
}

static void whole_watts(struct val *v)
{
    char *dot = strchr(v->s, '.');
    if (v->rc == NVML_SUCCESS && dot != NULL)
        *dot = '\0';
}

static const char *compute_mode_short(nvmlDevice_t d)
{
    nvmlComputeMode_t m;
    static const char *const names[] = {"Default", "E. Thread", "Prohibited", "E. Process"};
    if (nvmlDeviceGetComputeMode(d, &m) != NVML_SUCCESS || (unsigned)m > 3)
        return "N/A";
    return names[m];
}

static void gpu_rows(const struct gpu *gpu)
{
    nvmlDevice_t d = gpu->h;
    int mig = mig_enabled(d);
    struct val name, bus, fan, temp, perf, power, cap, util, migmode;
    char ecc[32] = "N/A", persistence[8] = "N/A", disp[8] = "N/A", used[32] = "N/A", total[32] = "N/A";
    nvmlEnableState_t on, pending;
    unsigned long long mib[4], errors;
    char shown_name[sizeof name.s];

    g_name(d, 0, &name);
    if (name.rc == NVML_SUCCESS && strlen(name.s) > 27) /* long product names are cut to 24 + "..." */
        snprintf(shown_name, sizeof shown_name, "%.24s...", name.s);
    else
        snprintf(shown_name, sizeof shown_name, "%s", name.rc ? "N/A" : name.s);
    if (nvmlDeviceGetPersistenceMode(d, &on) == NVML_SUCCESS)
        snprintf(persistence, sizeof persistence, "%s", on ? "On" : "Off");
    if (nvmlDeviceGetDisplayActive(d, &on) == NVML_SUCCESS)
        snprintf(disp, sizeof disp, "%s", on ? "On" : "Off");
    if (nvmlDeviceGetEccMode(d, &on, &pending) == NVML_SUCCESS) {
        if (!on)
            snprintf(ecc, sizeof ecc, "Off");
        else if (mig) /* the GPU's count is per MIG device then: the table says the mode */
            snprintf(ecc, sizeof ecc, "On");
        else if (nvmlDeviceGetTotalEccErrors(d, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, &errors) ==
                 NVML_SUCCESS)
            snprintf(ecc, sizeof ecc, "%llu", errors);
    }
    g_bus_id(d, 0, &bus);
    emit("|%4u  %-31s%-3s |%19s %3s |%21s |\n", gpu->index, shown_name, persistence, cell(&bus, NULL), disp, ecc);

    g_fan(d, 0, &fan);
    g_temperature(d, 0, &temp);
    g_pstate(d, 0, &perf);
    g_power_draw(d, 0, &power);
    g_power_limit(d, LIMIT_ENFORCED, &cap);
    whole_watts(&power);
    whole_watts(&cap);
    if (memory_mib(d, mib) == NVML_SUCCESS) {
        snprintf(used, sizeof used, "%lluMiB", mib[MEM_USED]);
        snprintf(total, sizeof total, "%lluMiB", mib[MEM_TOTAL]);
    }
    g_util(d, 0, &util);
    emit("|%4s%6s%6s%16s / %5s |%11s / %9s |%8s%13s |\n", cell(&fan, "%"), cell(&temp, "C"), cell(&perf, NULL),
         cell(&power, "W"), cell(&cap, "W"), used, total, cell(&util, "%"), compute_mode_short(d));
    g_mig_mode(d, 0, &migmode);
    emit("|%41s|%24s|%21s |\n", "", "", cell(&migmode, NULL));
    emit(GPU_SEP);
}

static void mig_rows(const struct gpu *gpu)
{
    nvmlDevice_t migs[MAX_MIGS];
    unsigned n = mig_devices(gpu->h, migs, MAX_MIGS);
    for (unsigned m = 0; m < n; m++) {
        struct val gi, ci, a[6], bar1_used, bar1_total;
        unsigned long long mib[4];
        char used[32] = "N/A", total[32] = "N/A", b_used[32], b_total[32];
        g_mig_id(migs[m], 0, &gi);
        g_mig_id(migs[m], 1, &ci);
        for (int k = 0; k < 6; k++)
            g_mig_attr(migs[m], k, &a[k]);
        if (memory_mib(migs[m], mib) == NVML_SUCCESS) {
            snprintf(used, sizeof used, "%lluMiB", mib[MEM_USED]);
            snprintf(total, sizeof total, "%lluMiB", mib[MEM_TOTAL]);
        }
        emit("|%3u%5s%4s%4u  |%19s / %8s    |%3s%7s |%3s%4s%5s%5s%5s |\n", gpu->index, cell(&gi, NULL),
             cell(&ci, NULL), m, used, total, cell(&a[ATTR_SM], NULL), "0", cell(&a[ATTR_CE], NULL),
             cell(&a[ATTR_ENC], NULL), cell(&a[ATTR_DEC], NULL), cell(&a[ATTR_OFA], NULL), cell(&a[ATTR_JPG], NULL));
        g_bar1(migs[m], MEM_USED, &bar1_used);
        g_bar1(migs[m], MEM_TOTAL, &bar1_total);
        snprintf(b_used, sizeof b_used, "%s", cell(&bar1_used, "MiB"));
        snprintf(b_total, sizeof b_total, "%s", cell(&bar1_total, "MiB"));
        emit("|                  |%19s / %8s    |           |                       |\n", b_used, b_total);
        emit(MIG_SEP);
    }
}

static void process_rows(const struct targets *t)
{
    int any = 0;
    for (unsigned g = 0; g < t->n; g++) {
        nvmlDevice_t devs[MAX_MIGS + 1];
        unsigned n = mig_devices(t->gpu[g].h, devs, MAX_MIGS);
        if (n == 0)
            devs[n++] = t->gpu[g].h;
        for (unsigned k = 0; k < n; k++) {
            nvmlProcessInfo_t procs[64];
            unsigned count = sizeof procs / sizeof procs[0];
            if (nvmlDeviceGetComputeRunningProcesses_v3(devs[k], &count, procs) != NVML_SUCCESS)
                continue;
            for (unsigned p = 0; p < count; p++) {
                char name[64] = "N/A", gi[8] = "N/A", ci[8] = "N/A";
                nvmlSystemGetProcessName(procs[p].pid, name, sizeof name);
                if (devs[k] != t->gpu[g].h) {
                    snprintf(gi, sizeof gi, "%u", procs[p].gpuInstanceId);
                    snprintf(ci, sizeof ci, "%u", procs[p].computeInstanceId);
                }
                emit("|  %3u  %4s %4s  %15u %6s   %-36.36s %8lluMiB |\n", t->gpu[g].index, gi, ci, procs[p].pid, "C",
                     name, procs[p].usedGpuMemory / (1024ULL * 1024ULL));
                any = 1;
            }
        }
    }
    if (!any)
        emit("|  No running processes found                                                             |\n");
}

static int table_once(const struct opts *o, int first)
{
    struct targets t;
    struct val driver, cuda;
    char date[64];
    int any_mig = 0;
    (void)first;
    if (select_gpus(o->ids, &t) != RC_OK)
        fail(RC_NOT_FOUND, "No devices were found\n");
    now_text(date, sizeof date, 0);
    emit("%s       \n", date);
    g_driver_version(NULL, 0, &driver);
    g_cuda_version(NULL, 0, &cuda);
    emit(LINE);
    emit("| NVIDIA-SMI %-22s Driver Version: %-14s CUDA Version: %-9s|\n", cell(&driver, NULL), driver.s,
         cell(&cuda, NULL));
    emit(GPU_SEP);
    emit("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n");
    emit("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n");
    emit("|                                         |                        |               MIG M. |\n");
    emit("|=========================================+========================+======================|\n");
    for (unsigned g = 0; g < t.n; g++) {
        gpu_rows(&t.gpu[g]);
        any_mig |= mig_enabled(t.gpu[g].h);
    }
    if (any_mig) {
        emit("\n" LINE);
        emit("| MIG devices:                                                                            |\n");
        emit(MIG_SEP);
        emit("| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |\n");
        emit("|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |\n");
        emit("|                  |                                  |        ECC|                       |\n");
        emit("|==================+==================================+===========+=======================|\n");
        for (unsigned g = 0; g < t.n; g++)
            mig_rows(&t.gpu[g]);
    }
    emit("\n" LINE);
    emit("| Processes:                                                                              |\n");
    emit("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |\n");
    emit("|        ID   ID                                                               Usage      |\n");
    emit("|=========================================================================================|\n");
    process_rows(&t);
    emit(LINE);
    return RC_OK;
}

int cmd_table(const struct opts *o)
{
    return run_loop(o, table_once);
}
