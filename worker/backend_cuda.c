/* backend_cuda.c - the real GPU backend: CUDA driver API + NVRTC. Compiles each config's
 * GEMM image on a pool of CPU threads ahead of the GPU, verifies every config against a
 * plain fp32 reference layer, and times one whole MoE layer (align, GEMM1 + SiLU-and-mul,
 * GEMM2 x routing weight, top-k sum) through CUDA graph replays with an L2 flush before
 * each. See backend.h for the contract, backend_cuda.h for the compile side. */
#include <cuda.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "mt.h"

/* The driver library is opened with dlopen(), not linked: the worker binary (and every
 * test linked with mt_worker) must start on hosts with no NVIDIA driver, where the cuda
 * backend's open() then fails with a clear reason. Names go through cuda.h's macros, so
 * the versioned symbols (cuMemAlloc_v2, ...) are the ones looked up. */
#define WCU_DRV_FUNCS(X)                                                                                               \
    X(cuCtxSetCurrent)                                                                                                 \
    X(cuCtxSynchronize)                                                                                                \
    X(cuDeviceGet)                                                                                                     \
    X(cuDeviceGetAttribute)                                                                                            \
    X(cuDeviceGetCount)                                                                                                \
    X(cuDeviceGetName)                                                                                                 \
    X(cuDeviceGetUuid)                                                                                                 \
    X(cuDevicePrimaryCtxRelease)                                                                                       \
    X(cuDevicePrimaryCtxRetain)                                                                                        \
    X(cuDeviceTotalMem)                                                                                                \
    X(cuDriverGetVersion)                                                                                              \
    X(cuEventCreate)                                                                                                   \
    X(cuEventDestroy)                                                                                                  \
    X(cuEventElapsedTime)                                                                                              \
    X(cuEventRecord)                                                                                                   \
    X(cuFuncGetAttribute)                                                                                              \
    X(cuFuncSetAttribute)                                                                                              \
    X(cuGetErrorName)                                                                                                  \
    X(cuGetErrorString)                                                                                                \
    X(cuGraphDestroy)                                                                                                  \
    X(cuGraphExecDestroy)                                                                                              \
    X(cuGraphInstantiate)                                                                                              \
    X(cuGraphLaunch)                                                                                                   \
    X(cuInit)                                                                                                          \
    X(cuLaunchKernel)                                                                                                  \
    X(cuMemAlloc)                                                                                                      \
    X(cuMemFree)                                                                                                       \
    X(cuMemFreeHost)                                                                                                   \
    X(cuMemGetInfo)                                                                                                    \
    X(cuMemHostAlloc)                                                                                                  \
    X(cuMemHostGetDevicePointer)                                                                                       \
    X(cuMemcpyDtoDAsync)                                                                                               \
    X(cuMemcpyDtoH)                                                                                                    \
    X(cuMemcpyDtoHAsync)                                                                                               \
    X(cuMemcpyHtoD)                                                                                                    \
    X(cuMemsetD32Async)                                                                                                \
    X(cuModuleGetFunction)                                                                                             \
    X(cuModuleLoadData)                                                                                                \
    X(cuModuleUnload)                                                                                                  \
    X(cuStreamBeginCapture)                                                                                            \
    X(cuStreamCreate)                                                                                                  \
    X(cuStreamDestroy)                                                                                                 \
    X(cuStreamEndCapture)                                                                                              \
    X(cuStreamQuery)                                                                                                   \
    X(cuStreamSynchronize)

#define WCU_STR2(x) #x
#define WCU_STR(x) WCU_STR2(x)
typedef struct {
#define WCU_MEMBER(f) __typeof__(&f) f;
    WCU_DRV_FUNCS(WCU_MEMBER)
#undef WCU_MEMBER
} wcu_drv_t;
static wcu_drv_t g_drv;
static pthread_once_t g_drv_once = PTHREAD_ONCE_INIT;
static char g_drv_err[200];

static void drv_load(void) {
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        mt_fmt(g_drv_err, sizeof g_drv_err,
               "no CUDA device: the driver library cannot be loaded (dlopen libcuda.so.1: %s)", e ? e : "not found");
        return;
    }
#define WCU_LOOKUP(f)                                                                                                  \
    if (!*g_drv_err && !(*(void **)&g_drv.f = dlsym(h, WCU_STR(f))))                                                   \
        mt_fmt(g_drv_err, sizeof g_drv_err, "no CUDA device: libcuda.so.1 lacks %s (driver too old)", WCU_STR(f));
    WCU_DRV_FUNCS(WCU_LOOKUP)
#undef WCU_LOOKUP
}

#define LAYERS_PER_GRAPH 10
/* The hold before a timed check layer: moe_spin keeps the stream until the host has queued the
 * layer's launches (a dozen, a few tens of us) and says so through a word of mapped host memory,
 * or for CHECK_HOLD_NS at most; a check whose launches took the host longer (its thread preempted
 * for a millisecond) is not judged. Why not a fixed hold: with the next job compiling on every
 * other core, launches outlast any short fixed hold, and an unjudged far loser costs a capture
 * and a replay instead of one layer (docs/performance.md). */
#define CHECK_HOLD_NS 1000000ULL
#define MAX_WEIGHT_SETS 10
#define MAX_BS_CACHE 64
#define ALIGN_THREADS 1024
#define DEFAULT_TIMEOUT_MS 20000u
/* The reference's check (kernels/moe_common.cu): REF_DIFF_THREADS a block, on REF_DIFF_BLOCKS
 * blocks. Its tiles: WCU_REF_ROWS slots of one expert each (backend_cuda.h). */
#define REF_DIFF_THREADS 256
#define REF_DIFF_BLOCKS 264

typedef struct {
    krn_config_t key;
    int state; /* 0 queued, 1 compiling, 2 compiled (img.ok says how) */
    wcu_image_t img;
    CUmodule mod;
    CUfunction g1, g2;
    int loaded; /* 1 loaded, -1 load failed (load_err) */
    uint32_t regs;
    char load_err[160];
} img_entry_t;

typedef struct {
    uint32_t m;
    CUdeviceptr x, topk_ids, route_w;
    CUdeviceptr ref; /* the reference layer's output, fp32 m x K, on the device */
} bs_data_t;

/* Where the child's wall time goes, phase by phase (MOETUNE_CUDA_PROFILE=1 prints it to stderr
 * every WCU_PROF_EVERY_MS and at close): the GPU-busy fraction's other side. A phase runs from
 * the previous mark to prof_mark(). */
enum {
    PH_BETWEEN, /* from one measure() call's return to the next: the parent, the coordinator, idle */
    PH_COMPILE, /* waiting for the compile pool */
    PH_SETUP,   /* module load, per-shape and per-batch-size inputs (the host reference) */
    PH_CHECK,   /* the check's layer: hold, poison, one layer, copy, wait; its judging */
    PH_CAPTURE, /* capturing and instantiating the timing graph */
    PH_WARM,    /* untimed warm-up replays */
    PH_SAMPLE,  /* timed replays with their flushes and waits */
    PH_VERIFY,  /* reading the check's output back and comparing it with the reference */
    PH_N
};
static const char *const ph_name[PH_N] = {"between calls", "compile wait", "setup",   "check layer",
                                          "capture",       "warm-up",      "samples", "verify"};
#define WCU_PROF_EVERY_MS 30000u
typedef struct {
    int on;
    uint64_t t, t0, printed_ms;
    double us[PH_N], timed_us; /* timed_us: the GPU time of the timed kernels, as wrk_meas_t's */
    uint64_t rows;
    uint64_t unjudged; /* checks not judged: their launches outlasted the hold's limit */
} wcu_prof_t;

