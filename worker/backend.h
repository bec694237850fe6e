/*
 * backend.h - the interface every measuring backend implements (sim, cuda, triton).
 *
 * A backend runs only in the worker's child process: open() is called once after
 * fork, so CUDA is initialised only there. measure() compiles (or takes a compiled
 * image), verifies and times one config at every batch size of a job. A config that
 * fails (invalid on this device, compile error, wrong result, ...) is not an error
 * of the backend: its status goes into the measurements and measure() returns MT_OK.
 * measure() returns an error only when the backend itself can no longer work (the
 * CUDA context is lost); the parent then replaces the child.
 */
#ifndef WRK_BACKEND_H
#define WRK_BACKEND_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "space.h"
/* WRK_RACE_SAMPLES, WRK_RACE_FAR, WRK_CHECK_FAR, WRK_CHECK_FLOOR, WRK_SEM_FRACTION, WRK_SETTLE_MARGIN
 * and WRK_SETTLE_Z: the rules below, from worker/helper/measure.json, which the triton helper
 * applies too (cmake/facts.cmake). */
#include "wrk_measure_rules.h"

/* Options a backend is opened with; from the worker's command line. */
typedef struct {
    int gpu_index;            /* --gpu N */
    double sim_time_scale;    /* --sim-time-scale X: 0 instant, 1 sleep the simulated time */
    const char *sim_faults;   /* --sim-faults SPEC, or NULL */
    const char *sim_device;   /* --sim-device NAME: which simulated GPU, or NULL for the default */
    const char *cache_dir;    /* compiled-image cache directory, or NULL for the default */
    unsigned compile_threads; /* size of the compile pool; 0 = backend default */
    const char *python;       /* --python PATH: triton: the helper's interpreter; NULL = "python3" */
    const char *kernel;       /* --kernel sglang|vllm|moetune: triton: which kernel; NULL = "moetune" */
    uint32_t helper_mem_mb;   /* --helper-mem-mb N: triton: helper resident memory limit; 0 = 65536 */
} wrk_backend_opts_t;

/* The fields of wrk_device_t that Hello's Gpu carries under the same names (and the triton
 * helper's hello under the same keys): X(field, kind), kind TEXT (a char array), U32 or U64. */
#define WRK_DEVICE_GPU_FIELDS(X)                                                                                       \
    X(name, TEXT)                                                                                                      \
    X(uuid, TEXT)                                                                                                      \
    X(cc_major, U32)                                                                                                   \
    X(cc_minor, U32)                                                                                                   \
    X(sm_count, U32)                                                                                                   \
    X(memory_bytes, U64)                                                                                               \
    X(driver_version, TEXT)                                                                                            \
    X(cuda_version, TEXT)                                                                                              \
    X(clock_khz, U32)                                                                                                  \
    X(mem_clock_khz, U32)                                                                                              \
    X(smem_per_block, U32)                                                                                             \
    X(regs_per_block, U32)

/* What a backend reports about its device; goes into Hello. */
typedef struct {
    char name[128]; /* "NVIDIA H200" */
    char uuid[64];
    uint32_t cc_major, cc_minor, sm_count;
    uint64_t memory_bytes;
    char driver_version[32], cuda_version[32];
    uint32_t clock_khz, mem_clock_khz;
    uint32_t smem_per_block, regs_per_block;
    char compiler[32];    /* export directory: "cuda_13_0", "sim" */
    char kernel_hash[32]; /* hash of the kernel sources, hex */
    char versions[256];   /* "kernel=moetune triton=3.6.0 torch=2.11.0 python=3.12.3"; "" when none */
} wrk_device_t;

/* Measurement settings of a job (proto Measure), and what racing compares against. The worker's
 * parent fills the fields a Job leaves 0 (convert.h's WIRE_MEASURE_DEFAULTS, the planner's own):
 * a backend uses them as they are. */
typedef struct {
    uint32_t warmup, min_samples, max_samples;
    double rsd_target;
    uint32_t budget_ms, timeout_ms;
    uint64_t seed;
    double race_margin;     /* > 0: stop a config whose first samples exceed best_us by this fraction */
    const double *best_us;  /* per batch size of the call, the best median known (0 = none); or NULL */
    double settle_margin;   /* > 0 (WRK_SETTLE_MARGIN): settling on, see wrk_settled; the worker's
                             * parent sets it for every job but a side-by-side one */
    char routing_path[512]; /* the shape's captured routing file (shape->routing is its sha256); "" = none */
} wrk_measure_t;

/* Racing (proto STATUS_PRUNED): the first WRK_RACE_SAMPLES samples of a config are judged one by
 * one. After n of them, the config is out of the race when the fastest is slower than the best
 * known median at batch size i by more than the margin, or, while n < WRK_RACE_SAMPLES, by more
 * than WRK_RACE_FAR times the margin. The fastest of two, not one: a single sample can be an
 * outlier (a clock dip, a graph's upload), two rarely are; but a clock dip or an upload slows a
 * replay by a few percent, never by 40 % (twice the default margin), and at 4096 tokens on an
 * H200 three quarters of the configs racing pruned were that far off, each paying a second
 * replay of 10 layers for nothing. */
/* Whether batch size i races: racing on (a margin) and a best known there. */
static inline int wrk_racing(const wrk_measure_t *m, size_t i) {
    return m->race_margin > 0 && m->best_us && m->best_us[i] > 0;
}
static inline int wrk_race_lost(const wrk_measure_t *m, size_t i, double fastest_us, uint32_t n) {
    double margin = m->race_margin * (n < WRK_RACE_SAMPLES ? WRK_RACE_FAR : 1.0);
    return wrk_racing(m, i) && fastest_us > m->best_us[i] * (1.0 + margin);
}

