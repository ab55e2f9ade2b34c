/* The device store: discovery, parsing and live values (store.h, docs/nvml.md). */
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct nvmlDevice_st g_gpus[DN_MAX_GPUS];
static struct nvmlDevice_st g_migs[DN_MAX_GPUS][DN_MAX_MIGS];
static struct nvmlGpuInstance_st g_gis[DN_MAX_GPUS][DN_MAX_MIGS];
static struct nvmlComputeInstance_st g_cis[DN_MAX_GPUS][DN_MAX_MIGS];
static unsigned g_ngpus;
static char g_root[DN_PATH_MAX];
/* a GPU whose device file is one of its MIG devices' (no kind=gpu file): not freed twice */
static int g_gpu_file_borrowed[DN_MAX_GPUS];

/* ---- lock and time ------------------------------------------------------------------------- */

static int g_lock_word;

void dn_lock(void)
{
    while (__atomic_exchange_n(&g_lock_word, 1, __ATOMIC_ACQUIRE))
        sched_yield();
}

void dn_unlock(void)
{
    __atomic_store_n(&g_lock_word, 0, __ATOMIC_RELEASE);
}

long long dn_now_ns(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0)
        return 0;
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void dn_sleep_ms(unsigned ms)
{
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* ---- parsing ------------------------------------------------------------------------------- */

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int dn_parse_u64(const char *s, unsigned long long *out)
{
    unsigned long long v = 0;
    unsigned base = 10;
    if (s == NULL || *s == '\0')
        return 0;
    if (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        if (*s == '\0')
            return 0;
    }
    for (; *s; s++) {
        int d = hex_digit(*s);
        if (d < 0 || (unsigned)d >= base)
            return 0;
        if (v > (~0ULL - (unsigned)d) / base)
            return 0; /* overflow */
        v = v * base + (unsigned)d;
    }
    *out = v;
    return 1;
}

int dn_parse_milli(const char *s, unsigned long long *out)
{
    unsigned long long whole = 0, frac = 0;
    unsigned digits = 0;
    int round_up = 0;
    if (s == NULL || *s < '0' || *s > '9')
        return 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (whole > (~0ULL / 1000 - 9) / 10)
            return 0;
        whole = whole * 10 + (unsigned)(*s - '0');
    }
    if (*s == '.') {
        for (s++; *s >= '0' && *s <= '9'; s++) {
            if (digits < 3) {
                frac = frac * 10 + (unsigned)(*s - '0');
                digits++;
            } else if (digits == 3) {
                round_up = *s >= '5';
                digits++;
            }
        }
    }
    if (*s != '\0')
        return 0;
    for (; digits < 3; digits++)
        frac *= 10;
    *out = whole * 1000 + frac + (unsigned)round_up;
    return 1;
}

/* hex field of at most `max_digits` digits ending at `stop`; returns the end or NULL */
static const char *hex_field(const char *s, unsigned max_digits, char stop, unsigned *out)
{
    unsigned v = 0, n = 0;
    int d;
    while ((d = hex_digit(*s)) >= 0) {
        if (++n > max_digits)
            return NULL;
        v = v * 16 + (unsigned)d;
        s++;
    }
    if (n == 0 || *s != stop)
        return NULL;
    *out = v;
    return s;
}

/* NVML's spellings: "dddddddd:bb:dd.f", "dddd:bb:dd.f", "bb:dd.f", hex in any case */
int dn_parse_bus_id(const char *s, unsigned *domain, unsigned *bus, unsigned *device, unsigned *function)
{
    unsigned colons = 0, d = 0, b, dv, f;
    const char *p;
    if (s == NULL)
        return 0;
    for (p = s; *p; p++)
        colons += *p == ':';
    p = s;
    if (colons == 2) {
        p = hex_field(p, 8, ':', &d);
        if (p == NULL)
            return 0;
        p++;
    } else if (colons != 1) {
        return 0;
    }
    p = hex_field(p, 2, ':', &b);
    if (p == NULL)
        return 0;
    p = hex_field(p + 1, 2, '.', &dv);
    if (p == NULL || dv > 0x1f)
        return 0;
    p = hex_field(p + 1, 1, '\0', &f);
    if (p == NULL || f > 7)
        return 0;
    *domain = d;
    *bus = b;
    *device = dv;
    *function = f;
    return 1;
}