typedef struct {
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUevent ev0, ev1;
    int ctx_lost;
    wrk_device_t info;
    krn_limits_t limits;
    uint32_t l2_bytes;
    char cache_dir[4096];
    CUmodule common;
    CUfunction f_align, f_sum, f_fill, f_poison, f_spin, f_ref1, f_ref2, f_ref_sum, f_diff;
    volatile unsigned *go; /* the hold's word (mapped host memory): moe_spin ends when it reads go_seq */
    CUdeviceptr go_dev;
    unsigned go_seq;

    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t *threads;
    unsigned n_threads;
    int stopping;
    img_entry_t *imgs;
    size_t n_imgs, cap_imgs;

    krn_shape_t shape;
    int have_shape;
    uint64_t shape_seed;
    CUdeviceptr w1, w2;
    int nsets;
    size_t w1_elems, w2_elems;
    CUdeviceptr sorted, expert_ids, npp, inter, slots, out, check, flush;
    CUdeviceptr diff; /* the check's per-block sums, 2 x REF_DIFF_BLOCKS doubles */
    double diff_host[2 * REF_DIFF_BLOCKS];
    size_t flush_bytes;
    uint32_t cap_m;
    bs_data_t bs[MAX_BS_CACHE];
    size_t n_bs;
    wcu_prof_t prof;
} cuda_state_t;

/* "cuX: CUDA_ERROR_Y (text)" into buf. */
static void cu_text(CUresult r, const char *what, char *buf, size_t len) {
    const char *name = NULL, *str = NULL;
    if (g_drv.cuGetErrorName(r, &name) != CUDA_SUCCESS) name = "CUDA_ERROR_UNKNOWN";
    if (g_drv.cuGetErrorString(r, &str) != CUDA_SUCCESS) str = "unknown error";
    mt_fmt(buf, len, "%s: %s (%s)", what, name, str);
}

/* ---- profile ---- */

/* Ends phase ph here. Nothing when the profile is off: no clock read on the measuring path. */
static void prof_mark(wcu_prof_t *p, int ph) {
    if (!p->on) return;
    uint64_t now = mt_now_us();
    p->us[ph] += (double)(now - p->t);
    p->t = now;
}

static void prof_print(wcu_prof_t *p, const char *when) {
    if (!p->on) return;
    double wall = (double)(mt_now_us() - p->t0);
    char line[512];
    mt_fmt(line, sizeof line, "cuda profile (%s): wall %.1f s, %llu rows, timed kernels %.1f s (%.1f %%);", when,
           wall / 1e6, (unsigned long long)p->rows, p->timed_us / 1e6, wall > 0 ? 100.0 * p->timed_us / wall : 0.0);
    for (int i = 0; i < PH_N; i++) {
        size_t n = strlen(line);
        mt_fmt(line + n, sizeof line - n, " %s %.1f s,", ph_name[i], p->us[i] / 1e6);
    }
    size_t n = strlen(line);
    mt_fmt(line + n, sizeof line - n, " checks unjudged %llu", (unsigned long long)p->unjudged);
    fprintf(stderr, "%s\n", line);
    p->printed_ms = mt_now_ms();
}

/* Ends phase cur here and returns next, the phase that starts. */
static int prof_next(wcu_prof_t *p, int cur, int next) {
    prof_mark(p, cur);
    return next;
}

/* ---- compile pool ---- */

static img_entry_t *find_entry(cuda_state_t *st, const krn_config_t *key) {
    for (size_t i = 0; i < st->n_imgs; i++)
        if (memcmp(&st->imgs[i].key, key, sizeof *key) == 0) return &st->imgs[i];
    return NULL;
}

/* Adds a queued entry for key (st->mu held). Entries are indices, stable across growth. */
static long add_entry(cuda_state_t *st, const krn_config_t *key) {
    if (mt_grow((void **)&st->imgs, &st->cap_imgs, st->n_imgs + 1, sizeof *st->imgs, 64) != MT_OK) return -1;
    img_entry_t *e = &st->imgs[st->n_imgs];
    memset(e, 0, sizeof *e);
    e->key = *key;
    return (long)st->n_imgs++;
}

/* Compiles the queued entry idx (state 0) with st->mu released; called, and returns, with
 * st->mu held. The entry reads compiling (1) meanwhile and compiled (2) after; waiters wake. */
static void compile_entry(cuda_state_t *st, size_t idx) {
    st->imgs[idx].state = 1;
    krn_config_t key = st->imgs[idx].key;
    pthread_mutex_unlock(&st->mu);
    wcu_image_t img;
    wcu_compile_config(&key, st->info.cc_major, st->info.cc_minor, st->cache_dir, &img);
    pthread_mutex_lock(&st->mu);
    st->imgs[idx].img = img;
    st->imgs[idx].state = 2;
    pthread_cond_broadcast(&st->cv);
}

/* Compile threads run under SCHED_IDLE: they take only CPU time nothing else wants. There are
 * as many of them as cores but one, and with the next job compiling ahead they are busy while the
 * measuring thread launches: the GPU waits on its launches (a check's hold lasts until they are
 * queued) and on its host work between replays. The measuring thread mostly sleeps on the
 * stream, so the pool still gets nearly every cycle. Failing to lower the priority only costs
 * that, so it is not an error. */
