/*
 * backend_sim.c - the `sim` backend: a deterministic simulated GPU. See sim.h.
 *
 * The latency model is a roofline per kernel of the fused-MoE layer (align, GEMM1,
 * SiLU-and-multiply, GEMM2, top-k sum) with the effects that make configs differ:
 * tile padding of each expert's tokens to BLOCK_SIZE_M, CTA waves over the SMs and
 * occupancy from shared memory, warps and registers, in-flight bytes from the
 * pipeline depth (Little's law against DRAM latency), tensor-core efficiency of the
 * tile shape and BLOCK_SIZE_K, and L2 reuse of weight tiles from GROUP_SIZE_M.
 * Noise is drawn from a PRNG seeded by (measure seed, shape, config, batch size,
 * sample index), so the same inputs always give the same numbers.
 */
#include "sim.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "moetune.pb-c.h"
#include "mt.h"
#include "routing.h"

#define SIM_MODEL_VERSION "moetune-sim-model-1"
#define SIM_DRAM_LATENCY_S 0.8e-6 /* loaded DRAM latency the pipeline must hide */
#define SIM_LAUNCH_US 6.0         /* five launches of a layer, fixed cost */
#define SIM_COMPILE_S 0.050       /* simulated compile time per config */
#define SIM_MAX_SAMPLES 100000u

/* The simulated devices, by --sim-device name. */
typedef struct {
    const char *key;
    const char *name;
    uint32_t sm_count;
    double bw;    /* HBM bytes/s */
    double flops; /* effective dense bf16 FLOP/s */
    uint32_t smem_per_block, smem_per_sm;
    uint64_t memory_bytes;
    uint32_t clock_khz, mem_clock_khz;
    uint32_t cc_major, cc_minor;
} sim_gpu_t;

/* sm_120's figures: 188 SMs, 1.8 TB/s GDDR7, 99 KiB shared memory per block of 100 KiB per SM. */
static const sim_gpu_t g_gpus[] = {
    {"h200", "NVIDIA H200", 132, 4.8e12, 700e12, 232448, 233472, 143771336704ULL, 1980000, 3201000, 9, 0},
    {"h100", "NVIDIA H100 80GB HBM3", 132, 3.35e12, 700e12, 232448, 233472, 85520809984ULL, 1980000, 2619000, 9, 0},
    {"rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Server Edition", 188, 1.79e12, 400e12, 101376, 102400,
     102005473280ULL, 2617000, 1750000, 12, 0},
};
#define N_GPUS (sizeof g_gpus / sizeof g_gpus[0])

typedef struct {
    const sim_gpu_t *gpu;
    wrk_sim_faults_t faults;
    double time_scale;
    krn_limits_t limits;
    int triton; /* --kernel given: it stands in for that Triton kernel and follows Triton's rules */
    int gpu_index;
    krn_routing_t routing; /* the captured routing of the last shape that had one */
    wrk_sim_compiler_t cc; /* keys: compile_key(shape, config) */
} sim_state_t;

/* ---- deterministic randomness */

static uint64_t splitmix64(uint64_t *s) { return mt_mix64(*s += MT_GOLDEN64); }

static double unit_draw(uint64_t *s) { return (double)(splitmix64(s) >> 11) * (1.0 / 9007199254740992.0); }

static uint64_t hash_case(uint64_t seed, const krn_shape_t *shape, const krn_config_t *cfg, uint64_t extra) {
    uint32_t v[] = {shape->e,     shape->n,     shape->k,     shape->topk,  shape->block_n, shape->block_k,
                    cfg->block_m, cfg->block_n, cfg->block_k, cfg->group_m, cfg->num_warps, cfg->num_stages};
    uint64_t h = mt_fnv1a(MT_FNV_INIT, &seed, sizeof seed);
    h = mt_fnv1a(h, v, sizeof v);
    h = mt_fnv1a(h, shape->dtype, strnlen(shape->dtype, sizeof shape->dtype));
    return mt_fnv1a(h, &extra, sizeof extra);
}

/* ---- the simulated compiler */

static long find_key(const wrk_sim_compiler_t *c, uint64_t key) {
    size_t n = c->n < WRK_SIM_COMPILED ? c->n : WRK_SIM_COMPILED;
    for (size_t i = 0; i < n; i++)
        if (c->key[i] == key) return (long)i;
    return -1;
}

