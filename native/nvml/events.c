/*
 * Events: the live files polled while a program waits. An Xid critical error is delivered when
 * the GPU's fault_xid_seq grows (its data: fault_xid); single- and double-bit ECC error events
 * when fault_ecc_sbe or fault_ecc_dbe grow (docs/nvml.md). Each set remembers what it has seen
 * since a device was registered on it, so an Xid is delivered once to each set.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_REGISTRATIONS 64
#define POLL_MS 10U
/* the event types an H200 supports (nvmlDeviceGetSupportedEventTypes: tests/data/nvml) */
#define SUPPORTED_EVENTS 0xFF9FULL
#define NOT_A_GI_OR_CI 0xFFFFFFFFU

struct registration {
    struct nvmlDevice_st *device;
    unsigned long long types;
    unsigned long long xid_seq, sbe, dbe; /* the counts already delivered (or there at registration) */
};

struct nvmlEventSet_st {
    struct nvmlEventSet_st *next;
    unsigned count;
    struct registration regs[MAX_REGISTRATIONS];
};

/* every live set: only these are dereferenced; the lock is taken before the store's */
static struct nvmlEventSet_st *g_sets;
static int g_sets_lock;

static void sets_lock(void)
{
    while (__atomic_exchange_n(&g_sets_lock, 1, __ATOMIC_ACQUIRE))
        dn_sleep_ms(0);
}

static void sets_unlock(void)
{
    __atomic_store_n(&g_sets_lock, 0, __ATOMIC_RELEASE);
}

static int known_set(nvmlEventSet_t set)
{
    struct nvmlEventSet_st *s;
    for (s = g_sets; s != NULL; s = s->next) {
        if (s == set)
            return 1;
    }
    return 0;
}

static unsigned long long live_or_zero(struct nvmlDevice_st *device, const char *key)
{
    unsigned long long v = 0;
    return dn_live_u64(device, key, &v) ? v : 0;
}

nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    struct nvmlEventSet_st *s;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (set == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    s = calloc(1, sizeof *s);
    if (s == NULL)
        return NVML_ERROR_MEMORY;
    sets_lock();
    s->next = g_sets;
    g_sets = s;
    sets_unlock();
    *set = s;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    struct nvmlEventSet_st **p;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    sets_lock();
    for (p = &g_sets; *p != NULL; p = &(*p)->next) {
        if (*p == set) {
            *p = set->next;
            sets_unlock();
            free(set);
            return NVML_SUCCESS;
        }
    }
    sets_unlock();
    return NVML_ERROR_INVALID_ARGUMENT;
}

nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    nvmlReturn_t rc = dn_check_gpu(device, eventTypes);
    if (rc == NVML_SUCCESS)
        *eventTypes = SUPPORTED_EVENTS;
    return rc;
}

nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    unsigned i;
    struct registration *r = NULL;
    nvmlReturn_t rc = dn_check_gpu(device, set);
    if (rc != NVML_SUCCESS)
        return rc;
    if (eventTypes & ~SUPPORTED_EVENTS)
        return NVML_ERROR_NOT_SUPPORTED;
    sets_lock();
    if (!known_set(set)) {
        sets_unlock();
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (i = 0; i < set->count; i++) {
        if (set->regs[i].device == device)
            r = &set->regs[i];
    }
    if (r == NULL) {
        if (set->count == MAX_REGISTRATIONS) {
            sets_unlock();
            return NVML_ERROR_INSUFFICIENT_RESOURCES;
        }
        r = &set->regs[set->count++];
        r->device = device;
        r->types = 0;
        r->xid_seq = live_or_zero(device, "fault_xid_seq");
        r->sbe = live_or_zero(device, "fault_ecc_sbe");
        r->dbe = live_or_zero(device, "fault_ecc_dbe");
    }
    r->types |= eventTypes;
    sets_unlock();
    return NVML_SUCCESS;
}

/* a count that grew since it was last seen (a smaller one: the plugin started over) */
static int grew(unsigned long long now, unsigned long long *seen)
{
    int more = now > *seen;
    *seen = now;
    return more;
}

/* one pass over the set's registrations; 1 with *data filled when an event happened */
static int poll_once(nvmlEventSet_t set, nvmlEventData_t *data)
{
    unsigned i;
    for (i = 0; i < set->count; i++) {
        struct registration *r = &set->regs[i];
        unsigned long long type = 0, value = 0;
        if ((r->types & nvmlEventTypeXidCriticalError) && grew(live_or_zero(r->device, "fault_xid_seq"), &r->xid_seq)) {
            type = nvmlEventTypeXidCriticalError;
            value = live_or_zero(r->device, "fault_xid");
        } else if ((r->types & nvmlEventTypeDoubleBitEccError) &&
                   grew(live_or_zero(r->device, "fault_ecc_dbe"), &r->dbe)) {
            type = nvmlEventTypeDoubleBitEccError;
        } else if ((r->types & nvmlEventTypeSingleBitEccError) &&
                   grew(live_or_zero(r->device, "fault_ecc_sbe"), &r->sbe)) {
            type = nvmlEventTypeSingleBitEccError;
        }
        if (type != 0) {
            data->device = r->device;
            data->eventType = type;
            data->eventData = value;
            data->gpuInstanceId = NOT_A_GI_OR_CI;
            data->computeInstanceId = NOT_A_GI_OR_CI;
            return 1;
        }
    }
    return 0;
}

/* waits up to timeoutms for an event; `size`: the caller's structure (the first version is
 * shorter: no instance IDs) */
static nvmlReturn_t wait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned timeoutms, size_t size)
{
    long long deadline = dn_now_ns() + (long long)timeoutms * 1000000LL;
    nvmlEventData_t event;
    if (!dn_initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (data == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (;;) {
        long long left;
        int got;
        sets_lock();
        if (!known_set(set)) {
            sets_unlock();
            return NVML_ERROR_INVALID_ARGUMENT;
        }
        got = poll_once(set, &event);
        sets_unlock();
        if (got) {
            memcpy(data, &event, size);
            return NVML_SUCCESS;
        }
        if (!dn_initialized())
            return NVML_ERROR_UNINITIALIZED;
        left = deadline - dn_now_ns();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        dn_sleep_ms(left < (long long)POLL_MS * 1000000LL ? (unsigned)(left / 1000000LL) + 1 : POLL_MS);
    }
}

nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return wait(set, data, timeoutms, sizeof *data);
}

nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return wait(set, data, timeoutms, offsetof(nvmlEventData_t, gpuInstanceId));
}