static void *pool_main(void *arg) {
    cuda_state_t *st = arg;
    struct sched_param idle = {0};
    (void)pthread_setschedparam(pthread_self(), SCHED_IDLE, &idle);
    pthread_mutex_lock(&st->mu);
    while (!st->stopping) {
        long pick = -1;
        for (size_t i = 0; i < st->n_imgs; i++)
            if (st->imgs[i].state == 0) {
                pick = (long)i;
                break;
            }
        if (pick < 0) {
            pthread_cond_wait(&st->cv, &st->mu);
            continue;
        }
        compile_entry(st, (size_t)pick);
    }
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* Returns the compiled entry for cfg, compiling here when no pool thread has it yet. */
static img_entry_t *get_image(cuda_state_t *st, const krn_config_t *cfg) {
    krn_config_t key = wcu_image_key(cfg);
    pthread_mutex_lock(&st->mu);
    img_entry_t *e = find_entry(st, &key);
    long idx = e ? (long)(e - st->imgs) : add_entry(st, &key);
    if (idx < 0) {
        pthread_mutex_unlock(&st->mu);
        return NULL;
    }
    if (st->imgs[idx].state == 0) compile_entry(st, (size_t)idx);
    while (st->imgs[idx].state != 2) pthread_cond_wait(&st->cv, &st->mu);
    e = &st->imgs[idx];
    pthread_mutex_unlock(&st->mu);
    return e;
}

/* ---- device setup ---- */

static void read_driver_version(char *buf, size_t len, int cu_version) {
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    char line[512];
    mt_fmt(buf, len, "%d.%d", cu_version / 1000, (cu_version % 1000) / 10);
    if (!f) return;
    if (fgets(line, sizeof line, f)) {
        /* "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  ...": the
         * first word that starts with a digit and holds a dot. */
        char *save = NULL;
        for (char *w = strtok_r(line, " \t\n", &save); w; w = strtok_r(NULL, " \t\n", &save))
            if (w[0] >= '0' && w[0] <= '9' && strchr(w, '.')) {
                mt_fmt(buf, len, "%s", w);
                break;
            }
    }
    fclose(f);
}

static int load_common(cuda_state_t *st, char *err, size_t errlen) {
    wcu_image_t img;
    CUresult r;
    if (wcu_compile_common(st->info.cc_major, st->info.cc_minor, st->cache_dir, &img) != MT_OK) {
        mt_fmt(err, errlen, "compiling the common kernels: %s", img.error);
        return MT_ERR;
    }
    r = g_drv.cuModuleLoadData(&st->common, img.cubin);
    wcu_image_clear(&img);
    if (r != CUDA_SUCCESS) {
        cu_text(r, "g_drv.cuModuleLoadData(common)", err, errlen);
        return MT_ERR;
    }
    static const struct {
        const char *name;
        size_t off;
    } fns[] = {{"moe_align", offsetof(cuda_state_t, f_align)},    {"moe_topk_sum", offsetof(cuda_state_t, f_sum)},
               {"moe_fill_bf16", offsetof(cuda_state_t, f_fill)}, {"moe_poison", offsetof(cuda_state_t, f_poison)},
               {"moe_spin", offsetof(cuda_state_t, f_spin)},      {"ref_gemm1", offsetof(cuda_state_t, f_ref1)},
               {"ref_gemm2", offsetof(cuda_state_t, f_ref2)},     {"ref_topk_sum", offsetof(cuda_state_t, f_ref_sum)},
               {"ref_diff", offsetof(cuda_state_t, f_diff)}};
    for (size_t i = 0; i < sizeof fns / sizeof fns[0]; i++) {
        r = g_drv.cuModuleGetFunction((CUfunction *)((char *)st + fns[i].off), st->common, fns[i].name);
        if (r != CUDA_SUCCESS) {
            cu_text(r, fns[i].name, err, errlen);
            return MT_ERR;
        }
    }
    g_drv.cuFuncSetAttribute(st->f_align, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                             (int)st->limits.smem_per_block);
    return MT_OK;
}

/* What a worker says about its device (st->info) and the limits its rules judge with, read
 * from the opened device; the compile cache folder from opts. */
static void read_device(cuda_state_t *st, const wrk_backend_opts_t *opts) {
    wrk_device_t *d = &st->info;
    int a, ver = 0, nmaj = 0, nmin = 0;
    g_drv.cuDeviceGetName(d->name, sizeof d->name, st->dev);
    CUuuid uu;
    if (g_drv.cuDeviceGetUuid(&uu, st->dev) == CUDA_SUCCESS) {
        const unsigned char *b = (const unsigned char *)uu.bytes;
        mt_fmt(d->uuid, sizeof d->uuid, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
               b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
    }
    static const struct {
        CUdevice_attribute attr;
        size_t off;
    } attrs[] = {{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, offsetof(wrk_device_t, cc_major)},
                 {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, offsetof(wrk_device_t, cc_minor)},
                 {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, offsetof(wrk_device_t, sm_count)},
                 {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, offsetof(wrk_device_t, clock_khz)},
                 {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, offsetof(wrk_device_t, mem_clock_khz)},
                 {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, offsetof(wrk_device_t, smem_per_block)},
                 {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, offsetof(wrk_device_t, regs_per_block)}};
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0]; i++) {
        a = 0;
        g_drv.cuDeviceGetAttribute(&a, attrs[i].attr, st->dev);
        *(uint32_t *)((char *)d + attrs[i].off) = (uint32_t)a;
    }
    a = 0;
    g_drv.cuDeviceGetAttribute(&a, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, st->dev);
    st->l2_bytes = a > 0 ? (uint32_t)a : 64u << 20;
    size_t mem = 0;
    g_drv.cuDeviceTotalMem(&mem, st->dev);
    d->memory_bytes = mem;
    g_drv.cuDriverGetVersion(&ver);
    mt_fmt(d->cuda_version, sizeof d->cuda_version, "%d.%d", ver / 1000, (ver % 1000) / 10);
    read_driver_version(d->driver_version, sizeof d->driver_version, ver);
    wcu_nvrtc_version(&nmaj, &nmin);
    mt_fmt(d->compiler, sizeof d->compiler, "cuda_%d_%d", nmaj, nmin);
    wcu_kernel_hash(d->kernel_hash, sizeof d->kernel_hash);
    krn_limits_default(&st->limits);
    st->limits.smem_per_block = d->smem_per_block;
    st->limits.cc_major = d->cc_major;
    st->limits.cc_minor = d->cc_minor;
    if (opts->cache_dir && *opts->cache_dir)
        mt_fmt(st->cache_dir, sizeof st->cache_dir, "%s", opts->cache_dir);
    else
        wcu_default_cache_dir(st->cache_dir, sizeof st->cache_dir);
}

static void cuda_close(void **state);