static void add_key(wrk_sim_compiler_t *c, uint64_t key, uint64_t ready_us) {
    size_t i = c->n++ % WRK_SIM_COMPILED;
    c->key[i] = key;
    c->ready_us[i] = ready_us;
}

void wrk_sim_compile_ahead(wrk_sim_compiler_t *c, uint64_t key, uint64_t now_us, uint64_t compile_us) {
    if (find_key(c, key) >= 0) return;
    size_t t = 0;
    for (size_t i = 1; i < WRK_SIM_POOL; i++)
        if (c->free_us[i] < c->free_us[t]) t = i;
    uint64_t start = c->free_us[t] > now_us ? c->free_us[t] : now_us;
    c->free_us[t] = start + compile_us;
    add_key(c, key, c->free_us[t]);
}

uint64_t wrk_sim_compile_wait_us(wrk_sim_compiler_t *c, uint64_t key, uint64_t now_us, uint64_t compile_us) {
    long i = find_key(c, key);
    if (i < 0) {
        add_key(c, key, now_us + compile_us);
        return compile_us;
    }
    uint64_t left = c->ready_us[i] > now_us ? c->ready_us[i] - now_us : 0;
    if (left > compile_us) { /* not started yet: compiled here instead */
        left = compile_us;
        c->ready_us[i] = now_us + compile_us;
    }
    return left;
}

/* One compile at this time scale, real microseconds; (shape, cfg)'s key in st->cc. */
static uint64_t compile_us(const sim_state_t *st) { return (uint64_t)(st->time_scale * SIM_COMPILE_S * 1e6); }
static uint64_t compile_key(const krn_shape_t *shape, const krn_config_t *cfg) { return hash_case(0, shape, cfg, 0); }

/* The simulated compile time of (shape, cfg) at this time scale, seconds of the model. */
static double compile_s(sim_state_t *st, const krn_shape_t *shape, const krn_config_t *cfg) {
    if (!(st->time_scale > 0)) return 0.0;
    uint64_t us = wrk_sim_compile_wait_us(&st->cc, compile_key(shape, cfg), mt_now_us(), compile_us(st));
    return (double)us / 1e6 / st->time_scale;
}

static mt_status_t sim_prepare(void *state, const krn_shape_t *shape, const krn_config_t *cfgs, size_t n) {
    sim_state_t *st = state;
    if (!(st->time_scale > 0)) return MT_OK;
    uint64_t now = mt_now_us();
    for (size_t i = 0; i < n; i++) wrk_sim_compile_ahead(&st->cc, compile_key(shape, &cfgs[i]), now, compile_us(st));
    return MT_OK;
}

/* ---- fault spec */

mt_status_t wrk_sim_config_parse(const char *text, krn_config_t *cfg) { return krn_config_parse(text, cfg); }

static int add_config(const char *key, const char *val, krn_config_t *list, size_t *n, char *err, size_t errlen) {
    if (*n == WRK_SIM_MAX_FAULTS) {
        mt_fmt(err, errlen, "sim faults: more than %d %s= entries", WRK_SIM_MAX_FAULTS, key);
        return MT_INVAL;
    }
    if (wrk_sim_config_parse(val, &list[*n]) != MT_OK) {
        mt_fmt(err, errlen, "sim faults: %s=%s is not BMxBNxBKxGMxWxS", key, val);
        return MT_INVAL;
    }
    (*n)++;
    return MT_OK;
}

/* Sets *out to val when it is a number in [lo, hi]; else MT_INVAL, saying in err that
 * key=val is not what (e.g. "a probability in [0, 1]"). */
static int set_real(const char *key, const char *val, double lo, double hi, const char *what, double *out, char *err,
                    size_t errlen) {
    double x;
    if (mt_parse_double(val, &x) != MT_OK || !(x >= lo && x <= hi)) {
        mt_fmt(err, errlen, "sim faults: %s=%s is not %s", key, val, what);
        return MT_INVAL;
    }
    *out = x;
    return MT_OK;
}