static int key_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

static int blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

void dn_kv_free(struct dn_kv *kv)
{
    free(kv->text);
    free(kv->pairs);
    kv->text = NULL;
    kv->pairs = NULL;
    kv->count = 0;
}

/*
 * `key=value` lines as POSIX sh reads assignments: values unquoted in place ('...' literally,
 * "..." with \ before \ " $ ` and newline, \x outside quotes); `#` lines and blank lines
 * skipped; a later assignment of a key wins. Anything else (a command, an unterminated quote,
 * a NUL byte, more than DN_MAX_KEYS keys) makes the whole file bad: returns 0, kv empty.
 */
int dn_parse_kv(char *text, unsigned length, struct dn_kv *kv)
{
    unsigned p = 0, capacity = 0, i;
    kv->text = text;
    kv->pairs = NULL;
    kv->count = 0;
    if (memchr(text, '\0', length) != NULL)
        goto bad;
    text[length] = '\0';
    for (i = 0; i < length; i++)
        capacity += text[i] == '=';
    if (capacity > DN_MAX_KEYS)
        capacity = DN_MAX_KEYS;
    if (capacity == 0)
        return 1;
    kv->pairs = malloc(capacity * sizeof(struct dn_pair));
    if (kv->pairs == NULL)
        goto bad;
    while (p < length) {
        unsigned key, w, value;
        char c = text[p];
        if (blank(c) || c == '\n') {
            p++;
            continue;
        }
        if (c == '#') {
            while (p < length && text[p] != '\n')
                p++;
            continue;
        }
        key = p;
        while (p < length && key_char(text[p]))
            p++;
        if (p == key || p - key > 64 || p >= length || text[p] != '=')
            goto bad;
        text[p++] = '\0';
        value = w = p;
        while (p < length && !blank(text[p]) && text[p] != '\n') {
            c = text[p];
            if (c == '\'') {
                for (p++; p < length && text[p] != '\''; p++)
                    text[w++] = text[p];
                if (p >= length)
                    goto bad;
                p++;
            } else if (c == '"') {
                for (p++; p < length && text[p] != '"'; p++) {
                    if (text[p] == '\\' && p + 1 < length && strchr("\\\"$`\n", text[p + 1]) != NULL) {
                        p++;
                        if (text[p] == '\n')
                            continue; /* a line continuation */
                    }
                    text[w++] = text[p];
                }
                if (p >= length)
                    goto bad;
                p++;
            } else if (c == '\\') {
                if (++p >= length)
                    goto bad;
                if (text[p] != '\n')
                    text[w++] = text[p];
                p++;
            } else if (c == ';' || c == '&' || c == '|' || c == '<' || c == '>' || c == '(' || c == ')' ||
                       c == '`' || c == '$') {
                goto bad; /* sh would do something else than assign */
            } else {
                text[w++] = text[p++];
            }
        }
        while (p < length && blank(text[p]))
            p++;
        if (p < length && text[p] == '#') {
            while (p < length && text[p] != '\n')
                p++;
        }
        if (p < length && text[p] != '\n')
            goto bad; /* `a=b c`: a command, not an assignment */
        text[w] = '\0'; /* w <= p: only consumed bytes (or the newline at p) are overwritten */
        if (p < length)
            p++; /* the newline */
        if (kv->count >= capacity)
            goto bad;
        kv->pairs[kv->count].key = text + key;
        kv->pairs[kv->count].value = text + value;
        kv->count++;
    }
    return 1;
bad:
    free(kv->pairs);
    kv->pairs = NULL;
    kv->count = 0;
    return 0;
}

const char *dn_kv_get(const struct dn_kv *kv, const char *key)
{
    unsigned i = kv->count;
    while (i-- > 0) {
        if (strcmp(kv->pairs[i].key, key) == 0)
            return kv->pairs[i].value;
    }
    return NULL;
}

/* The whole file (at most DN_FILE_MAX bytes), NUL-terminated, in a malloc'd buffer; no stat. */
static char *read_file(const char *path, unsigned *length)
{
    unsigned size = 0;
    char *buf;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return NULL;
    buf = malloc(DN_FILE_MAX + 2);
    if (buf == NULL) {
        close(fd);
        return NULL;
    }
    for (;;) {
        ssize_t n = read(fd, buf + size, DN_FILE_MAX + 1 - size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 || size + (unsigned)n > DN_FILE_MAX) {
            free(buf);
            close(fd);
            return NULL; /* unreadable (a directory, a FIFO without writer) or too large */
        }
        if (n == 0)
            break;
        size += (unsigned)n;
    }
    close(fd);
    buf[size] = '\0';
    *length = size;
    return buf;
}