static mt_status_t cuda_open(const wrk_backend_opts_t *opts, void **state, wrk_device_t *dev, char *err,
                             size_t errlen) {
    int rc = MT_ERR, count = 0;
    char tmp[200];
    CUresult r;
    cuda_state_t *st = mt_calloc(1, sizeof *st);
    *state = NULL;
    if (!st) {
        mt_fmt(err, errlen, "out of memory");
        return MT_NOMEM;
    }
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    pthread_once(&g_drv_once, drv_load);
    if (*g_drv_err) {
        mt_fmt(err, errlen, "%s", g_drv_err);
        goto out;
    }
    if ((r = g_drv.cuInit(0)) != CUDA_SUCCESS) {
        cu_text(r, "cuInit", tmp, sizeof tmp);
        mt_fmt(err, errlen, "no CUDA device: %s", tmp);
        goto out;
    }
    if ((r = g_drv.cuDeviceGetCount(&count)) != CUDA_SUCCESS || count == 0) {
        if (r != CUDA_SUCCESS)
            cu_text(r, "cuDeviceGetCount", tmp, sizeof tmp);
        else
            mt_fmt(tmp, sizeof tmp, "cuDeviceGetCount: 0 devices");
        mt_fmt(err, errlen, "no CUDA device: %s", tmp);
        goto out;
    }
    if (opts->gpu_index < 0 || opts->gpu_index >= count) {
        mt_fmt(err, errlen, "no CUDA device %d: this host has %d", opts->gpu_index, count);
        goto out;
    }
    if ((r = g_drv.cuDeviceGet(&st->dev, opts->gpu_index)) != CUDA_SUCCESS ||
        (r = g_drv.cuDevicePrimaryCtxRetain(&st->ctx, st->dev)) != CUDA_SUCCESS ||
        (r = g_drv.cuCtxSetCurrent(st->ctx)) != CUDA_SUCCESS) {
        cu_text(r, "opening the device", err, errlen);
        st->ctx = NULL;
        goto out;
    }
    read_device(st, opts);
    wrk_device_t *d = &st->info;

    if ((r = g_drv.cuStreamCreate(&st->stream, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS ||
        (r = g_drv.cuEventCreate(&st->ev0, CU_EVENT_DEFAULT)) != CUDA_SUCCESS ||
        (r = g_drv.cuEventCreate(&st->ev1, CU_EVENT_DEFAULT)) != CUDA_SUCCESS) {
        cu_text(r, "creating the stream", err, errlen);
        goto out;
    }
    void *go = NULL;
    r = g_drv.cuMemHostAlloc(&go, sizeof *st->go, CU_MEMHOSTALLOC_DEVICEMAP);
    st->go = go;
    if (r != CUDA_SUCCESS || (r = g_drv.cuMemHostGetDevicePointer(&st->go_dev, go, 0)) != CUDA_SUCCESS) {
        cu_text(r, "mapping the check's hold word", err, errlen);
        goto out;
    }
    *st->go = 0;
    if ((r = g_drv.cuMemAlloc(&st->diff, sizeof st->diff_host)) != CUDA_SUCCESS) {
        cu_text(r, "allocating the check's sums", err, errlen);
        goto out;
    }
    if (load_common(st, err, errlen) != MT_OK) goto out;

    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    st->n_threads = opts->compile_threads ? opts->compile_threads : (cores > 1 ? (unsigned)cores - 1 : 1);
    st->threads = mt_calloc(st->n_threads, sizeof *st->threads);
    if (!st->threads) {
        mt_fmt(err, errlen, "out of memory");
        goto out;
    }
    for (unsigned i = 0; i < st->n_threads; i++) {
        if (pthread_create(&st->threads[i], NULL, pool_main, st) != 0) {
            st->n_threads = i;
            mt_fmt(err, errlen, "pthread_create failed for compile thread %u", i);
            goto out;
        }
    }
    const char *prof = getenv("MOETUNE_CUDA_PROFILE");
    st->prof.on = prof && *prof && strcmp(prof, "0") != 0;
    st->prof.t0 = st->prof.t = mt_now_us();
    st->prof.printed_ms = mt_now_ms();
    *dev = *d;
    *state = st;
    rc = MT_OK;
out:
    if (rc != MT_OK) {
        void *p = st;
        cuda_close(&p);
    }
    return rc;
}

static mt_status_t cuda_prepare(void *state, const krn_shape_t *shape, const krn_config_t *cfgs, size_t n) {
    cuda_state_t *st = state;
    char why[160];
    pthread_mutex_lock(&st->mu);
    for (size_t i = 0; i < n; i++) {
        if (krn_check(shape, &cfgs[i], &st->limits, why, sizeof why) != MT_OK) continue;
        krn_config_t key = wcu_image_key(&cfgs[i]);
        if (!find_entry(st, &key) && add_entry(st, &key) < 0) break;
    }
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    return MT_OK;
}

/* ---- per-shape inputs ---- */

static void free_bs(cuda_state_t *st) {
    for (size_t i = 0; i < st->n_bs; i++) {
        bs_data_t *b = &st->bs[i];
        if (b->x) g_drv.cuMemFree(b->x);
        if (b->topk_ids) g_drv.cuMemFree(b->topk_ids);
        if (b->route_w) g_drv.cuMemFree(b->route_w);
        if (b->ref) g_drv.cuMemFree(b->ref);
    }
    memset(st->bs, 0, sizeof st->bs);
    st->n_bs = 0;
}

static void free_dptr(CUdeviceptr *p) {
    if (*p) g_drv.cuMemFree(*p);
    *p = 0;
}

static void free_shape(cuda_state_t *st) {
    free_bs(st);
    CUdeviceptr *ps[] = {&st->w1,    &st->w2,    &st->sorted, &st->expert_ids, &st->npp,
                         &st->inter, &st->slots, &st->out,    &st->check,      &st->flush};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free_dptr(ps[i]);
    st->have_shape = 0;
    st->cap_m = 0;
}

static uint64_t shape_hash(const krn_shape_t *s, uint64_t seed) {
    uint32_t v[4] = {s->e, s->n, s->k, s->topk};
    uint64_t h = mt_fnv1a(MT_FNV_INIT, &seed, sizeof seed);
    h = mt_fnv1a(h, v, sizeof v);
    return mt_fnv1a(h, s->dtype, strlen(s->dtype));
}

static CUresult fill_bf16(cuda_state_t *st, CUdeviceptr p, size_t n, uint64_t seed, float scale) {
    unsigned long long nn = n, sd = seed;
    void *args[] = {&p, &nn, &sd, &scale};
    return g_drv.cuLaunchKernel(st->f_fill, 1024, 1, 1, 256, 1, 1, 0, st->stream, args, NULL);
}

static int ensure_shape(cuda_state_t *st, const krn_shape_t *s, uint64_t seed, char *err, size_t errlen) {
    CUresult r;
    if (st->have_shape && memcmp(&st->shape, s, sizeof *s) == 0 && st->shape_seed == seed) return MT_OK;
    free_shape(st);
    st->shape = *s;
    st->shape_seed = seed;
    st->w1_elems = (size_t)s->e * 2 * s->n * s->k;
    st->w2_elems = (size_t)s->e * s->k * s->n;
    size_t set_bytes = (st->w1_elems + st->w2_elems) * 2, free_b = 0, total_b = 0;
    g_drv.cuMemGetInfo(&free_b, &total_b);
    /* Each layer of a timed graph reads its own weight copy, as a model's layers do, so
     * one layer's weights left in L2 cannot speed up the next; up to 40% of free memory. */
    st->nsets = (int)((free_b * 2 / 5) / (set_bytes ? set_bytes : 1));
    if (st->nsets > MAX_WEIGHT_SETS) st->nsets = MAX_WEIGHT_SETS;
    if (st->nsets < 1) st->nsets = 1;
    if ((r = g_drv.cuMemAlloc(&st->w1, st->w1_elems * 2 * st->nsets)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&st->w2, st->w2_elems * 2 * st->nsets)) != CUDA_SUCCESS) {
        cu_text(r, "allocating the weights", err, errlen);
        free_shape(st);
        return MT_ERR;
    }
    uint64_t h = shape_hash(s, seed);
    for (int i = 0; i < st->nsets; i++) {
        if ((r = fill_bf16(st, st->w1 + (CUdeviceptr)st->w1_elems * 2 * i, st->w1_elems, h + 2 * i,
                           1.f / sqrtf((float)s->k))) != CUDA_SUCCESS ||
            (r = fill_bf16(st, st->w2 + (CUdeviceptr)st->w2_elems * 2 * i, st->w2_elems, h + 2 * i + 1,
                           1.f / sqrtf((float)s->n))) != CUDA_SUCCESS) {
            cu_text(r, "filling the weights", err, errlen);
            free_shape(st);
            return MT_ERR;
        }
    }
    st->flush_bytes = (size_t)st->l2_bytes * 2;
    if ((r = g_drv.cuMemAlloc(&st->flush, st->flush_bytes)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&st->npp, 16)) != CUDA_SUCCESS ||
        (r = g_drv.cuStreamSynchronize(st->stream)) != CUDA_SUCCESS) {
        cu_text(r, "preparing the shape", err, errlen);
        free_shape(st);
        return MT_ERR;
    }
    st->have_shape = 1;
    return MT_OK;
}

/* The worst-case padded row count of the align step for m tokens and block_m. */
static size_t max_padded(const krn_shape_t *s, uint32_t m, uint32_t block_m) {
    size_t numel = (size_t)m * s->topk;
    size_t nonempty = numel < s->e ? numel : s->e;
    return numel + nonempty * (block_m - 1);
}

static int ensure_scratch(cuda_state_t *st, uint32_t m, char *err, size_t errlen) {
    const krn_shape_t *s = &st->shape;
    CUresult r;
    if (m <= st->cap_m) return MT_OK;
    CUdeviceptr *ps[] = {&st->sorted, &st->expert_ids, &st->inter, &st->slots, &st->out, &st->check};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free_dptr(ps[i]);
    size_t numel = (size_t)m * s->topk, em = max_padded(s, m, 256);
    if ((r = g_drv.cuMemAlloc(&st->sorted, em * 4)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&st->expert_ids, (em / 16 + 1) * 4)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&st->inter, numel * s->n * 2)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&st->slots, numel * s->k * 2)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&st->out, (size_t)m * s->k * 2)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&st->check, (size_t)m * s->k * 2)) != CUDA_SUCCESS) {
        cu_text(r, "allocating the layer's buffers", err, errlen);
        for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) free_dptr(ps[i]);
        st->cap_m = 0;
        return MT_ERR;
    }
    st->cap_m = m;
    return MT_OK;
}

static uint64_t splitmix(uint64_t *x) { return mt_mix64(*x += MT_GOLDEN64); }

/* Routing for m tokens: top-k of a softmax of random logits, weights renormalised. */
static int make_routing(const krn_shape_t *s, uint32_t m, uint64_t seed, int *ids, float *w) {
    float *prob = mt_malloc(sizeof *prob * s->e);
    if (!prob) return MT_NOMEM;
    uint64_t x = seed;
    for (uint32_t t = 0; t < m; t++) {
        float mx = -1e30f, sum = 0.f;
        for (uint32_t e = 0; e < s->e; e++) {
            prob[e] = (float)((double)(splitmix(&x) >> 11) / 9007199254740992.0) * 4.f - 2.f;
            if (prob[e] > mx) mx = prob[e];
        }
        for (uint32_t e = 0; e < s->e; e++) sum += prob[e] = expf(prob[e] - mx);
        float picked = 0.f;
        for (uint32_t j = 0; j < s->topk; j++) {
            uint32_t best = 0;
            float bv = -1.f;
            for (uint32_t e = 0; e < s->e; e++)
                if (prob[e] > bv) {
                    bv = prob[e];
                    best = e;
                }
            ids[t * s->topk + j] = (int)best;
            w[t * s->topk + j] = bv / sum;
            picked += bv / sum;
            prob[best] = -2.f;
        }
        for (uint32_t j = 0; j < s->topk; j++) w[t * s->topk + j] /= picked;
    }
    free(prob);
    return MT_OK;
}

/* The reference groups the slots on the host, not with moe_align: the layer under test runs
 * moe_align, and a reference sharing it would share its faults. A pass over the slots per
 * expert: a few ms at most, once per batch size. */