/* speed=BMxBNxBKxGMxWxS@M:X (M '*' or 0: every batch size): that config's latency times X. */
static int add_speed(char *val, wrk_sim_faults_t *out, char *err, size_t errlen) {
    char *at = strchr(val, '@'), *colon = at ? strchr(at, ':') : NULL;
    double x = 0;
    uint32_t m = 0;
    if (out->n_speed == WRK_SIM_MAX_FAULTS) {
        mt_fmt(err, errlen, "sim faults: more than %d speed= entries", WRK_SIM_MAX_FAULTS);
        return MT_INVAL;
    }
    if (at) *at = '\0';
    if (colon) *colon = '\0';
    if (!at || !colon || wrk_sim_config_parse(val, &out->speed[out->n_speed].cfg) != MT_OK ||
        (strcmp(at + 1, "*") != 0 && mt_parse_u32(at + 1, 0, UINT32_MAX, &m) != MT_OK) ||
        mt_parse_double(colon + 1, &x) != MT_OK || !(x >= 0.01 && x <= 100.0)) {
        mt_fmt(err, errlen, "sim faults: speed=%s is not BMxBNxBKxGMxWxS@M:X (X in 0.01..100)", val);
        return MT_INVAL;
    }
    out->speed[out->n_speed].m = m;
    out->speed[out->n_speed].factor = x;
    out->n_speed++;
    return MT_OK;
}

/* The speed= factor of cfg at batch size m: 1 when none is planted. */
static double speed_of(const wrk_sim_faults_t *f, const krn_config_t *cfg, uint32_t m) {
    double x = 1.0;
    for (size_t i = 0; i < f->n_speed; i++)
        if ((!f->speed[i].m || f->speed[i].m == m) && memcmp(&f->speed[i].cfg, cfg, sizeof *cfg) == 0)
            x *= f->speed[i].factor;
    return x;
}

/* One key=value of a sim faults spec (mt_kv_fn). */
static mt_status_t sim_fault(void *ctx, const char *key, char *val, char *err, size_t errlen) {
    wrk_sim_faults_t *out = ctx;
    int rc = MT_OK;
    if (!*key || !*val) {
        mt_fmt(err, errlen, "sim faults: '%s=%s' is not key=value", key, val);
        rc = MT_INVAL;
    } else if (strcmp(key, "crash") == 0) {
        rc = add_config(key, val, out->crash, &out->n_crash, err, errlen);
    } else if (strcmp(key, "hang") == 0) {
        rc = add_config(key, val, out->hang, &out->n_hang, err, errlen);
    } else if (strcmp(key, "wrong") == 0) {
        rc = add_config(key, val, out->wrong, &out->n_wrong, err, errlen);
    } else if (strcmp(key, "crash_rate") == 0) {
        rc = set_real(key, val, 0.0, 1.0, "a probability in [0, 1]", &out->crash_rate, err, errlen);
    } else if (strcmp(key, "slow_start_ms") == 0) {
        if (mt_parse_u32(val, 0, 3600000, &out->slow_start_ms) != MT_OK) {
            mt_fmt(err, errlen, "sim faults: slow_start_ms=%s is not an integer in 0..3600000", val);
            rc = MT_INVAL;
        }
    } else if (strcmp(key, "slowdown") == 0) {
        rc = set_real(key, val, 0.01, 100.0, "a factor in 0.01..100", &out->slowdown, err, errlen);
    } else if (strcmp(key, "speed") == 0) {
        rc = add_speed(val, out, err, errlen);
    } else {
        mt_fmt(err, errlen,
               "sim faults: unknown key '%s' (crash, crash_rate, hang, wrong, slow_start_ms, slowdown, speed)", key);
        rc = MT_INVAL;
    }
    return rc;
}

mt_status_t wrk_sim_faults_parse(const char *spec, wrk_sim_faults_t *out, char *err, size_t errlen) {
    memset(out, 0, sizeof *out);
    return mt_parse_kv_list(spec, "sim faults: ", sim_fault, out, err, errlen);
}

static int config_in(const krn_config_t *cfg, const krn_config_t *list, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (memcmp(cfg, &list[i], sizeof *cfg) == 0) return 1;
    return 0;
}

int wrk_sim_crash_draw(const wrk_sim_faults_t *f, uint64_t seed, const krn_shape_t *shape, const krn_config_t *cfg,
                       uint32_t pid) {
    if (f->crash_rate <= 0.0) return 0;
    uint64_t s = hash_case(seed, shape, cfg, 0xc0ffee00000000ULL | pid);
    return unit_draw(&s) < f->crash_rate;
}

