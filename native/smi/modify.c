/*
 * Device modification options (-pm, -c, -e, -am): nvidia-smi asks NVML to change each targeted GPU
 * and reports NVML's answer. dra-fake's NVML refuses every change (NVML_ERROR_NO_PERMISSION, as
 * NVML answers an unprivileged caller), so the command fails as it does in such a container: a
 * line per GPU, then "Terminating early due to previous errors.", exit 4 (nvidia-smi(1)).
 */
#include <string.h>

#include "smi.h"

static const struct change {
    const char *shrt, *lng, *what;
    int compute; /* the value is a compute mode (0-3), else 0/DISABLED or 1/ENABLED */
} changes[] = {
    {"-pm", "--persistence-mode", "persistence mode", 0},
    {"-c", "--compute-mode", "the compute mode", 1},
    {"-e", "--ecc-config", "ECC mode", 0},
    {"-am", "--accounting-mode", "accounting mode", 0},
};

const char *change_option(const char *arg, size_t *name_len)
{
    for (unsigned i = 0; i < sizeof changes / sizeof changes[0]; i++) {
        for (int k = 0; k < 2; k++) {
            const char *name = k ? changes[i].lng : changes[i].shrt;
            size_t n = strlen(name);
            if (strncmp(arg, name, n) == 0 && (arg[n] == '\0' || arg[n] == '=')) {
                *name_len = n;
                return changes[i].shrt;
            }
        }
    }
    return NULL;
}

static int parse_value(const struct change *c, const char *v)
{
    static const char *const modes[] = {"DEFAULT", "EXCLUSIVE_THREAD", "PROHIBITED", "EXCLUSIVE_PROCESS"};
    static const char *const states[] = {"DISABLED", "ENABLED"};
    unsigned n = c->compute ? 4 : 2;
    for (unsigned i = 0; v != NULL && i < n; i++) {
        char digit[2] = {(char)('0' + i), '\0'};
        if (strcmp(v, digit) == 0 || strcasecmp(v, c->compute ? modes[i] : states[i]) == 0)
            return (int)i;
    }
    fail(RC_INVALID_ARG, "ERROR: Invalid value %s for option %s. Please run 'nvidia-smi -h' for help.\n\n",
         v ? v : "", c->shrt);
}

static int exit_code(nvmlReturn_t rc)
{
    switch (rc) {
    case NVML_ERROR_NO_PERMISSION: return RC_NO_PERMISSION;
    case NVML_ERROR_NOT_SUPPORTED: return RC_NOT_SUPPORTED;
    case NVML_ERROR_GPU_IS_LOST: return RC_LOST;
    default: return RC_UNKNOWN;
    }
}

int cmd_modify(const struct opts *o)
{
    const struct change *c = NULL;
    struct targets t;
    int value;
    for (unsigned i = 0; i < sizeof changes / sizeof changes[0]; i++)
        if (strcmp(changes[i].shrt, o->sub) == 0)
            c = &changes[i];
    if (c == NULL)
        return RC_UNKNOWN;
    value = parse_value(c, o->fields);
    if (select_gpus(o->ids, &t) != RC_OK)
        fail(RC_NOT_FOUND, "No devices were found\n");
    for (unsigned g = 0; g < t.n; g++) {
        char bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
        nvmlReturn_t rc;
        switch (c->shrt[1]) {
        case 'p': rc = nvmlDeviceSetPersistenceMode(t.gpu[g].h, (nvmlEnableState_t)value); break;
        case 'c': rc = nvmlDeviceSetComputeMode(t.gpu[g].h, (nvmlComputeMode_t)value); break;
        case 'e': rc = nvmlDeviceSetEccMode(t.gpu[g].h, (nvmlEnableState_t)value); break;
        default: rc = nvmlDeviceSetAccountingMode(t.gpu[g].h, (nvmlEnableState_t)value); break;
        }
        gpu_bus_id(t.gpu[g].h, bus, sizeof bus);
        if (rc != NVML_SUCCESS) {
            emit("Unable to set %s for GPU %s: %s\n", c->what, bus, nvmlErrorString(rc));
            emit("Terminating early due to previous errors.\n");
            return exit_code(rc);
        }
        emit("Set %s to %d for GPU %s.\n", c->what, value, bus);
    }
    emit("All done.\n");
    return RC_OK;
}