size_t wcu_ref_tiles(const int *ids, size_t numel, uint32_t e_count, int *rows, int *tile_e) {
    size_t n = 0;
    for (uint32_t e = 0; e < e_count; e++) {
        size_t start = n;
        for (size_t s = 0; s < numel; s++)
            if (ids[s] == (int)e) rows[n++] = (int)s;
        while ((n - start) % WCU_REF_ROWS) rows[n++] = -1;
        for (size_t t = start / WCU_REF_ROWS; t < n / WCU_REF_ROWS; t++) tile_e[t] = (int)e;
    }
    return n / WCU_REF_ROWS;
}

/* The reference layer for b (inputs on the device, ids its routing) into b->ref: three tiled
 * fp32 steps (kernels/moe_common.cu), scratch freed after. */
static CUresult run_reference(cuda_state_t *st, bs_data_t *b, const int *ids, char *err, size_t errlen) {
    const krn_shape_t *s = &st->shape;
    size_t numel = (size_t)b->m * s->topk, cap = numel + (size_t)s->e * (WCU_REF_ROWS - 1);
    int *rows = mt_malloc(cap * sizeof *rows), *tile_e = mt_malloc((cap / WCU_REF_ROWS + 1) * sizeof *tile_e);
    CUdeviceptr d_rows = 0, d_tiles = 0, h = 0, y = 0;
    CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
    if (!rows || !tile_e) {
        mt_fmt(err, errlen, "out of memory for the reference's tiles");
        goto out;
    }
    size_t tiles = wcu_ref_tiles(ids, numel, s->e, rows, tile_e);
    int itopk = (int)s->topk, in = (int)s->n, ik = (int)s->k, im = (int)b->m;
    void *a1[] = {&b->x, &st->w1, &d_rows, &d_tiles, &h, &itopk, &in, &ik};
    void *a2[] = {&h, &st->w2, &d_rows, &d_tiles, &y, &in, &ik};
    void *a3[] = {&y, &b->route_w, &b->ref, &im, &itopk, &ik};
    if ((r = g_drv.cuMemAlloc(&d_rows, tiles * WCU_REF_ROWS * sizeof *rows)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&d_tiles, tiles * sizeof *tile_e)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&h, numel * s->n * 4)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&y, numel * s->k * 4)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemcpyHtoD(d_rows, rows, tiles * WCU_REF_ROWS * sizeof *rows)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemcpyHtoD(d_tiles, tile_e, tiles * sizeof *tile_e)) != CUDA_SUCCESS) {
        cu_text(r, "preparing the reference layer", err, errlen);
        goto out;
    }
    if ((r = g_drv.cuLaunchKernel(st->f_ref1, (s->n + WCU_REF_ROWS - 1) / WCU_REF_ROWS, (unsigned)tiles, 1, 16, 16, 1,
                                  0, st->stream, a1, NULL)) != CUDA_SUCCESS ||
        (r = g_drv.cuLaunchKernel(st->f_ref2, (s->k + WCU_REF_ROWS - 1) / WCU_REF_ROWS, (unsigned)tiles, 1, 16, 16, 1,
                                  0, st->stream, a2, NULL)) != CUDA_SUCCESS ||
        (r = g_drv.cuLaunchKernel(st->f_ref_sum, (s->k + 255) / 256, b->m, 1, 256, 1, 1, 0, st->stream, a3, NULL)) !=
            CUDA_SUCCESS ||
        (r = g_drv.cuStreamSynchronize(st->stream)) != CUDA_SUCCESS) {
        cu_text(r, "running the reference layer", err, errlen);
        goto out;
    }
out:
    if (d_rows) g_drv.cuMemFree(d_rows);
    if (d_tiles) g_drv.cuMemFree(d_tiles);
    if (h) g_drv.cuMemFree(h);
    if (y) g_drv.cuMemFree(y);
    free(rows);
    free(tile_e);
    return r;
}

/* Inputs and the reference output for batch size m, made once per shape. */
static int get_bs(cuda_state_t *st, uint32_t m, bs_data_t **out, char *err, size_t errlen) {
    const krn_shape_t *s = &st->shape;
    for (size_t i = 0; i < st->n_bs; i++)
        if (st->bs[i].m == m) {
            *out = &st->bs[i];
            return MT_OK;
        }
    if (st->n_bs == MAX_BS_CACHE) free_bs(st);
    int rc = MT_ERR;
    CUresult r = CUDA_SUCCESS;
    size_t numel = (size_t)m * s->topk;
    int *ids = mt_malloc(numel * sizeof *ids);
    float *w = mt_malloc(numel * sizeof *w);
    bs_data_t *b = &st->bs[st->n_bs];
    memset(b, 0, sizeof *b);
    b->m = m;
    uint64_t seed = shape_hash(s, st->shape_seed) ^ (0x51ed270b27d1ULL * (m + 1));
    if (!ids || !w || make_routing(s, m, seed, ids, w) != MT_OK) {
        mt_fmt(err, errlen, "out of memory for the routing");
        goto out;
    }
    if ((r = g_drv.cuMemAlloc(&b->x, (size_t)m * s->k * 2)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&b->topk_ids, numel * 4)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&b->route_w, numel * 4)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemAlloc(&b->ref, (size_t)m * s->k * 4)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemcpyHtoD(b->topk_ids, ids, numel * 4)) != CUDA_SUCCESS ||
        (r = g_drv.cuMemcpyHtoD(b->route_w, w, numel * 4)) != CUDA_SUCCESS ||
        (r = fill_bf16(st, b->x, (size_t)m * s->k, seed + 7, 1.f)) != CUDA_SUCCESS) {
        cu_text(r, "preparing the batch inputs", err, errlen);
        goto out;
    }
    if ((r = run_reference(st, b, ids, err, errlen)) != CUDA_SUCCESS) goto out;
    st->n_bs++;
    *out = b;
    rc = MT_OK;
out:
    if (rc != MT_OK) {
        if (b->x) g_drv.cuMemFree(b->x);
        if (b->topk_ids) g_drv.cuMemFree(b->topk_ids);
        if (b->route_w) g_drv.cuMemFree(b->route_w);
        if (b->ref) g_drv.cuMemFree(b->ref);
        memset(b, 0, sizeof *b);
        if (r != CUDA_SUCCESS && g_drv.cuCtxSynchronize() != CUDA_SUCCESS) st->ctx_lost = 1;
    }
    free(ids);
    free(w);
    return rc;
}

/* ---- one layer ---- */

typedef struct {
    img_entry_t *img;
    krn_config_t cfg;
    uint32_t smem;
    int inject;
} run_cfg_t;

/* Enqueues one MoE layer for batch b using weight set `set` on the stream. */
static CUresult launch_layer(cuda_state_t *st, const run_cfg_t *rc, const bs_data_t *b, int set) {
    const krn_shape_t *s = &st->shape;
    CUresult r;
    int numel = (int)(b->m * s->topk), ne = (int)s->e, bm = (int)rc->cfg.block_m;
    int em = (int)max_padded(s, b->m, rc->cfg.block_m);
    int in = (int)s->n, ik = (int)s->k, itopk = (int)s->topk, gm = (int)rc->cfg.group_m, inj = rc->inject;
    int im = (int)b->m;
    CUdeviceptr w1 = st->w1 + (CUdeviceptr)st->w1_elems * 2 * set, w2 = st->w2 + (CUdeviceptr)st->w2_elems * 2 * set;
    unsigned threads = rc->cfg.num_warps * 32, pid_m = (unsigned)((em + bm - 1) / bm);
    void *aa[] = {(void *)&b->topk_ids, &numel, &ne, &bm, &st->sorted, &st->expert_ids, &st->npp};
    r = g_drv.cuLaunchKernel(st->f_align, 1, 1, 1, ALIGN_THREADS, 1, 1, (unsigned)(8 * (s->e + 1)), st->stream, aa,
                             NULL);
    if (r != CUDA_SUCCESS) return r;
    void *a1[] = {(void *)&b->x, &w1, &st->inter, &st->sorted, &st->expert_ids, &st->npp, &em, &numel, &itopk,
                  &in,           &ik, &gm,        &inj};
    r = g_drv.cuLaunchKernel(rc->img->g1, pid_m * (2 * s->n / rc->cfg.block_n), 1, 1, threads, 1, 1, rc->smem,
                             st->stream, a1, NULL);
    if (r != CUDA_SUCCESS) return r;
    void *a2[] = {
        &st->inter, &w2, &st->slots, (void *)&b->route_w, &st->sorted, &st->expert_ids, &st->npp, &em, &numel, &in,
        &ik,        &gm, &inj};
    r = g_drv.cuLaunchKernel(rc->img->g2, pid_m * (s->k / rc->cfg.block_n), 1, 1, threads, 1, 1, rc->smem, st->stream,
                             a2, NULL);
    if (r != CUDA_SUCCESS) return r;
    void *as[] = {&st->slots, &st->out, &im, &ik, &itopk};
    size_t vec = (size_t)b->m * s->k / 8;
    return g_drv.cuLaunchKernel(st->f_sum, (unsigned)((vec + 255) / 256), 1, 1, 256, 1, 1, 0, st->stream, as, NULL);
}