static int read_kv(const char *path, struct dn_kv *kv)
{
    unsigned length = 0;
    char *text = read_file(path, &length);
    kv->text = NULL;
    kv->pairs = NULL;
    kv->count = 0;
    if (text == NULL)
        return 0;
    if (!dn_parse_kv(text, length, kv)) {
        dn_kv_free(kv);
        return 0;
    }
    return 1;
}

static int join(char *out, const char *a, const char *b, const char *c)
{
    size_t la = strlen(a), lb = strlen(b), lc = strlen(c);
    if (la + lb + lc + 1 > DN_PATH_MAX)
        return 0;
    memcpy(out, a, la);
    memcpy(out + la, b, lb);
    memcpy(out + la + lb, c, lc + 1);
    return 1;
}

/* UUIDs name live files: letters, digits and dashes only, so no path can be made of one. */
static int safe_uuid(const char *uuid)
{
    size_t n = 0;
    if (uuid == NULL || *uuid == '\0')
        return 0;
    for (; uuid[n]; n++) {
        char c = uuid[n];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-'))
            return 0;
    }
    return n < NVML_DEVICE_UUID_V2_BUFFER_SIZE;
}

/* ---- GPU-instance profiles ------------------------------------------------------------------ */

/* the next space-separated word of *s into word (bounded); 0 at the end */
static int next_word(const char **s, char *word, size_t size)
{
    size_t n = 0;
    const char *p = *s;
    while (*p == ' ')
        p++;
    if (*p == '\0')
        return 0;
    while (*p && *p != ' ') {
        if (n + 1 >= size)
            return -1;
        word[n++] = *p++;
    }
    word[n] = '\0';
    *s = p;
    return 1;
}

/* splits word at `sep` into at most max parts (in place) */
static unsigned split(char *word, char sep, char **parts, unsigned max)
{
    unsigned n = 0;
    parts[n++] = word;
    for (; *word; word++) {
        if (*word == sep) {
            if (n == max)
                return max + 1;
            *word = '\0';
            parts[n++] = word + 1;
        }
    }
    return n;
}

static int parse_profile(char *word, struct dn_profile *p)
{
    char *f[12];
    unsigned long long v[11];
    unsigned i;
    if (split(word, ':', f, 12) != 12)
        return 0;
    for (i = 0; i < 11; i++) {
        if (!dn_parse_u64(f[i], &v[i]) || (i < 10 && v[i] > 0xffffffffULL))
            return 0;
    }
    if (strlen(f[11]) == 0 || strlen(f[11]) >= sizeof(p->name))
        return 0;
    p->index = (unsigned)v[0];
    p->id = (unsigned)v[1];
    p->slices = (unsigned)v[2];
    p->instances = (unsigned)v[3];
    p->sm = (unsigned)v[4];
    p->ce = (unsigned)v[5];
    p->dec = (unsigned)v[6];
    p->enc = (unsigned)v[7];
    p->jpg = (unsigned)v[8];
    p->ofa = (unsigned)v[9];
    p->memory_mib = v[10];
    memcpy(p->name, f[11], strlen(f[11]) + 1);
    p->nplacements = 0;
    return p->index < NVML_GPU_INSTANCE_PROFILE_COUNT;
}

static int parse_placements(char *word, struct dn_profile *profiles, unsigned n)
{
    char *idpart[2], *each[DN_MAX_PLACEMENTS + 1];
    unsigned long long id;
    unsigned i, count;
    struct dn_profile *p = NULL;
    if (split(word, ':', idpart, 2) != 2 || !dn_parse_u64(idpart[0], &id))
        return 0;
    for (i = 0; i < n; i++) {
        if (profiles[i].id == id)
            p = &profiles[i];
    }
    if (p == NULL)
        return 0;
    count = split(idpart[1], ',', each, DN_MAX_PLACEMENTS);
    if (count > DN_MAX_PLACEMENTS)
        return 0;
    for (i = 0; i < count; i++) {
        char *ss[2];
        unsigned long long start, size;
        if (split(each[i], '+', ss, 2) != 2 || !dn_parse_u64(ss[0], &start) || !dn_parse_u64(ss[1], &size) ||
            start > 64 || size == 0 || size > 64)
            return 0;
        p->placements[i].start = (unsigned)start;
        p->placements[i].size = (unsigned)size;
    }
    p->nplacements = count;
    return 1;
}