/* Racing on the check's layer: the one layer every config runs first, for the reference check,
 * is timed too (after an L2 flush, and with the GPU held back until the layer's launches are all
 * queued, so host launch gaps do not count), and a config whose check layer is slower than the
 * best known median at batch size i by more than WRK_CHECK_FAR margins is out of the race there,
 * before its timing graph is captured: a far loser then costs one layer instead of a capture and
 * a replay of a graph of ten layers, which at large batch sizes was most of a sweep's GPU time.
 * Only from a config's second batch size of the call on (i > 0): its first launch may carry the
 * module's loading. The factor is wider than WRK_RACE_FAR's: one cold layer, not the fastest of
 * a graph's ten. And the threshold is never under 1 + WRK_CHECK_FLOOR (the default margin's
 * 2.5 x 0.2): a verified config's check layer reads up to about 1.26x its graph's median
 * (docs/performance.md), so a lower threshold could prune the config that would have won. */
static inline int wrk_check_races(const wrk_measure_t *m, size_t i) { return i > 0 && wrk_racing(m, i); }
static inline int wrk_check_lost(const wrk_measure_t *m, size_t i, double check_us) {
    double far = WRK_CHECK_FAR * m->race_margin;
    return wrk_check_races(m, i) && check_us > m->best_us[i] * (1.0 + (far > WRK_CHECK_FLOOR ? far : WRK_CHECK_FLOOR));
}

/* The stop rule of a config's samples (after min_samples): their relative standard deviation is
 * under rsd_target, or the standard error of their mean is under half of it. The second is what
 * the first gives a steady config at 4 or more samples; it ends a config whose samples never get
 * steady (an H200 at 4096 tokens under its power cap: 3-4 % RSD, where the first alone samples
 * until the time budget ends) once its mean is known as well. */
static inline int wrk_precise(const wrk_measure_t *m, double mean_us, double sd_us, uint32_t n) {
    if (!(mean_us > 0) || n < 2) return 0;
    return sd_us / mean_us < m->rsd_target || sd_us / sqrt((double)n) / mean_us < WRK_SEM_FRACTION * m->rsd_target;
}

/* Settling, racing's second check: a config that stayed in the race and has WRK_SETTLE_SAMPLES
 * samples (or its min_samples, the fewer) stops sampling (status OK, its samples as they are)
 * once its mean lies above the best known median by more than settle_margin plus WRK_SETTLE_Z
 * standard errors of that mean; before min_samples by WRK_SETTLE_EARLY more, since the best may
 * come from another card of the model that reads a few % faster. Callers ask from n = 2 on. It can then
 * be neither the pick nor, at the default margins, a near-tie of the decide step, so the
 * precision the RSD rule would buy for it is never used. Without it, where the GPU's clock moves
 * under its power cap (an H200 at 4096 tokens: 3-4 % RSD, never the 1 % target) every such
 * config samples until the time budget ends. Off when racing is off, when no best is known, and
 * in side-by-side jobs (whose rounds measure every finalist alike). */
static inline int wrk_settled(const wrk_measure_t *m, size_t i, double mean_us, double sd_us, uint32_t n) {
    if (!(m->settle_margin > 0) || !wrk_racing(m, i) || n < 2) return 0;
    if (n < WRK_SETTLE_SAMPLES && n < m->min_samples) return 0;
    double margin = m->settle_margin + (n < m->min_samples ? WRK_SETTLE_EARLY : 0.0);
    return mean_us - WRK_SETTLE_Z * sd_us / sqrt((double)n) > m->best_us[i] * (1.0 + margin);
}

/* One measurement: status is a Moetune__Status value (MOETUNE__STATUS__STATUS_OK...).
 * PRUNED keeps the statistics of the samples taken before the config lost the race. */
typedef struct {
    int status;
    double median_us, min_us, mean_us, stddev_us;
    uint32_t samples;
    double up_us, down_us; /* GEMM1 / GEMM2 timed alone, medians; 0 = not measured */
    double timed_us;       /* GPU time in its timed kernels, all samples (the GPU-busy numerator) */
    char detail[160];
} wrk_meas_t;

typedef struct {
    const char *name;
    /* Opens the device; fills dev. On failure MT_ERR with a one-line reason in err
     * (e.g. "no CUDA device: cuInit: CUDA_ERROR_NO_DEVICE"), or MT_NOMEM. *state is the
     * backend's. */
    mt_status_t (*open)(const wrk_backend_opts_t *opts, void **state, wrk_device_t *dev, char *err, size_t errlen);
    /* Optional: announces the configs of a job in the order they will be measured,
     * so the backend can compile ahead. Returns an MT_* status. */
    mt_status_t (*prepare)(void *state, const krn_shape_t *shape, const krn_config_t *cfgs, size_t n);
    /* Measures cfg at each of the n_bs batch sizes into out[0..n_bs). regs/spills
     * receive the compiled kernel's resource use (0 when not applicable). A config that
     * fails is a status in out; an error (MT_ERR, MT_NOMEM) means the backend can no
     * longer measure (e.g. a lost context), with why in err. */
    mt_status_t (*measure)(void *state, const krn_shape_t *shape, const krn_config_t *cfg, const uint32_t *bs,
                           size_t n_bs, const wrk_measure_t *m, wrk_meas_t *out, uint32_t *regs, uint32_t *spills,
                           char *err, size_t errlen);
    /* Releases everything; NULL-safe, nulls *state. */
    void (*close)(void **state);
} wrk_backend_ops_t;

/* Finds a backend by name ("sim", "cuda", "triton"); NULL when unknown or not built. */
const wrk_backend_ops_t *wrk_backend_find(const char *name);

/* Names of the backends built into this binary, comma-separated. */
const char *wrk_backend_names(void);

#endif