/* Waits for the stream with a deadline; CUDA_ERROR_LAUNCH_TIMEOUT when it passes. */
static CUresult wait_stream(cuda_state_t *st, uint32_t timeout_ms) {
    uint64_t deadline = mt_now_ms() + (timeout_ms ? timeout_ms : DEFAULT_TIMEOUT_MS);
    for (;;) {
        CUresult r = g_drv.cuStreamQuery(st->stream);
        if (r != CUDA_ERROR_NOT_READY) return r;
        if (mt_now_ms() > deadline) return CUDA_ERROR_LAUNCH_TIMEOUT;
        struct timespec ts = {0, 20000};
        nanosleep(&ts, NULL);
    }
}

/* Records a failed launch into out; decides whether the context survived. */
static void launch_failed(cuda_state_t *st, CUresult r, const char *what, wrk_meas_t *out) {
    char text[160];
    cu_text(r, what, text, sizeof text);
    if (r == CUDA_ERROR_LAUNCH_TIMEOUT) {
        out->status = WCU_ST_TIMEOUT;
        mt_fmt(out->detail, sizeof out->detail, "kernel still running after the timeout (%s)", what);
        st->ctx_lost = 1; /* a spinning kernel keeps the context busy for good */
        return;
    }
    out->status = WCU_ST_LAUNCH_ERROR;
    mt_fmt(out->detail, sizeof out->detail, "%s", text);
    if (g_drv.cuCtxSynchronize() != CUDA_SUCCESS) st->ctx_lost = 1;
}

/* The check's output (st->check, bf16) against b's reference on the GPU: sqrt(sum (o - ref)^2 /
 * sum ref^2), INFINITY when an element was not written (a NaN), into *err_out. */