/* gi_profiles and gi_placements of a GPU; a bad entry drops both keys (no profiles) */
static void load_profiles(struct nvmlDevice_st *gpu)
{
    const char *s = dn_static(gpu, "gi_profiles"), *pl = dn_static(gpu, "gi_placements");
    char word[256];
    int r;
    unsigned n = 0;
    gpu->profiles = NULL;
    gpu->nprofiles = 0;
    if (s == NULL)
        return;
    gpu->profiles = calloc(DN_MAX_PROFILES, sizeof(struct dn_profile));
    if (gpu->profiles == NULL)
        return;
    while ((r = next_word(&s, word, sizeof word)) == 1) {
        if (n == DN_MAX_PROFILES || !parse_profile(word, &gpu->profiles[n]))
            goto bad;
        n++;
    }
    if (r < 0)
        goto bad;
    while (pl != NULL && (r = next_word(&pl, word, sizeof word)) == 1) {
        if (!parse_placements(word, gpu->profiles, n))
            goto bad;
    }
    if (r < 0)
        goto bad;
    gpu->nprofiles = n;
    return;
bad:
    free(gpu->profiles);
    gpu->profiles = NULL;
    gpu->nprofiles = 0;
}

/* ---- loading --------------------------------------------------------------------------------- */

static void unload(void)
{
    unsigned g, m;
    for (g = 0; g < DN_MAX_GPUS; g++) {
        struct nvmlDevice_st *gpu = &g_gpus[g];
        for (m = 0; m < DN_MAX_MIGS; m++) {
            dn_kv_free(&g_migs[g][m].file);
            dn_kv_free(&g_migs[g][m].live);
            dn_kv_free(&g_migs[g][m].share_live);
            memset(&g_migs[g][m], 0, sizeof g_migs[g][m]);
            memset(&g_gis[g][m], 0, sizeof g_gis[g][m]);
            memset(&g_cis[g][m], 0, sizeof g_cis[g][m]);
        }
        if (!g_gpu_file_borrowed[g])
            dn_kv_free(&gpu->file);
        dn_kv_free(&gpu->live);
        dn_kv_free(&gpu->share_live);
        free(gpu->profiles);
        memset(gpu, 0, sizeof *gpu);
        g_gpu_file_borrowed[g] = 0;
    }
    g_ngpus = 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static struct nvmlDevice_st *gpu_of_bus(unsigned domain, unsigned bus, unsigned device, unsigned function)
{
    unsigned g;
    for (g = 0; g < g_ngpus; g++) {
        struct nvmlDevice_st *gpu = &g_gpus[g];
        if (gpu->domain == domain && gpu->bus == bus && gpu->device == device && gpu->function == function)
            return gpu;
    }
    return NULL;
}

/* A device file's share_id, when it is a share and the ID can name a file; else NULL. */
static const char *share_of(const struct dn_kv *kv)
{
    const char *id = dn_kv_get(kv, "share_id");
    return safe_uuid(id) ? id : NULL;
}

/* One device file: a GPU, or a MIG device of one. 0: the file is ignored (kv freed). */
static int add_file(struct dn_kv *kv)
{
    const char *kind = dn_kv_get(kv, "kind");
    const char *gpu_uuid = dn_kv_get(kv, "gpu_uuid");
    unsigned d, b, dv, f;
    struct nvmlDevice_st *gpu;
    unsigned g;
    int is_gpu = kind != NULL && strcmp(kind, "gpu") == 0;
    int is_mig = kind != NULL && strcmp(kind, "mig") == 0;
    if ((!is_gpu && !is_mig) || !safe_uuid(gpu_uuid) ||
        !dn_parse_bus_id(dn_kv_get(kv, "bus_id"), &d, &b, &dv, &f))
        return 0;
    if (is_mig && !safe_uuid(dn_kv_get(kv, "mig_uuid")))
        return 0;
    gpu = gpu_of_bus(d, b, dv, f);
    if (gpu == NULL) {
        if (g_ngpus == DN_MAX_GPUS)
            return 0;
        g = g_ngpus++;
        gpu = &g_gpus[g];
        gpu->in_use = 1;
        gpu->index = g;
        gpu->gpu = gpu;
        gpu->domain = d;
        gpu->bus = b;
        gpu->device = dv;
        gpu->function = f;
        g_gpu_file_borrowed[g] = 1; /* until a kind=gpu file of the bus comes */
    }
    g = gpu->index;
    if (is_gpu) {
        if (!g_gpu_file_borrowed[g])
            return 0; /* a second kind=gpu file of one bus */
        gpu->file = *kv;
        g_gpu_file_borrowed[g] = 0;
        gpu->uuid = gpu_uuid;
        gpu->share_id = share_of(kv);
        return 1;
    }
    if (gpu->nmig == DN_MAX_MIGS)
        return 0;
    {
        unsigned m = gpu->nmig++;
        struct nvmlDevice_st *mig = &g_migs[g][m];
        mig->in_use = 1;
        mig->is_mig = 1;
        mig->index = m;
        mig->gpu = gpu;
        mig->file = *kv;
        mig->uuid = dn_kv_get(kv, "mig_uuid");
        mig->share_id = share_of(kv);
        mig->domain = d;
        mig->bus = b;
        mig->device = dv;
        mig->function = f;
        mig->gi = &g_gis[g][m];
        mig->ci = &g_cis[g][m];
        mig->gi->in_use = mig->ci->in_use = 1;
        mig->gi->mig = mig->ci->mig = mig;
        gpu->migs[m] = mig;
        if (g_gpu_file_borrowed[g] && gpu->file.text == NULL) {
            gpu->file = mig->file; /* the GPU's static keys are in each of its files */
            gpu->uuid = gpu_uuid;
        }
    }
    return 1;
}

nvmlReturn_t dn_store_load(void)
{
    const char *root = getenv("DRA_FAKE_ROOT");
    char dir[DN_PATH_MAX], path[DN_PATH_MAX];
    char *names[DN_MAX_FILES];
    unsigned n = 0, i, g;
    DIR *d;
    struct dirent *e;
    unload();
    if (root == NULL)
        root = "";
    if (strlen(root) >= sizeof g_root || !join(dir, root, "/var/run/dra-fake/nvidia-smi/devices", ""))
        return NVML_ERROR_DRIVER_NOT_LOADED;
    memcpy(g_root, root, strlen(root) + 1);
    d = opendir(dir);
    if (d == NULL)
        return NVML_ERROR_DRIVER_NOT_LOADED; /* no device files: as a container without the driver */
    while ((e = readdir(d)) != NULL && n < DN_MAX_FILES) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || len > 255)
            continue;
        names[n] = malloc(len + 1);
        if (names[n] == NULL)
            break;
        memcpy(names[n], e->d_name, len + 1);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof names[0], by_name); /* bus ID order: NVML's index order */
    for (i = 0; i < n; i++) {
        struct dn_kv kv;
        if (join(path, dir, "/", names[i]) && read_kv(path, &kv) && !add_file(&kv))
            dn_kv_free(&kv);
        free(names[i]);
    }
    for (g = 0; g < g_ngpus; g++)
        load_profiles(&g_gpus[g]);
    return NVML_SUCCESS;
}

