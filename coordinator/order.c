/* order.c - cost-model order of a sweep's configs. See order.h. */
#include "order.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mt.h"

/* An H200-class device: what ranks configs, not what times them. */
#define ORD_SMS 132.0
#define ORD_FLOPS 7.0e14     /* sustained dense bf16 tensor-core rate */
#define ORD_BW 4.0e12        /* sustained HBM bandwidth, bytes/s */
#define ORD_SMEM 232448.0    /* shared memory per SM for blocks, bytes (227 KB) */
#define ORD_WARP_TILE 4096.0 /* a 64x64 warp tile: the warp-tile factor's 1 */
#define ORD_LAUNCH_US 4.0
#define ORD_MAX_BS 6
#define ORD_COST_SAMPLE 512

/* One GEMM over ctas tiles: the slower of its work and its traffic, with the last
 * partial wave idling part of the machine. Efficiency falls with small tiles, with few
 * accumulators per thread or more than fit in registers beside the operands, and, once the
 * grid fills every SM's slots, with small warp tiles (shared-memory fragment traffic per
 * MMA) and with few resident warps (a tile whose pipeline stages fill shared memory leaves
 * one or two CTAs per SM, and nothing hides their latency). The last three are fitted to
 * measured whole default spaces (docs/performance.md, "the cost model's order"). */
static double gemm_s(const krn_shape_t *s, const krn_config_t *c, double ctas, double flops, double bytes, double red) {
    double tile = (double)c->block_m * c->block_n;
    double eff = tile / (tile + 12.0 * (c->block_m + c->block_n));
    if (c->block_m < 64) eff *= 0.55 + 0.45 * c->block_m / 64.0;
    if (c->block_k < 64) eff *= 0.8;
    double acc = tile / (c->num_warps * 32.0); /* accumulators per thread */
    if (acc < 8) eff *= 0.8;
    if (acc > 128) eff *= 0.85;
    double per_sm = 64.0 / c->num_warps < 4 ? 64.0 / c->num_warps : 4;
    double smem = (double)krn_smem_bytes(c, s), by_smem = smem > 0 ? floor(ORD_SMEM / smem) : per_sm;
    if (by_smem < per_sm) per_sm = by_smem < 1 ? 1 : by_smem;
    double slots = ORD_SMS * per_sm;
    double fill = ctas < slots ? ctas / slots : 1.0;
    if (fill >= 1.0) {
        double resident = per_sm * c->num_warps;
        eff *= resident >= 16 ? 1.0 : resident >= 8 ? 0.9 : 0.4;
        uint32_t wm = krn_warps_m(c);
        if (wm) {
            double tm = c->block_m / (double)wm, tn = c->block_n / (double)(c->num_warps / wm);
            eff *= tm * tn / (tm * tn + 16.0 * (tm + tn)) / (ORD_WARP_TILE / (ORD_WARP_TILE + 16.0 * 128.0));
        }
    }
    double t_work = flops / (ORD_FLOPS * eff * (fill > 0.05 ? fill : 0.05));
    double depth = c->num_stages > 1 ? (double)(c->num_stages - 1) : 0.5;
    double bw = ORD_BW * (depth >= 2 ? 1.0 : 0.75);
    return krn_time_penalized(c, fmax(t_work, bytes / bw), red, ctas, slots);
}

double ord_cost_us(const krn_shape_t *s, const krn_config_t *c, uint32_t m) {
    double eb = strncmp(s->dtype, "fp8", 3) == 0 ? 1.0 : 2.0;
    double E = s->e ? s->e : 1, N = s->n, K = s->k, A = (double)m * s->topk;
    /* experts that receive a token, and the rows each gets, padded to BLOCK_SIZE_M */
    double touched = s->topk >= s->e ? E : E * -expm1((double)m * log1p(-(double)s->topk / E));
    if (touched > A) touched = A;
    if (touched < 1.0) touched = 1.0;
    double mb = ceil(A / touched / c->block_m);
    double rows = touched * mb * c->block_m;
    double gm = fmin((double)c->group_m, mb) - 1.0;
    double reread = (mb - 1.0) * (1.0 - (0.55 + 0.4 * gm / (gm + 8.0)));
    double w1 = touched * 2.0 * N * K * eb, w2 = touched * N * K * eb;
    double b1 = w1 * (1.0 + reread) + rows * K * eb * (2.0 * N / c->block_n) * 0.2 + A * 2.0 * N * eb;
    double b2 = w2 * (1.0 + reread) + rows * N * eb * (K / c->block_n) * 0.2 + A * K * eb;
    double t = gemm_s(s, c, touched * mb * ceil(2.0 * N / c->block_n), 4.0 * rows * N * K, b1, K) +
               gemm_s(s, c, touched * mb * ceil(K / c->block_n), 2.0 * rows * N * K, b2, N);
    return t * 1e6 + ORD_LAUNCH_US;
}