static CUresult check_error(cuda_state_t *st, const bs_data_t *b, double *err_out) {
    unsigned long long n = (unsigned long long)b->m * st->shape.k;
    void *a[] = {&st->check, (void *)&b->ref, &n, &st->diff};
    CUresult r;
    if ((r = g_drv.cuLaunchKernel(st->f_diff, REF_DIFF_BLOCKS, 1, 1, REF_DIFF_THREADS, 1, 1, 0, st->stream, a, NULL)) !=
            CUDA_SUCCESS ||
        (r = g_drv.cuMemcpyDtoHAsync(st->diff_host, st->diff, sizeof st->diff_host, st->stream)) != CUDA_SUCCESS ||
        (r = g_drv.cuStreamSynchronize(st->stream)) != CUDA_SUCCESS)
        return r;
    double num = 0, den = 0;
    for (int i = 0; i < REF_DIFF_BLOCKS; i++) {
        num += st->diff_host[2 * i];
        den += st->diff_host[2 * i + 1];
    }
    if (!(num == num))
        *err_out = INFINITY;
    else
        *err_out = den > 0 ? sqrt(num / den) : sqrt(num);
    return CUDA_SUCCESS;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The check's layer of cfg at batch b: launched and waited for, raced on when m says so
 * (*judge_out, its time in *check_us). True when that decides out: a launch error, a hang,
 * or a config pruned by it. */
static bool run_check(cuda_state_t *st, const run_cfg_t *rc, const bs_data_t *b, const wrk_measure_t *m, size_t bi,
                      wrk_meas_t *out, bool *judge_out, double *check_us) {
    CUresult r;
    size_t nout = (size_t)b->m * st->shape.k;
    /* The check's layer: poisoned output, one layer on weight set 0, its output kept aside
     * (the graph's layers overwrite it) and compared with the reference only once the
     * config has stayed in the race: a pruned config is never a winner, and the compare
     * would cost GPU time its timing did not. Launch errors and hangs show here. */
    unsigned long long n_ll = nout, hold_ns = CHECK_HOLD_NS;
    unsigned want = ++st->go_seq;
    void *ap[] = {&st->out, &n_ll}, *sp[] = {&hold_ns, &st->go_dev, &want};
    /* Racing on it (wrk_check_lost): timed like a replay, after a flush, with the GPU held
     * until the layer's launches are queued. */
    bool judge = *judge_out = wrk_check_races(m, bi);
    if (judge && ((r = g_drv.cuMemsetD32Async(st->flush, 0, st->flush_bytes / 4, st->stream)) != CUDA_SUCCESS ||
                  (r = g_drv.cuLaunchKernel(st->f_spin, 1, 1, 1, 1, 1, 1, 0, st->stream, sp, NULL)) != CUDA_SUCCESS)) {
        launch_failed(st, r, "holding the stream", out);
        return true;
    }
    uint64_t t_launch = mt_now_us();
    if ((r = g_drv.cuLaunchKernel(st->f_poison, 512, 1, 1, 256, 1, 1, 0, st->stream, ap, NULL)) != CUDA_SUCCESS ||
        (judge && (r = g_drv.cuEventRecord(st->ev0, st->stream)) != CUDA_SUCCESS) ||
        (r = launch_layer(st, rc, b, 0)) != CUDA_SUCCESS ||
        (judge && (r = g_drv.cuEventRecord(st->ev1, st->stream)) != CUDA_SUCCESS) ||
        (r = g_drv.cuMemcpyDtoDAsync(st->check, st->out, nout * 2, st->stream)) != CUDA_SUCCESS) {
        launch_failed(st, r, "launching the layer", out);
        return true;
    }
    /* the launches are queued: the hold ends (a plain store; the GPU reads the word uncached) */
    if (judge) *st->go = want;
    /* launches that outlasted the hold's limit (the thread preempted): the GPU may have waited on them */
    if (judge && (mt_now_us() - t_launch) * 1000 >= CHECK_HOLD_NS) {
        judge = *judge_out = false;
        st->prof.unjudged++;
    }
    if ((r = wait_stream(st, m->timeout_ms)) != CUDA_SUCCESS) {
        launch_failed(st, r, "running the layer", out);
        return true;
    }
    if (judge) {
        float ms = 0;
        if ((r = g_drv.cuEventElapsedTime(&ms, st->ev0, st->ev1)) != CUDA_SUCCESS) {
            launch_failed(st, r, "timing the layer", out);
            return true;
        }
        *check_us = (double)ms * 1000.0;
        if (wrk_check_lost(m, bi, *check_us)) {
            out->status = WCU_ST_PRUNED;
            out->timed_us = *check_us;
            out->samples = 1;
            out->mean_us = out->min_us = out->median_us = *check_us;
            mt_fmt(out->detail, sizeof out->detail, "pruned: the check's layer %.2fx the best %.4g us; not verified",
                   *check_us / m->best_us[bi], m->best_us[bi]);
            return true;
        }
    }
    return false;
}

/* What the replays of a timing graph gave. */
typedef struct {
    uint32_t n; /* samples kept (those after a race that was stayed in) */
    double sum, sum2, fastest, timed_sum;
    bool pruned, settled;
} timing_t;

/* Replays exec to m's rules: warm-up, racing, then samples into samples[] until precise,
 * settled, out of budget or max_samples. False when a launch failed (out says so). */
static bool time_graph(cuda_state_t *st, CUgraphExec exec, const wrk_measure_t *m, size_t bi, double *samples, int *ph,
                       wrk_meas_t *out, timing_t *t) {
    CUresult r = CUDA_SUCCESS;
    /* m is filled (WIRE_MEASURE_DEFAULTS, by the worker's parent): no defaults of our own */
    uint32_t warm = m->warmup, min_s = m->min_samples;
    uint32_t max_s = m->max_samples ? m->max_samples : 1, budget = m->budget_ms;
    if (min_s > max_s) min_s = max_s;
    /* Racing: the first WRK_RACE_SAMPLES replays are timed and decide the race (the fastest of
     * them: the first replay of a graph may carry its upload; a first one far beyond the best
     * decides alone, wrk_race_lost). A config that loses is done
     * after those 2 replays instead of warmup + 2; one that stays counts them as warm-up
     * replays and is sampled afresh after as many replays as without racing (warmup >= 2), so
     * what is measured for a winner does not change. */
    bool racing = wrk_racing(m, bi);
    uint32_t head = racing ? 0 : warm;
    *ph = prof_next(&st->prof, *ph, PH_WARM);
    for (uint32_t i = 0; i < head; i++)
        if ((r = g_drv.cuGraphLaunch(exec, st->stream)) != CUDA_SUCCESS) break;
    if (r == CUDA_SUCCESS) r = wait_stream(st, m->timeout_ms);
    if (r != CUDA_SUCCESS) {
        launch_failed(st, r, "warming up", out);
        return false;
    }
    *ph = prof_next(&st->prof, *ph, PH_SAMPLE);
    uint64_t t_end = mt_now_ms() + budget;
    uint32_t n = 0;
    double sum = 0, sum2 = 0, fastest = 0, timed_sum = 0;
    while (n < max_s || (racing && n < WRK_RACE_SAMPLES)) {
        float ms = 0;
        if ((r = g_drv.cuMemsetD32Async(st->flush, n, st->flush_bytes / 4, st->stream)) != CUDA_SUCCESS ||
            (r = g_drv.cuEventRecord(st->ev0, st->stream)) != CUDA_SUCCESS ||
            (r = g_drv.cuGraphLaunch(exec, st->stream)) != CUDA_SUCCESS ||
            (r = g_drv.cuEventRecord(st->ev1, st->stream)) != CUDA_SUCCESS ||
            (r = wait_stream(st, m->timeout_ms)) != CUDA_SUCCESS ||
            (r = g_drv.cuEventElapsedTime(&ms, st->ev0, st->ev1)) != CUDA_SUCCESS) {
            launch_failed(st, r, "timing", out);
            return false;
        }
        double us = (double)ms * 1000.0 / LAYERS_PER_GRAPH;
        samples[n++] = us;
        sum += us;
        sum2 += us * us;
        timed_sum += us;
        if (n == 1 || us < fastest) fastest = us;
        if (racing && wrk_race_lost(m, bi, fastest, n)) {
            t->pruned = true;
            break;
        }
        if (racing && n == WRK_RACE_SAMPLES) {
            /* stayed in the race: those replays were warm-up; the rest of it, then afresh */
            racing = false;
            *ph = prof_next(&st->prof, *ph, PH_WARM);
            for (uint32_t i = head + WRK_RACE_SAMPLES; i < warm; i++)
                if ((r = g_drv.cuGraphLaunch(exec, st->stream)) != CUDA_SUCCESS) break;
            if (r == CUDA_SUCCESS) r = wait_stream(st, m->timeout_ms);
            if (r != CUDA_SUCCESS) {
                launch_failed(st, r, "warming up", out);
                return false;
            }
            *ph = prof_next(&st->prof, *ph, PH_SAMPLE);
            n = 0;
            sum = sum2 = fastest = 0;
            t_end = mt_now_ms() + budget;
            continue;
        }
        double mean = sum / n, var = sum2 / n - mean * mean;
        double sd = var > 0 ? sqrt(var * n / (n > 1 ? n - 1 : 1)) : 0;
        if (n >= min_s && wrk_precise(m, mean, sd, n)) break;
        if (wrk_settled(m, bi, mean, sd, n)) {
            t->settled = true;
            break;
        }
        if (n >= min_s && mt_now_ms() > t_end) break;
    }
    t->n = n;
    t->sum = sum;
    t->sum2 = sum2;
    t->fastest = fastest;
    t->timed_sum = timed_sum;
    return true;
}

/* Verifies and times cfg at batch b into out. */
static void measure_bs(cuda_state_t *st, const run_cfg_t *rc, const bs_data_t *b, const wrk_measure_t *m, size_t bi,
                       wrk_meas_t *out) {
    CUresult r;
    CUgraph graph = NULL;
    CUgraphExec exec = NULL;
    double *samples = NULL;
    int ph = PH_CHECK;
    bool judge = false;
    double check_us = 0;
    if (run_check(st, rc, b, m, bi, out, &judge, &check_us)) goto out;

    /* Time: a graph of LAYERS_PER_GRAPH layers, each on its own weight copy. */
    ph = prof_next(&st->prof, ph, PH_CAPTURE);
    if ((r = g_drv.cuStreamBeginCapture(st->stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)) != CUDA_SUCCESS) {
        launch_failed(st, r, "cuStreamBeginCapture", out);
        goto out;
    }
    CUresult lr = CUDA_SUCCESS;
    for (int l = 0; l < LAYERS_PER_GRAPH && lr == CUDA_SUCCESS; l++) lr = launch_layer(st, rc, b, l % st->nsets);
    r = g_drv.cuStreamEndCapture(st->stream, &graph);
    if (lr != CUDA_SUCCESS || r != CUDA_SUCCESS || (r = g_drv.cuGraphInstantiate(&exec, graph, 0)) != CUDA_SUCCESS) {
        launch_failed(st, lr != CUDA_SUCCESS ? lr : r, "capturing the timing graph", out);
        goto out;
    }
    uint32_t max_s = m->max_samples ? m->max_samples : 1;
    samples = mt_malloc(sizeof *samples * (max_s > WRK_RACE_SAMPLES ? max_s : WRK_RACE_SAMPLES));
    if (!samples) {
        out->status = WCU_ST_LAUNCH_ERROR;
        mt_fmt(out->detail, sizeof out->detail, "out of host memory for samples");
        goto out;
    }
    timing_t tm = {0};
    if (!time_graph(st, exec, m, bi, samples, &ph, out, &tm)) goto out;
    uint32_t n = tm.n;
    double sum = tm.sum, sum2 = tm.sum2, fastest = tm.fastest, timed_sum = tm.timed_sum;
    bool pruned = tm.pruned, settled = tm.settled;
    double mean = sum / n, var = sum2 / n - mean * mean;
    qsort(samples, n, sizeof *samples, cmp_double);
    out->status = pruned ? WCU_ST_PRUNED : WCU_ST_OK;
    out->timed_us = timed_sum * LAYERS_PER_GRAPH + check_us;
    out->samples = n;
    out->mean_us = mean;
    out->stddev_us = var > 0 ? sqrt(var * n / (n > 1 ? n - 1 : 1)) : 0;
    out->min_us = samples[0];
    out->median_us = n % 2 ? samples[n / 2] : 0.5 * (samples[n / 2 - 1] + samples[n / 2]);
    if (pruned) {
        mt_fmt(out->detail, sizeof out->detail, "pruned: fastest of %u samples %.2fx the best %.4g us; not verified", n,
               fastest / m->best_us[bi], m->best_us[bi]);
        goto out;
    }
    /* Stayed in the race (or no race): the check's output against the reference. */
    ph = prof_next(&st->prof, ph, PH_VERIFY);
    double err = 0;
    if ((r = check_error(st, b, &err)) != CUDA_SUCCESS) {
        launch_failed(st, r, "checking the output", out);
        goto out;
    }
    if (!(err < 1e-2)) {
        out->status = WCU_ST_WRONG_RESULT;
        mt_fmt(out->detail, sizeof out->detail, "relative error %.3g >= 1e-2 at M=%u", err, b->m);
        goto out;
    }
    char settle[96] = "", chk[40] = "";
    if (settled)
        mt_fmt(settle, sizeof settle, "; settled: mean %.3fx the best after %u samples", out->mean_us / m->best_us[bi],
               n);
    if (judge) mt_fmt(chk, sizeof chk, "; check %.4g us", check_us);
    mt_fmt(out->detail, sizeof out->detail, "rel_err=%.2e%s%s", err, settle, chk);
out:
    prof_mark(&st->prof, ph);
    if (exec) g_drv.cuGraphExecDestroy(exec);
    if (graph) g_drv.cuGraphDestroy(graph);
    free(samples);
    prof_mark(&st->prof, PH_CAPTURE);
    st->prof.rows++;
    st->prof.timed_us += out->timed_us;
}

static void set_all(wrk_meas_t *out, size_t n, int status, const char *detail) {
    for (size_t i = 0; i < n; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].status = status;
        mt_fmt(out[i].detail, sizeof out[i].detail, "%s", detail);
    }
}