unsigned dn_gpu_count(void)
{
    return g_ngpus;
}

struct nvmlDevice_st *dn_gpu(unsigned index)
{
    return index < g_ngpus ? &g_gpus[index] : NULL;
}

/* ---- handle checks: only pointers into the store's own tables are dereferenced ------------- */

#define IN_TABLE(p, table) \
    ((const char *)(p) >= (const char *)(table) && \
     (const char *)(p) < (const char *)(table) + sizeof(table) && \
     ((size_t)((const char *)(p) - (const char *)(table)) % sizeof(*(p))) == 0)

int dn_valid_device(nvmlDevice_t device)
{
    if (device == NULL)
        return 0;
    if (!IN_TABLE(device, g_gpus) && !IN_TABLE(device, g_migs))
        return 0;
    return device->in_use;
}

int dn_valid_gi(nvmlGpuInstance_t gi)
{
    return gi != NULL && IN_TABLE(gi, g_gis) && gi->in_use;
}

int dn_valid_ci(nvmlComputeInstance_t ci)
{
    return ci != NULL && IN_TABLE(ci, g_cis) && ci->in_use;
}

/* ---- static and live keys -------------------------------------------------------------------- */

const char *dn_static(const struct nvmlDevice_st *dev, const char *key)
{
    return dn_kv_get(&dev->file, key);
}

