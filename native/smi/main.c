/* nvidia-smi of dra-fake: parse the command line, start NVML, run the mode (smi.h). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "smi.h"

FILE *smi_out;

void emit(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfprintf(smi_out, fmt, ap);
    va_end(ap);
}

void fail(int rc, const char *fmt, ...)
{
    va_list ap;
    fflush(smi_out);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    exit(rc);
}

int main(int argc, char **argv)
{
    struct opts o;
    int rc;
    smi_out = stdout;
    parse_args(argc, argv, &o);
    switch (o.mode) {
    case MODE_HELP: return cmd_help();
    case MODE_HELP_QUERY_GPU: return cmd_help_query_gpu();
    case MODE_HELP_QUERY_APPS: return cmd_help_query_apps();
    default: break;
    }
    if (o.filename != NULL) {
        smi_out = fopen(o.filename, "w");
        if (smi_out == NULL)
            fail(RC_INVALID_ARG, "Failed to open file %s for writing.\n", o.filename);
    }
    smi_init();
    switch (o.mode) {
    case MODE_VERSION: rc = cmd_version(); break;
    case MODE_LIST: rc = cmd_list(&o); break;
    case MODE_LIST_EXCLUDED: rc = RC_OK; break; /* no GPU is excluded from a container's NVML */
    case MODE_QUERY: rc = cmd_query(&o); break;
    case MODE_QUERY_GPU: rc = cmd_query_gpu(&o); break;
    case MODE_QUERY_APPS: rc = cmd_query_apps(&o); break;
    case MODE_MIG: rc = cmd_mig(&o); break;
    case MODE_TOPO: rc = cmd_topo(&o); break;
    case MODE_NVLINK: rc = cmd_nvlink(&o); break;
    case MODE_MODIFY: rc = cmd_modify(&o); break;
    default: rc = cmd_table(&o); break;
    }
    fflush(smi_out);
    nvmlShutdown();
    return rc;
}
