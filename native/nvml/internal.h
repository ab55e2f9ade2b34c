/* Helpers shared by the API files: the checks every NVML entry point makes, string copies. */
#ifndef DRA_FAKE_NVML_INTERNAL_H
#define DRA_FAKE_NVML_INTERNAL_H

#include "store.h"

int dn_initialized(void);

/*
 * The checks of a device getter, in NVML's order: the library initialized, the handle one of
 * ours, the output pointer set, the GPU not lost. dn_check_gpu also turns MIG device handles
 * away (NVML_ERROR_NOT_SUPPORTED) for the queries NVML answers per GPU only.
 */
nvmlReturn_t dn_check(nvmlDevice_t device, const void *out);
nvmlReturn_t dn_check_gpu(nvmlDevice_t device, const void *out);

/* NVML's string getters: NOT_SUPPORTED for an absent value, INSUFFICIENT_SIZE when length
 * cannot hold the value and its NUL. */
nvmlReturn_t dn_copy_str(const char *value, char *out, unsigned length);

/* a static unsigned key into *out, NOT_SUPPORTED when absent or not a number */
nvmlReturn_t dn_static_out(const struct nvmlDevice_st *dev, const char *key, unsigned *out);

/* `enabled`-style keys ("1"/"0", "Enabled"/"Disabled") */
int dn_static_flag(const struct nvmlDevice_st *dev, const char *key, unsigned *out);

int dn_mig_enabled(const struct nvmlDevice_st *gpu);

/* the GPU's ECC error count (live fault_ecc_dbe or fault_ecc_sbe; ecc.c) */
unsigned long long dn_ecc_count(nvmlDevice_t device, int uncorrected);

#endif