int dn_static_u64(const struct nvmlDevice_st *dev, const char *key, unsigned long long *out)
{
    return dn_parse_u64(dn_static(dev, key), out);
}

int dn_static_uint(const struct nvmlDevice_st *dev, const char *key, unsigned *out)
{
    unsigned long long v;
    if (!dn_static_u64(dev, key, &v) || v > 0xffffffffULL)
        return 0;
    *out = (unsigned)v;
    return 1;
}

#define LIVE_DIR "/var/run/dra-fake/nvidia-smi/live/"
#define LIVE_FILE "/state" /* each device's own directory, mounted alone (docs/nvml.md) */

/* a live file (<dir><name>/state) re-read when older than DN_LIVE_TTL_NS; caller holds the lock */
static void refresh(struct dn_kv *kv, long long *read_ns, const char *dir, const char *name)
{
    char path[DN_PATH_MAX], file[DN_PATH_MAX];
    long long now = dn_now_ns();
    if (*read_ns != 0 && now - *read_ns < DN_LIVE_TTL_NS)
        return;
    dn_kv_free(kv);
    *read_ns = now != 0 ? now : 1;
    if (join(path, g_root, dir, name) && join(file, path, LIVE_FILE, ""))
        read_kv(file, kv); /* absent or bad: no live values */
}

static void refresh_live(struct nvmlDevice_st *dev)
{
    refresh(&dev->live, &dev->live_read_ns, LIVE_DIR, dev->uuid);
}

int dn_live_str(struct nvmlDevice_st *dev, const char *key, char *out, unsigned size)
{
    const char *v;
    int found = 0;
    dn_lock();
    refresh_live(dev);
    v = dn_kv_get(&dev->live, key);
    if (v != NULL && strlen(v) < size) {
        memcpy(out, v, strlen(v) + 1);
        found = 1;
    }
    dn_unlock();
    return found;
}

int dn_live_u64(struct nvmlDevice_st *dev, const char *key, unsigned long long *out)
{
    char v[DN_VALUE_MAX];
    return dn_live_str(dev, key, v, sizeof v) && dn_parse_u64(v, out);
}

int dn_reading_u64(struct nvmlDevice_st *dev, const char *key, unsigned long long *out)
{
    char v[DN_VALUE_MAX];
    if (dn_live_str(dev, key, v, sizeof v))
        return dn_parse_u64(v, out);
    return dn_static_u64(dev, key, out);
}

int dn_reading_milli(struct nvmlDevice_st *dev, const char *key, unsigned long long *out)
{
    char v[DN_VALUE_MAX];
    if (dn_live_str(dev, key, v, sizeof v))
        return dn_parse_milli(v, out);
    return dn_parse_milli(dn_static(dev, key), out);
}

int dn_lost(struct nvmlDevice_st *dev)
{
    unsigned long long v;
    return dn_live_u64(dev->gpu, "fault_lost", &v) && v == 1;
}

/* ---- shares ------------------------------------------------------------------------------------ */

int dn_share_view(const struct nvmlDevice_st *dev, unsigned long long *memory_mib)
{
    unsigned long long mib;
    if (dev->share_id == NULL || !dn_static_u64(dev, "share_memory_mib", &mib) || mib == 0 || mib > (1ULL << 40))
        return 0;
    *memory_mib = mib;
    return 1;
}

int dn_share_live_u64(struct nvmlDevice_st *dev, const char *key, unsigned long long *out)
{
    const char *v;
    int found = 0;
    if (dev->share_id == NULL)
        return 0;
    dn_lock();
    refresh(&dev->share_live, &dev->share_live_read_ns, LIVE_DIR "share-", dev->share_id);
    v = dn_kv_get(&dev->share_live, key);
    found = v != NULL && dn_parse_u64(v, out);
    dn_unlock();
    return found;
}
