/*
 * --query-gpu, --query-compute-apps (CSV) and --version. The real tool's rules (captures in
 * tests/data/nvidia-smi/h200-580): "name [unit]" headers joined by ", "; a value without NVML's
 * answer in brackets ([N/A]); no --format means CSV with a header (qnofmt.txt); an unknown
 * modifier or field refuses the whole query with exit code 2 (badfmt.txt, qbad.txt).
 */
#include <string.h>

#include "fields.h"
#include "values.h"

#define MAX_FIELDS 256

static struct {
    int header, units;
    unsigned n;
    const struct field *f[MAX_FIELDS];
    struct targets t;
} q;

static void parse_format(const char *format)
{
    char buf[256];
    q.header = q.units = 1;
    if (format == NULL)
        return;
    snprintf(buf, sizeof buf, "%s", format);
    for (char *save = NULL, *m = strtok_r(buf, ",", &save); m != NULL; m = strtok_r(NULL, ",", &save)) {
        if (strcmp(m, "noheader") == 0)
            q.header = 0;
        else if (strcmp(m, "nounits") == 0)
            q.units = 0;
        else if (strcmp(m, "csv") != 0)
            fail(RC_INVALID_ARG, "Format modifier is not recognized.\n");
    }
}

/* Split the comma-separated names; `valid` resolves one name (NULL: refused). */
static void parse_names(const char *names, unsigned *n, unsigned max,
                        const void *(*valid)(const char *name), const void **out_fields)
{
    char buf[4096];
    const char *p = names == NULL ? "" : names;
    *n = 0;
    snprintf(buf, sizeof buf, "%s", p);
    char *s = buf;
    for (;;) {
        char *comma = strchr(s, ',');
        char *end;
        if (comma != NULL)
            *comma = '\0';
        while (*s == ' ')
            s++;
        end = s + strlen(s);
        while (end > s && end[-1] == ' ')
            *--end = '\0';
        const void *f = valid(s);
        if (f == NULL || *n >= max)
            fail(RC_INVALID_ARG, "Field \"%s\" is not a valid field to query.\n\n", s);
        out_fields[(*n)++] = f;
        if (comma == NULL)
            break;
        s = comma + 1;
    }
}

static void print_value(const struct val *v, const char *unit, int units)
{
    if (v->rc != NVML_SUCCESS)
        emit("[%s]", err_text(v->rc));
    else if (unit != NULL && units)
        emit("%s %s", v->s, unit);
    else
        emit("%s", v->s);
}

static const void *gpu_field(const char *name)
{
    return find_field(name);
}

static int query_gpu_once(const struct opts *o, int first)
{
    (void)o;
    if (first && q.header) {
        for (unsigned i = 0; i < q.n; i++) {
            const struct field *f = q.f[i];
            emit("%s%s", i ? ", " : "", f->name);
            if (f->unit != NULL)
                emit(" [%s]", f->unit);
        }
        emit("\n");
    }
    for (unsigned g = 0; g < q.t.n; g++) {
        for (unsigned i = 0; i < q.n; i++) {
            struct val v;
            q.f[i]->get(q.t.gpu[g].h, q.f[i]->arg, &v);
            if (i)
                emit(", ");
            print_value(&v, q.f[i]->unit, q.units);
        }
        emit("\n");
    }
    return RC_OK;
}

int cmd_query_gpu(const struct opts *o)
{
    parse_format(o->format);
    parse_names(o->fields, &q.n, MAX_FIELDS, gpu_field, (const void **)q.f);
    if (select_gpus(o->ids, &q.t) != RC_OK)
        fail(RC_NOT_FOUND, "No devices were found\n");
    return run_loop(o, query_gpu_once);
}

/* ---- --query-compute-apps ------------------------------------------------------------------ */

enum { APP_TIMESTAMP, APP_GPU_NAME, APP_GPU_BUS_ID, APP_GPU_SERIAL, APP_GPU_UUID, APP_PID, APP_NAME, APP_MEMORY };

struct app_field {
    const char *name, *alias, *unit;
    int id;
    const char *help;
};

static const struct app_field app_fields[] = {
    {"timestamp", NULL, NULL, APP_TIMESTAMP, "When the query ran, as \"YYYY/MM/DD HH:MM:SS.msec\"."},
    {"gpu_name", NULL, NULL, APP_GPU_NAME, "The product name of the process's GPU."},
    {"gpu_bus_id", NULL, NULL, APP_GPU_BUS_ID, "The PCI bus ID of the process's GPU."},
    {"gpu_serial", NULL, NULL, APP_GPU_SERIAL, "The serial number of the process's GPU."},
    {"gpu_uuid", NULL, NULL, APP_GPU_UUID, "The UUID of the process's GPU."},
    {"pid", NULL, NULL, APP_PID, "The process ID."},
    {"process_name", "name", NULL, APP_NAME, "The process's name."},
    {"used_gpu_memory", "used_memory", "MiB", APP_MEMORY, "The GPU memory the process's context uses."},
};