static mt_status_t cuda_measure(void *state, const krn_shape_t *shape, const krn_config_t *cfg, const uint32_t *bs,
                                size_t n_bs, const wrk_measure_t *m, wrk_meas_t *out, uint32_t *regs, uint32_t *spills,
                                char *err, size_t errlen) {
    cuda_state_t *st = state;
    char why[160];
    CUresult r;
    *regs = *spills = 0;
    prof_mark(&st->prof, PH_BETWEEN);
    if (st->prof.on && mt_now_ms() - st->prof.printed_ms >= WCU_PROF_EVERY_MS) prof_print(&st->prof, "running");
    if (st->ctx_lost) {
        mt_fmt(err, errlen, "the CUDA context was lost by an earlier config");
        return MT_ERR;
    }
    if (krn_shape_check(shape, why, sizeof why) != MT_OK || strcmp(shape->dtype, "bf16") != 0) {
        set_all(out, n_bs, WCU_ST_INVALID, strcmp(shape->dtype, "bf16") ? "the cuda backend runs bf16 only" : why);
        return MT_OK;
    }
    if (krn_check(shape, cfg, &st->limits, why, sizeof why) != MT_OK) {
        set_all(out, n_bs, WCU_ST_INVALID, why);
        return MT_OK;
    }
    if (8u * (shape->e + 1) > st->limits.smem_per_block) {
        set_all(out, n_bs, WCU_ST_INVALID, "too many experts for the align kernel's shared memory");
        return MT_OK;
    }
    img_entry_t *img = get_image(st, cfg);
    prof_mark(&st->prof, PH_COMPILE);
    if (!img) {
        mt_fmt(err, errlen, "out of memory for the image table");
        return MT_ERR;
    }
    if (!img->img.ok) {
        set_all(out, n_bs, WCU_ST_COMPILE_ERROR, img->img.error);
        return MT_OK;
    }
    run_cfg_t rc = {.img = img, .cfg = *cfg, .smem = krn_smem_bytes(cfg, shape), .inject = wcu_inject_for(cfg)};
    if (!img->loaded) {
        int a1 = 0, a2 = 0;
        if ((r = g_drv.cuModuleLoadData(&img->mod, img->img.cubin)) != CUDA_SUCCESS ||
            (r = g_drv.cuModuleGetFunction(&img->g1, img->mod, "moe_gemm1")) != CUDA_SUCCESS ||
            (r = g_drv.cuModuleGetFunction(&img->g2, img->mod, "moe_gemm2")) != CUDA_SUCCESS ||
            (r = g_drv.cuFuncSetAttribute(img->g1, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)rc.smem)) !=
                CUDA_SUCCESS ||
            (r = g_drv.cuFuncSetAttribute(img->g2, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, (int)rc.smem)) !=
                CUDA_SUCCESS) {
            cu_text(r, "loading the image", img->load_err, sizeof img->load_err);
            img->loaded = -1;
        } else {
            g_drv.cuFuncGetAttribute(&a1, CU_FUNC_ATTRIBUTE_NUM_REGS, img->g1);
            g_drv.cuFuncGetAttribute(&a2, CU_FUNC_ATTRIBUTE_NUM_REGS, img->g2);
            img->regs = (uint32_t)(a1 > a2 ? a1 : a2);
            img->loaded = 1;
        }
    }
    *regs = img->regs ? img->regs : img->img.regs;
    *spills = img->img.spill_bytes;
    if (img->loaded < 0) {
        set_all(out, n_bs, WCU_ST_LAUNCH_ERROR, img->load_err);
        return MT_OK;
    }
    if (ensure_shape(st, shape, m->seed, err, errlen) != MT_OK) return MT_ERR;
    uint32_t max_m = 0;
    for (size_t i = 0; i < n_bs; i++) max_m = bs[i] > max_m ? bs[i] : max_m;
    if (ensure_scratch(st, max_m, err, errlen) != MT_OK) return MT_ERR;
    prof_mark(&st->prof, PH_SETUP);
    size_t lost_at = n_bs; /* the batch size at which this config lost the context */
    for (size_t i = 0; i < n_bs; i++) {
        bs_data_t *b = NULL;
        memset(&out[i], 0, sizeof out[i]);
        if (bs[i] == 0) {
            out[i].status = WCU_ST_INVALID;
            mt_fmt(out[i].detail, sizeof out[i].detail, "batch size 0");
            continue;
        }
        if (st->ctx_lost) {
            /* not reached: the config's own failure (a hang or a fault) stands for it */
            out[i].status = lost_at < n_bs ? out[lost_at].status : WCU_ST_LAUNCH_ERROR;
            if (lost_at < n_bs)
                mt_fmt(out[i].detail, sizeof out[i].detail, "not run: the context was lost at batch size %u",
                       bs[lost_at]);
            else
                mt_fmt(out[i].detail, sizeof out[i].detail, "not run: the context was lost before");
            continue;
        }
        if (get_bs(st, bs[i], &b, err, errlen) != MT_OK) return MT_ERR;
        prof_mark(&st->prof, PH_SETUP);
        measure_bs(st, &rc, b, m, i, &out[i]);
        if (st->ctx_lost) lost_at = i;
    }
    if (st->ctx_lost) {
        mt_fmt(err, errlen, "the CUDA context is lost: %s",
               lost_at < n_bs ? out[lost_at].detail : "before this config");
        return MT_ERR;
    }
    return MT_OK;
}

static void cuda_close(void **state) {
    if (!state || !*state) return;
    cuda_state_t *st = *state;
    prof_mark(&st->prof, PH_BETWEEN);
    prof_print(&st->prof, "at close");
    pthread_mutex_lock(&st->mu);
    st->stopping = 1;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
    for (unsigned i = 0; i < st->n_threads; i++) pthread_join(st->threads[i], NULL);
    free(st->threads);
    if (st->ctx && !st->ctx_lost) {
        free_shape(st);
        for (size_t i = 0; i < st->n_imgs; i++)
            if (st->imgs[i].loaded == 1) g_drv.cuModuleUnload(st->imgs[i].mod);
        if (st->common) g_drv.cuModuleUnload(st->common);
        if (st->ev0) g_drv.cuEventDestroy(st->ev0);
        if (st->ev1) g_drv.cuEventDestroy(st->ev1);
        if (st->stream) g_drv.cuStreamDestroy(st->stream);
        if (st->go) g_drv.cuMemFreeHost((void *)st->go);
        free_dptr(&st->diff);
    }
    /* A lost context (or a kernel still spinning) is not touched again: only host memory is
     * released below, the process is about to be replaced. */
    for (size_t i = 0; i < st->n_imgs; i++) wcu_image_clear(&st->imgs[i].img);
    free(st->imgs);
    if (st->ctx && !st->ctx_lost) g_drv.cuDevicePrimaryCtxRelease(st->dev);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
    *state = NULL;
}

const wrk_backend_ops_t wrk_backend_cuda = {
    .name = "cuda",
    .open = cuda_open,
    .prepare = cuda_prepare,
    .measure = cuda_measure,
    .close = cuda_close,
};
