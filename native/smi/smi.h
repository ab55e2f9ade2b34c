/*
 * dra-fake's nvidia-smi: a consumer of dra-fake's NVML library (native/nvml), statically linked,
 * so that it runs in images without a C library and shows the numbers every NVML program in the
 * pod sees. The layouts, messages and exit codes are the real tool's (driver 580; captures in
 * tests/data/nvidia-smi/, docs/reference/nvidia-smi.md); every value comes from an NVML call.
 */
#ifndef DRA_FAKE_SMI_H
#define DRA_FAKE_SMI_H

#include <stdio.h>

#include "nvml.h"
#include "nvml_extra.h"

/* exit codes of nvidia-smi(1) (RETURN VALUE) */
#define RC_OK 0
#define RC_INVALID_ARG 2
#define RC_NOT_SUPPORTED 3
#define RC_NO_PERMISSION 4
#define RC_NOT_FOUND 6
#define RC_LOST 15
#define RC_UNKNOWN 255

#define MAX_GPUS 64
#define MAX_MIGS 8

/* ---- output (stdout, or the -f file) ---- */
extern FILE *smi_out;
void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* ---- a value read through NVML ---- */
struct val {
    nvmlReturn_t rc; /* NVML_SUCCESS: s holds the value; else the error nvidia-smi shows */
    char s[160];
};
typedef void getter_fn(nvmlDevice_t dev, int arg, struct val *v);
void v_set(struct val *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void v_err(struct val *v, nvmlReturn_t rc);
int v_ok(struct val *v, nvmlReturn_t rc); /* v_err unless rc is NVML_SUCCESS; returns rc == SUCCESS */
const char *err_text(nvmlReturn_t rc);    /* N/A for NOT_SUPPORTED, else nvmlErrorString */

/* ---- command line ---- */
enum mode {
    MODE_TABLE,
    MODE_LIST,
    MODE_QUERY,      /* -q, -q -x */
    MODE_QUERY_GPU,  /* --query-gpu */
    MODE_QUERY_APPS, /* --query-compute-apps */
    MODE_VERSION,
    MODE_HELP,
    MODE_HELP_QUERY_GPU,
    MODE_HELP_QUERY_APPS,
    MODE_LIST_EXCLUDED,
    MODE_MIG,
    MODE_TOPO,
    MODE_NVLINK,
    MODE_MODIFY, /* -pm, -c, -e, -am: sub the option, fields its value */
};

struct opts {
    enum mode mode;
    const char *ids;      /* -i: index, UUID or PCI bus ID, comma-separated */
    const char *fields;   /* --query-gpu / --query-compute-apps */
    const char *format;   /* --format */
    const char *display;  /* -d */
    const char *filename; /* -f */
    int xml;              /* -x */
    long loop_ms;         /* -l, -lms: 0 = once */
    const char *sub;      /* mig/topo/nvlink: the subcommand's option (-lgi, -m, -s, ...) */
};
int parse_args(int argc, char **argv, struct opts *o); /* exits with the real tool's message on error */

/* ---- devices ---- */
struct gpu {
    nvmlDevice_t h;
    unsigned index;
};
struct targets {
    unsigned n;
    struct gpu gpu[MAX_GPUS];
};
void smi_init(void);                                   /* nvmlInit or the real tool's failure */
/* RC_OK or RC_NOT_FOUND; a lost GPU among them: the real tool's message, exit 15 */
int select_gpus(const char *ids, struct targets *t);
unsigned mig_devices(nvmlDevice_t gpu, nvmlDevice_t *migs, unsigned max); /* by MIG index */
int mig_enabled(nvmlDevice_t gpu);
void gpu_bus_id(nvmlDevice_t dev, char *buf, unsigned size);
void mig_profile_name(nvmlDevice_t mig, char *buf, unsigned size); /* "1g.18gb" */
void now_text(char *buf, unsigned size, int iso);         /* the -q / table date, or the query timestamp */

/* ---- modes ---- */
int cmd_table(const struct opts *o);
int cmd_list(const struct opts *o);
int cmd_query_gpu(const struct opts *o);
int cmd_query_apps(const struct opts *o);
int cmd_query(const struct opts *o); /* -q and -q -x */
int cmd_version(void);
int cmd_help(void);
int cmd_help_query_gpu(void);
int cmd_help_query_apps(void);
int cmd_mig(const struct opts *o);
int cmd_topo(const struct opts *o);
int cmd_nvlink(const struct opts *o);
int cmd_modify(const struct opts *o);
const char *change_option(const char *arg, size_t *name_len); /* a modification option's short name */

/* ---- loop mode: runs fn until SIGINT/SIGTERM (-l/-lms), or once ---- */
int run_loop(const struct opts *o, int (*fn)(const struct opts *o, int first));

#endif