static const void *app_field(const char *name)
{
    for (unsigned i = 0; i < sizeof app_fields / sizeof app_fields[0]; i++)
        if (strcmp(app_fields[i].name, name) == 0 ||
            (app_fields[i].alias != NULL && strcmp(app_fields[i].alias, name) == 0))
            return &app_fields[i];
    return NULL;
}

static struct {
    unsigned n;
    const struct app_field *f[MAX_FIELDS];
} a;

static void app_row(nvmlDevice_t gpu, const nvmlProcessInfo_t *p)
{
    for (unsigned i = 0; i < a.n; i++) {
        struct val v;
        switch (a.f[i]->id) {
        case APP_TIMESTAMP: g_timestamp(gpu, 0, &v); break;
        case APP_GPU_NAME: g_name(gpu, 0, &v); break;
        case APP_GPU_BUS_ID: g_bus_id(gpu, 0, &v); break;
        case APP_GPU_SERIAL: g_serial(gpu, 0, &v); break;
        case APP_GPU_UUID: g_uuid(gpu, 0, &v); break;
        case APP_PID: v_set(&v, "%u", p->pid); break;
        case APP_NAME:
            if (v_ok(&v, nvmlSystemGetProcessName(p->pid, v.s, sizeof v.s)))
                v.rc = NVML_SUCCESS;
            break;
        default: v_set(&v, "%llu", p->usedGpuMemory / (1024ULL * 1024ULL)); break;
        }
        emit("%s", i ? ", " : "");
        print_value(&v, a.f[i]->unit, q.units);
    }
    emit("\n");
}

static void app_rows(nvmlDevice_t gpu, nvmlDevice_t dev)
{
    nvmlProcessInfo_t procs[64];
    unsigned n = sizeof procs / sizeof procs[0];
    if (nvmlDeviceGetComputeRunningProcesses_v3(dev, &n, procs) != NVML_SUCCESS)
        return;
    for (unsigned i = 0; i < n; i++)
        app_row(gpu, &procs[i]);
}

static int query_apps_once(const struct opts *o, int first)
{
    (void)o;
    if (first && q.header) {
        for (unsigned i = 0; i < a.n; i++) {
            emit("%s%s", i ? ", " : "", a.f[i]->name);
            if (a.f[i]->unit != NULL)
                emit(" [%s]", a.f[i]->unit);
        }
        emit("\n");
    }
    for (unsigned g = 0; g < q.t.n; g++) {
        nvmlDevice_t migs[MAX_MIGS];
        unsigned n = mig_devices(q.t.gpu[g].h, migs, MAX_MIGS);
        if (n == 0)
            app_rows(q.t.gpu[g].h, q.t.gpu[g].h);
        for (unsigned m = 0; m < n; m++)
            app_rows(q.t.gpu[g].h, migs[m]);
    }
    return RC_OK;
}

int cmd_query_apps(const struct opts *o)
{
    parse_format(o->format);
    parse_names(o->fields, &a.n, MAX_FIELDS, app_field, (const void **)a.f);
    if (select_gpus(o->ids, &q.t) != RC_OK)
        fail(RC_NOT_FOUND, "No devices were found\n");
    return run_loop(o, query_apps_once);
}

int cmd_help_query_apps(void)
{
    emit("List of valid properties to query for the switch \"--query-compute-apps\":\n\n");
    emit("Section about Active Compute Processes properties\n");
    emit("The processes with a compute context on the GPU.\n\n");
    for (unsigned i = 0; i < sizeof app_fields / sizeof app_fields[0]; i++) {
        emit("\"%s\"", app_fields[i].name);
        if (app_fields[i].alias != NULL)
            emit(" or \"%s\"", app_fields[i].alias);
        emit("\n%s\n\n", app_fields[i].help);
    }
    return RC_OK;
}

/* ---- --version ----------------------------------------------------------------------------------- */

int cmd_version(void)
{
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = "N/A";
    char nvml[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "N/A";
    struct val cuda;
    const char *shown = nvml;
    nvmlSystemGetDriverVersion(driver, sizeof driver);
    /* NVML's "13.580.159.04" (CUDA major first) is printed as "580.159" */
    if (nvmlSystemGetNVMLVersion(nvml, sizeof nvml) == NVML_SUCCESS) {
        char *dot = strchr(nvml, '.');
        char *last = strrchr(nvml, '.');
        if (dot != NULL && last != NULL && last > dot && strchr(dot + 1, '.') != last) {
            *last = '\0';
            shown = dot + 1;
        }
    }
    g_cuda_version(NULL, 0, &cuda);
    emit("NVIDIA-SMI version  : %s\n", driver);
    emit("NVML version        : %s\n", shown);
    emit("DRIVER version      : %s\n", driver);
    emit("CUDA Version        : %s\n", cuda.rc == NVML_SUCCESS ? cuda.s : "N/A");
    return RC_OK;
}
