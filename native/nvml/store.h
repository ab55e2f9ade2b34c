/*
 * The device store of dra-fake's NVML: the device files a container was given
 * ($DRA_FAKE_ROOT/var/run/dra-fake/nvidia-smi/devices, written by the plugin) grouped into GPUs
 * and their MIG devices, and the live files (.../live/<uuid>/state) re-read at most every
 * DN_LIVE_TTL_NS. docs/nvml.md is the interface: its keys, quoting, and what an absent key means.
 *
 * Static data is immutable between a load and the next one, so getters read it without a lock;
 * live data changes under the store's lock and is copied out. Every size is bounded: a file that
 * is too large, holds a NUL byte, an unterminated quote or too many keys counts as absent.
 *
 * dn_* names are internal (hidden in the shared object); nvidia-smi links them statically.
 */
#ifndef DRA_FAKE_NVML_STORE_H
#define DRA_FAKE_NVML_STORE_H

#include "nvml.h"

#define DN_MAX_GPUS 64
#define DN_MAX_MIGS 8            /* MIG devices of one GPU a container can hold (H100/H200: 7) */
#define DN_MAX_FILES 1024        /* directory entries considered */
#define DN_FILE_MAX (64 * 1024)  /* bytes of one device or live file */
#define DN_MAX_KEYS 512          /* keys of one file */
#define DN_VALUE_MAX 256         /* a live value copied out (static values are read in place) */
#define DN_PATH_MAX 4096
#define DN_LIVE_TTL_NS 100000000LL /* live files are re-read at most this often */
#define DN_MAX_PROFILES 32        /* GPU-instance profiles of a GPU */
#define DN_MAX_PLACEMENTS 16      /* placements of one profile */

/* One parsed key=value file: pairs point into text (unquoted in place). */
struct dn_pair {
    const char *key;
    const char *value;
};

struct dn_kv {
    char *text;
    struct dn_pair *pairs;
    unsigned count;
};

struct dn_profile {
    unsigned index, id, slices, instances, sm, ce, dec, enc, jpg, ofa;
    unsigned long long memory_mib;
    char name[48]; /* without the "MIG " NVML puts in front */
    unsigned nplacements;
    nvmlGpuInstancePlacement_t placements[DN_MAX_PLACEMENTS];
};

struct nvmlGpuInstance_st {
    int in_use;
    struct nvmlDevice_st *mig; /* the MIG device this GPU instance holds */
};

struct nvmlComputeInstance_st {
    int in_use;
    struct nvmlDevice_st *mig;
};

struct nvmlDevice_st {
    int in_use;
    int is_mig;
    unsigned index;                 /* GPU: NVML index; MIG: index under its GPU */
    struct nvmlDevice_st *gpu;      /* MIG: its GPU; GPU: itself */
    struct dn_kv file;              /* the device file (a GPU with only MIG files: its first one) */
    const char *uuid;               /* gpu_uuid or mig_uuid, in file */
    unsigned domain, bus, device, function;
    /* live/<uuid>/state: read under the store lock */
    struct dn_kv live;
    long long live_read_ns;         /* CLOCK_MONOTONIC of the last read; 0: never */
    /* a share of a shared device (share_id in its own file): live/share-<share_id>/state */
    const char *share_id;           /* in file; NULL: not a share */
    struct dn_kv share_live;
    long long share_live_read_ns;
    /* GPU only */
    unsigned nmig;
    struct nvmlDevice_st *migs[DN_MAX_MIGS];
    unsigned nprofiles;
    struct dn_profile *profiles;    /* from gi_profiles and gi_placements (malloc'd) */
    /* MIG only */
    struct nvmlGpuInstance_st *gi;
    struct nvmlComputeInstance_st *ci;
};

/* ---- lifetime ---- */
nvmlReturn_t dn_store_load(void);           /* scan the devices directory; caller holds the lock */
unsigned dn_gpu_count(void);
struct nvmlDevice_st *dn_gpu(unsigned index); /* NULL past the count */

/* ---- the store lock (libc only: a spin lock that yields) ---- */
void dn_lock(void);
void dn_unlock(void);

/* ---- handle checks ---- */
int dn_valid_device(nvmlDevice_t device);
int dn_valid_gi(nvmlGpuInstance_t gi);
int dn_valid_ci(nvmlComputeInstance_t ci);

/* ---- static keys: in place, NULL when absent ---- */
const char *dn_static(const struct nvmlDevice_st *dev, const char *key);
int dn_static_uint(const struct nvmlDevice_st *dev, const char *key, unsigned *out);
int dn_static_u64(const struct nvmlDevice_st *dev, const char *key, unsigned long long *out);

/* ---- live keys of the device's own live file; 0 when absent ---- */
int dn_live_str(struct nvmlDevice_st *dev, const char *key, char *out, unsigned size);
int dn_live_u64(struct nvmlDevice_st *dev, const char *key, unsigned long long *out);
/* a reading: the live file's value, else the device file's (an idle GPU's value) */
int dn_reading_u64(struct nvmlDevice_st *dev, const char *key, unsigned long long *out);
int dn_reading_milli(struct nvmlDevice_st *dev, const char *key, unsigned long long *out);
int dn_lost(struct nvmlDevice_st *dev); /* the GPU's live file says fault_lost=1 */

/* ---- shares (docs/nvml.md, "Shares") ---- */
/* 1 with the share's memory (MiB) when the device is a share with its own memory view */
int dn_share_view(const struct nvmlDevice_st *dev, unsigned long long *memory_mib);
/* a live key of the share's own file (live/share-<share_id>/state); 0 when absent */
int dn_share_live_u64(struct nvmlDevice_st *dev, const char *key, unsigned long long *out);

/* ---- parsing helpers ---- */
int dn_parse_u64(const char *s, unsigned long long *out);      /* decimal or 0x hex, whole string */
int dn_parse_milli(const char *s, unsigned long long *out);    /* "77.51" -> 77510 */
int dn_parse_bus_id(const char *s, unsigned *domain, unsigned *bus, unsigned *device, unsigned *function);
int dn_parse_kv(char *text, unsigned length, struct dn_kv *kv); /* takes text (malloc'd, length+1) */
void dn_kv_free(struct dn_kv *kv);
const char *dn_kv_get(const struct dn_kv *kv, const char *key);
long long dn_now_ns(void);
void dn_sleep_ms(unsigned ms);

#endif