double ord_shape_cost_us(const krn_shape_t *shape, const uint32_t *bs, size_t nb, const krn_config_t *v, size_t n) {
    size_t take = n < ORD_COST_SAMPLE ? n : ORD_COST_SAMPLE;
    double sum = 0.0;
    for (size_t k = 0; k < take; k++) {
        const krn_config_t *c = &v[k * n / take];
        for (size_t b = 0; b < nb; b++) sum += ord_cost_us(shape, c, bs[b]);
    }
    return take ? sum / (double)take : 0.0;
}

typedef struct {
    double score;
    size_t pos; /* index in the space order: ties keep it */
    uint32_t block_m;
} ranked_t;

static int cmp_ranked(const void *a, const void *b) {
    const ranked_t *x = a, *y = b;
    if (x->block_m != y->block_m) return x->block_m < y->block_m ? -1 : 1;
    if (x->score != y->score) return x->score < y->score ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

mt_status_t ord_configs(const krn_shape_t *shape, const uint32_t *bs, size_t nb, krn_config_t *v, size_t n) {
    int rc = MT_OK;
    if (n < 2) return MT_OK;
    /* at most ORD_MAX_BS batch sizes, spread over the list, both ends kept: the score's
     * specialists are found as well, and planning 100,000 configs stays quick */
    uint32_t pick[ORD_MAX_BS];
    if (nb > ORD_MAX_BS) {
        for (size_t i = 0; i < ORD_MAX_BS; i++) pick[i] = bs[i * (nb - 1) / (ORD_MAX_BS - 1)];
        bs = pick;
        nb = ORD_MAX_BS;
    }
    ranked_t *r = mt_calloc(n, sizeof *r);
    double *est = mt_malloc(n * (nb ? nb : 1) * sizeof *est);
    double *best = mt_malloc((nb ? nb : 1) * sizeof *best);
    krn_config_t *out = mt_malloc(n * sizeof *out);
    size_t *next = NULL, *end = NULL;
    if (!r || !est || !best || !out) {
        rc = MT_NOMEM;
        goto out;
    }
    for (size_t b = 0; b < nb; b++) {
        best[b] = INFINITY;
        for (size_t i = 0; i < n; i++) {
            double e = ord_cost_us(shape, &v[i], bs[b]);
            est[i * nb + b] = e;
            if (e < best[b]) best[b] = e;
        }
    }
    /* a config's best showing at any batch size: the specialists each batch size's winner
     * is made of come first, which is what racing (per batch size) wants */
    for (size_t i = 0; i < n; i++) {
        double s = nb ? INFINITY : 0.0;
        for (size_t b = 0; b < nb; b++) s = fmin(s, est[i * nb + b] / best[b]);
        r[i] = (ranked_t){.score = s, .pos = i, .block_m = v[i].block_m};
    }
    /* by BLOCK_SIZE_M, best first within each; then one of each per round */
    qsort(r, n, sizeof *r, cmp_ranked);
    size_t groups = 0;
    for (size_t i = 0; i < n; i++) groups += i == 0 || r[i].block_m != r[i - 1].block_m;
    next = mt_malloc(groups * sizeof *next);
    end = mt_malloc(groups * sizeof *end);
    if (!next || !end) {
        rc = MT_NOMEM;
        goto out;
    }
    for (size_t i = 0, g = 0; i < n; i++) {
        if (i == 0 || r[i].block_m != r[i - 1].block_m) {
            if (g) end[g - 1] = i;
            next[g++] = i;
        }
    }
    end[groups - 1] = n;
    for (size_t k = 0; k < n;) {
        for (size_t g = 0; g < groups; g++)
            if (next[g] < end[g]) out[k++] = v[r[next[g]++].pos];
    }
    memcpy(v, out, n * sizeof *v);
out:
    free(r);
    free(est);
    free(best);
    free(out);
    free(next);
    free(end);
    return rc;
}