/* ---- latency model */

static double bk_efficiency(uint32_t bk) {
    static const struct {
        uint32_t bk;
        double eff;
    } table[] = {{16, 0.60}, {32, 0.75}, {64, 0.90}, {128, 0.97}, {256, 0.93}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (table[i].bk == bk) return table[i].eff;
    return 0.85;
}

static uint32_t regs_estimate(const krn_config_t *c) {
    uint32_t threads = c->num_warps * 32;
    uint32_t acc = (c->block_m * c->block_n) / threads;
    uint32_t frag = ((c->block_m + c->block_n) * c->block_k) / (threads * 4);
    uint32_t r = 40 + acc + frag;
    return r > 255 ? 255 : r;
}

static double blocks_per_sm(const sim_gpu_t *g, const krn_shape_t *shape, const krn_config_t *c) {
    uint32_t threads = c->num_warps * 32;
    uint32_t smem = krn_smem_bytes(c, shape) + 1024;
    uint32_t by_smem = g->smem_per_sm / smem;
    uint32_t by_warps = 64 / c->num_warps;
    uint32_t by_regs = 65536 / (threads * regs_estimate(c));
    uint32_t b = by_smem < by_warps ? by_smem : by_warps;
    if (by_regs < b) b = by_regs;
    if (b > 32) b = 32;
    return b ? b : 1;
}

/* One GEMM kernel: ctas tiles, padded flops, DRAM bytes, reduction depth red. */
static double gemm_s(const sim_gpu_t *g, const krn_shape_t *shape, const krn_config_t *c, double ctas, double flops,
                     double bytes, double red, double eb) {
    double slots = g->sm_count * blocks_per_sm(g, shape, c);
    double active = ctas < slots ? ctas : slots;
    /* Bandwidth one CTA can pull: the stages in flight over the DRAM latency. */
    double depth = c->num_stages > 1 ? (double)(c->num_stages - 1) : 0.5;
    double inflight = depth * (double)(c->block_m + c->block_n) * c->block_k * eb;
    double bw = active * inflight / SIM_DRAM_LATENCY_S;
    if (bw > g->bw) bw = g->bw;
    /* Tensor-core efficiency: tile shape (operand reuse), a warpgroup wants 64
     * rows, BLOCK_K, accumulator pressure per thread, warps to fill the SMs. */
    double tile = (double)c->block_m * c->block_n;
    double eff = tile / (tile + 12.0 * (c->block_m + c->block_n));
    if (c->block_m < 64) eff *= 0.55 + 0.45 * c->block_m / 64.0;
    eff *= bk_efficiency(c->block_k);
    double acc = tile / (c->num_warps * 32.0);
    if (acc < 8) eff *= 0.8;
    if (acc > 96) eff *= 0.85;
    double fill = active * c->num_warps / (g->sm_count * 8.0);
    if (fill > 1.0) fill = 1.0;
    double rate = g->flops * eff * fill;
    /* the pipeline prologue and the wave quantisation */
    return krn_time_penalized(c, fmax(bytes / bw, flops / rate), red, ctas, slots);
}

static double model_us(const sim_gpu_t *g, const krn_shape_t *s, const krn_config_t *c, uint32_t m) {
    double eb = strncmp(s->dtype, "fp8", 3) == 0 ? 1.0 : 2.0;
    double E = s->e, N = s->n, K = s->k, A = (double)m * s->topk;
    double touched = E * -expm1((double)m * log1p(-(double)s->topk / E));
    if (s->topk >= s->e) touched = E;
    if (touched > A) touched = A;
    if (touched < 1.0) touched = 1.0;
    double per_expert = A / touched;
    double mb_per_expert = ceil(per_expert / c->block_m);
    double mblocks = touched * mb_per_expert;
    double rows = mblocks * c->block_m; /* padded rows the tensor cores run */
    /* Weight tiles are re-read by every M block of an expert; GROUP_SIZE_M keeps
     * consecutive CTAs on the same weight columns so re-reads hit L2. */
    double gm = fmin((double)c->group_m, mb_per_expert) - 1.0;
    double hit_w = 0.55 + 0.4 * gm / (gm + 8.0);
    double hit_a = 0.9 - 0.2 * gm / (gm + 32.0);
    double w1 = touched * 2.0 * N * K * eb, w2 = touched * N * K * eb;
    double reread = (mb_per_expert - 1.0) * (1.0 - hit_w);
    double nt1 = 2.0 * N / c->block_n, nt2 = K / c->block_n;
    double bytes1 = w1 * (1.0 + reread) + rows * K * eb * (1.0 + (nt1 - 1.0) * (1.0 - hit_a)) + A * 2.0 * N * eb;
    double bytes2 = w2 * (1.0 + reread) + rows * N * eb * (1.0 + (nt2 - 1.0) * (1.0 - hit_a)) + A * K * eb;
    double t = gemm_s(g, s, c, mblocks * nt1, 2.0 * rows * 2.0 * N * K, bytes1, K, eb) +
               gemm_s(g, s, c, mblocks * nt2, 2.0 * rows * N * K, bytes2, N, eb);
    double act = (A * 2.0 * N * eb + A * N * eb) / (g->bw * 0.8);
    double sum = (A * K * eb + (double)m * K * eb) / (g->bw * 0.8);
    double align_us = 1.5 + A * 1e-4;
    return (t + act + sum) * 1e6 + align_us + SIM_LAUNCH_US;
}

double wrk_sim_latency_us(const krn_shape_t *shape, const krn_config_t *cfg, uint32_t m) {
    return model_us(&g_gpus[0], shape, cfg, m);
}

/* ---- sampling */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sample n of one (config, batch size): the latency with noise, deterministic in stream and n.
 * Short kernels are noisier (launch jitter); rare slow outliers (clock dips). */
static double draw_sample(double lat_us, double scale, uint64_t stream, uint32_t n) {
    double sigma = 0.004 + 0.02 / sqrt(lat_us);
    uint64_t s = stream ^ ((uint64_t)n * 0x9e3779b97f4a7c15ULL);
    double u1 = unit_draw(&s), u2 = unit_draw(&s), u3 = unit_draw(&s);
    double z = sqrt(-2.0 * log(u1 > 0 ? u1 : 1e-300)) * cos(2.0 * M_PI * u2);
    double noise = sigma * z;
    if (u3 < 0.02) noise += 0.05 + 0.15 * unit_draw(&s);
    if (noise < -0.2) noise = -0.2;
    return lat_us * (1.0 + noise) * scale;
}

/* Draws samples of one (config, batch size) until the stop rule holds (wrk_precise), within
 * min..max samples and the time budget; fills out; returns the simulated seconds. Racing as
 * the GPU backends race: the first WRK_RACE_SAMPLES replays are timed and decide (the first
 * alone when it is far beyond the best, wrk_race_lost), after the check's layer, which from the
 * second batch size on is timed and decides a far loser alone (wrk_check_lost); a survivor
 * counts them as warm-up replays and is sampled afresh (the same draws as without racing). */
static double sample_one(double lat_us, double scale, uint64_t stream, const wrk_measure_t *m, size_t bi, double *buf,
                         wrk_meas_t *out) {
    /* m is filled (WIRE_MEASURE_DEFAULTS, by the worker's parent): no defaults of our own */
    uint32_t min_n = m->min_samples;
    uint32_t max_n = m->max_samples ? m->max_samples : 1;
    if (min_n > SIM_MAX_SAMPLES) min_n = SIM_MAX_SAMPLES;
    if (max_n > SIM_MAX_SAMPLES) max_n = SIM_MAX_SAMPLES;
    if (max_n < min_n) max_n = min_n;
    double sum = 0, sumsq = 0, spent_us = 0, timed = 0;
    uint32_t n = 0, warm = m->warmup;
    bool pruned = false, settled = false, on_check = false;
    if (wrk_check_races(m, bi)) {
        /* the check's layer, timed (the GPU backends run it for the reference check anyway) */
        double x = draw_sample(lat_us, scale, stream ^ 0xc4ec4c4ec4ec4ecULL, 0);
        timed = spent_us = x;
        if (wrk_check_lost(m, bi, x)) {
            buf[n++] = x;
            sum = x;
            pruned = on_check = true;
        }
    }
    if (!pruned && wrk_racing(m, bi)) {
        double fastest = 0;
        while (n < WRK_RACE_SAMPLES && !pruned) {
            double x = draw_sample(lat_us, scale, stream ^ 0x5ace5ace5ace5aceULL, n);
            buf[n++] = x;
            sum += x;
            sumsq += x * x;
            if (n == 1 || x < fastest) fastest = x;
            pruned = wrk_race_lost(m, bi, fastest, n);
        }
        spent_us += sum; /* timed replays, in the GPU-busy numerator whether the config wins or not */
        timed = spent_us;
        if (!pruned) {
            warm = warm > WRK_RACE_SAMPLES ? warm - WRK_RACE_SAMPLES : 0;
            n = 0;
            sum = sumsq = 0;
        }
    }
    spent_us += pruned ? 0 : (double)warm * lat_us * scale;
    while (!pruned && n < max_n) {
        double x = draw_sample(lat_us, scale, stream, n);
        buf[n++] = x;
        sum += x;
        sumsq += x * x;
        spent_us += x;
        timed += x;
        if (n < 2) continue;
        double mean = sum / n, var = (sumsq - n * mean * mean) / (n - 1);
        if (var < 0) var = 0;
        if (n >= min_n && wrk_precise(m, mean, sqrt(var), n)) break;
        if (wrk_settled(m, bi, mean, sqrt(var), n)) {
            settled = true;
            break;
        }
        if (n >= min_n && m->budget_ms && spent_us >= m->budget_ms * 1000.0) break;
    }
    double mean = sum / n, var = n > 1 ? (sumsq - n * mean * mean) / (n - 1) : 0.0;
    qsort(buf, n, sizeof *buf, cmp_double);
    out->status = pruned ? MOETUNE__STATUS__STATUS_PRUNED : MOETUNE__STATUS__STATUS_OK;
    out->timed_us = timed;
    out->samples = n;
    out->mean_us = mean;
    out->stddev_us = var > 0 ? sqrt(var) : 0.0;
    out->min_us = buf[0];
    out->median_us = n % 2 ? buf[n / 2] : 0.5 * (buf[n / 2 - 1] + buf[n / 2]);
    out->detail[0] = '\0';
    if (on_check)
        snprintf(out->detail, sizeof out->detail, "pruned: the check's layer %.2fx the best %.4g us", buf[0] / m->best_us[bi],
                 m->best_us[bi]);
    else if (pruned)
        snprintf(out->detail, sizeof out->detail, "pruned: fastest of %u samples %.2fx the best %.4g us", n,
                 buf[0] / m->best_us[bi], m->best_us[bi]);
    else if (settled)
        snprintf(out->detail, sizeof out->detail, "settled: mean %.3fx the best after %u samples",
                 out->mean_us / m->best_us[bi], n);
    return spent_us * 1e-6;
}

static void sleep_s(double s) {
    if (!(s > 0)) return;
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

static void fill_status(wrk_meas_t *out, const uint32_t *bs, size_t n_bs, int status, const char *detail) {
    for (size_t i = 0; i < n_bs; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].status = status;
        snprintf(out[i].detail, sizeof out[i].detail, "%s", detail);
    }
    (void)bs;
}

/* Dies the way a faulting kernel kills its process; no core file. */
static void die_now(void) {
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    signal(SIGSEGV, SIG_DFL);
    raise(SIGSEGV);
    abort();
}

/* ---- backend operations */

static mt_status_t sim_open(const wrk_backend_opts_t *opts, void **state, wrk_device_t *dev, char *err, size_t errlen) {
    int rc = MT_OK;
    sim_state_t *st = mt_calloc(1, sizeof *st);
    if (!st) return MT_NOMEM;
    st->gpu = &g_gpus[0];
    if (opts->sim_device && *opts->sim_device) {
        st->gpu = NULL;
        for (size_t i = 0; i < N_GPUS; i++)
            if (strcmp(opts->sim_device, g_gpus[i].key) == 0) st->gpu = &g_gpus[i];
        if (!st->gpu) {
            mt_fmt(err, errlen, "unknown simulated device '%s' (h200, h100, rtx-pro-6000)", opts->sim_device);
            rc = MT_ERR;
            goto out;
        }
    }
    if (!(opts->sim_time_scale >= 0.0 && opts->sim_time_scale <= 1000.0)) {
        mt_fmt(err, errlen, "sim time scale %g is not in [0, 1000]", opts->sim_time_scale);
        rc = MT_ERR;
        goto out;
    }
    if (wrk_sim_faults_parse(opts->sim_faults, &st->faults, err, errlen) != MT_OK) {
        rc = MT_ERR;
        goto out;
    }
    if (opts->gpu_index < 0) {
        mt_fmt(err, errlen, "gpu index %d is negative", opts->gpu_index);
        rc = MT_ERR;
        goto out;
    }
    st->time_scale = opts->sim_time_scale;
    st->gpu_index = opts->gpu_index;
    krn_limits_default(&st->limits);
    st->limits.smem_per_block = st->gpu->smem_per_block;
    st->limits.cc_major = st->gpu->cc_major;
    st->limits.cc_minor = st->gpu->cc_minor;
    st->triton = opts->kernel && *opts->kernel;
    if (st->faults.slow_start_ms) sleep_s(st->faults.slow_start_ms / 1000.0);

    memset(dev, 0, sizeof *dev);
    snprintf(dev->name, sizeof dev->name, "%s", st->gpu->name);
    uint64_t idx = (uint64_t)opts->gpu_index;
    snprintf(dev->uuid, sizeof dev->uuid, "SIM-%016llx",
             (unsigned long long)mt_fnv1a(mt_fnv1a(MT_FNV_INIT, st->gpu->key, strlen(st->gpu->key)), &idx, sizeof idx));
    dev->cc_major = st->limits.cc_major;
    dev->cc_minor = st->limits.cc_minor;
    dev->sm_count = st->gpu->sm_count;
    dev->memory_bytes = st->gpu->memory_bytes;
    snprintf(dev->driver_version, sizeof dev->driver_version, "sim");
    snprintf(dev->cuda_version, sizeof dev->cuda_version, "sim");
    dev->clock_khz = st->gpu->clock_khz;
    dev->mem_clock_khz = st->gpu->mem_clock_khz;
    dev->smem_per_block = st->gpu->smem_per_block;
    dev->regs_per_block = 65536;
    snprintf(dev->compiler, sizeof dev->compiler, "sim");
    if (st->triton) snprintf(dev->versions, sizeof dev->versions, "kernel=%s " KRN_SIM_TRITON, opts->kernel);
    snprintf(dev->kernel_hash, sizeof dev->kernel_hash, "%016llx",
             (unsigned long long)mt_fnv1a(MT_FNV_INIT, SIM_MODEL_VERSION, strlen(SIM_MODEL_VERSION)));
    *state = st;
    st = NULL;
out:
    free(st);
    return rc;
}

/* How much slower the layer runs on captured routing than on uniform: the busiest expert's
 * token count over the mean, damped (the GEMM's other experts' blocks overlap with it). A
 * model, like the rest of the sim: it makes routing matter, it does not predict a GPU. */
static double routing_factor(const krn_routing_t *r, const krn_shape_t *shape, uint32_t bs, uint64_t seed) {
    uint32_t *rows = mt_malloc(bs * sizeof *rows), *load = mt_calloc(shape->e, sizeof *load);
    double f = 1.0;
    if (rows && load) {
        krn_routing_rows(r->tokens, bs, seed, rows);
        uint32_t most = 0;
        for (uint32_t i = 0; i < bs; i++)
            for (uint32_t j = 0; j < r->topk; j++) {
                uint32_t e = r->ids[(size_t)rows[i] * r->topk + j];
                if (e < shape->e && ++load[e] > most) most = load[e];
            }
        double mean = (double)bs * r->topk / shape->e;
        if (mean < 1.0) mean = 1.0;
        f = 1.0 + 0.5 * (most / mean - 1.0);
        if (f < 1.0) f = 1.0;
    }
    free(rows);
    free(load);
    return f;
}

/* Loads the shape's routing file once and checks it is the one the sweep was planned on. */
static int sim_routing(sim_state_t *st, const krn_shape_t *shape, const wrk_measure_t *m, char *why, size_t len) {
    if (strcmp(st->routing.sha256, shape->routing) == 0 && st->routing.ids) return MT_OK;
    krn_routing_clear(&st->routing);
    char inner[400];
    int rc = krn_routing_load(m->routing_path, &st->routing, inner, sizeof inner);
    if (rc == MT_OK && strcmp(st->routing.sha256, shape->routing) != 0) {
        mt_fmt(inner, sizeof inner, "%s: sha256 %.12s..., the sweep was planned on %.12s...: the file changed",
               m->routing_path, st->routing.sha256, shape->routing);
        rc = MT_INVAL;
    }
    if (rc == MT_OK) rc = krn_routing_check(&st->routing, shape->e, shape->topk, inner, sizeof inner);
    if (rc != MT_OK) {
        krn_routing_clear(&st->routing);
        mt_fmt(why, len, "routing %s", inner);
    }
    return rc;
}

static mt_status_t sim_measure(void *state, const krn_shape_t *shape, const krn_config_t *cfg, const uint32_t *bs,
                               size_t n_bs, const wrk_measure_t *m, wrk_meas_t *out, uint32_t *regs, uint32_t *spills,
                               char *err, size_t errlen) {
    sim_state_t *st = state;
    char why[160];
    double *buf = NULL;
    double spent_s = compile_s(st, shape, cfg);
    *regs = 0;
    *spills = 0;
    if (krn_shape_check(shape, why, sizeof why) != MT_OK ||
        (st->triton ? krn_check_triton_on(shape, cfg, &st->limits, why, sizeof why)
                    : krn_check(shape, cfg, &st->limits, why, sizeof why)) != MT_OK) {
        fill_status(out, bs, n_bs, MOETUNE__STATUS__STATUS_INVALID, why);
        return MT_OK;
    }
    if (config_in(cfg, st->faults.crash, st->faults.n_crash) ||
        wrk_sim_crash_draw(&st->faults, m->seed, shape, cfg, (uint32_t)getpid()))
        die_now();
    if (config_in(cfg, st->faults.hang, st->faults.n_hang)) {
        for (;;) pause();
    }
    *regs = regs_estimate(cfg);
    if (shape->routing[0] && sim_routing(st, shape, m, why, sizeof why) != MT_OK) {
        fill_status(out, bs, n_bs, MOETUNE__STATUS__STATUS_LAUNCH_ERROR, why);
        return MT_OK;
    }
    if (config_in(cfg, st->faults.wrong, st->faults.n_wrong)) {
        fill_status(out, bs, n_bs, MOETUNE__STATUS__STATUS_WRONG_RESULT,
                    "output differs from the reference (simulated fault)");
        sleep_s(st->time_scale * spent_s);
        return MT_OK;
    }
    uint32_t cap = m->max_samples;
    if (m->min_samples > cap) cap = m->min_samples;
    if (cap < 5) cap = 5;
    if (cap > SIM_MAX_SAMPLES) cap = SIM_MAX_SAMPLES;
    buf = mt_malloc(cap * sizeof *buf);
    if (!buf) {
        mt_fmt(err, errlen, "out of memory for %u samples", cap);
        return MT_NOMEM;
    }
    for (size_t i = 0; i < n_bs; i++) {
        double lat = model_us(st->gpu, shape, cfg, bs[i]);
        if (shape->routing[0]) lat *= routing_factor(&st->routing, shape, bs[i], m->seed);
        uint64_t stream = hash_case(m->seed, shape, cfg, bs[i]);
        /* --sim-faults slowdown=X: the same draws as without it, X times slower */
        double f = st->faults.slowdown > 0 ? st->faults.slowdown : 1.0;
        f *= speed_of(&st->faults, cfg, bs[i]); /* speed=: a config planted faster or slower here */
        spent_s += sample_one(lat, f, stream, m, i, buf, &out[i]);
        out[i].timed_us *= st->time_scale; /* the time it really spends: none at time scale 0 */
    }
    free(buf);
    sleep_s(st->time_scale * spent_s);
    return MT_OK;
}

static void sim_close(void **state) {
    if (!state || !*state) return;
    krn_routing_clear(&((sim_state_t *)*state)->routing);
    free(*state);
    *state = NULL;
}

const wrk_backend_ops_t wrk_backend_sim = {
    .name = "sim",
    .open = sim_open,
    .prepare = sim_prepare,
    .measure = sim_measure,
    .close = sim_close,
};
