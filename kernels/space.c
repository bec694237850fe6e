/* space.c - the config space and the static rules. See space.h. */
#define _POSIX_C_SOURCE 200809L
#include "space.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "engines.h"
#include "mt.h"
#include "routing.h"

const uint32_t krn_default_batch_sizes[] = {1,  2,   4,   8,   16,   24,   32,   48,   64,
                                            96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096};
const size_t krn_n_default_batch_sizes = sizeof krn_default_batch_sizes / sizeof krn_default_batch_sizes[0];

/* Declared in routing.h; here so that shape checks need no routing reader (nor libsodium). */
int krn_routing_hash_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0) return 1;
    if (n != 64) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

const krn_config_field_t krn_config_fields[KRN_N_FIELDS] = {
#define X(f, file, opt, max) {#f, file, opt, max, offsetof(krn_config_t, f)},
    KRN_CONFIG_FIELDS(X)
#undef X
};

char *krn_config_format(const krn_config_t *c, char *buf, size_t len) {
    size_t used = 0;
    if (len) buf[0] = '\0';
    for (size_t i = 0; i < KRN_N_FIELDS; i++) {
        int n = snprintf(buf + used, used < len ? len - used : 0, "%s%u", i ? "x" : "", KRN_CONFIG_GET(c, i));
        if (n > 0) used += (size_t)n;
    }
    return buf;
}

int krn_config_bad_field(const krn_config_t *c) {
    for (int i = 0; i < KRN_N_FIELDS; i++) {
        uint32_t v = KRN_CONFIG_GET(c, i);
        if (v < 1 || v > krn_config_fields[i].max) return i;
    }
    return -1;
}

mt_status_t krn_config_parse(const char *text, krn_config_t *cfg) {
    krn_config_t c;
    const char *p = text;
    if (!p) return MT_INVAL;
    for (size_t i = 0; i < KRN_N_FIELDS; i++) {
        uint64_t v = 0;
        size_t digits = 0;
        /* digits only: strtoul would take a sign or leading blanks */
        for (; *p >= '0' && *p <= '9' && digits < 10; p++, digits++) v = v * 10 + (uint64_t)(*p - '0');
        if (!digits || v > UINT32_MAX) return MT_INVAL;
        KRN_CONFIG_AT(&c, i) = (uint32_t)v;
        if (i + 1 < KRN_N_FIELDS && *p++ != 'x') return MT_INVAL;
    }
    if (*p || krn_config_bad_field(&c) >= 0) return MT_INVAL;
    *cfg = c;
    return MT_OK;
}

void krn_space_default(krn_space_t *s) {
    static const uint32_t def[KRN_N_FIELDS][KRN_MAX_VALUES] = {
        [KRN_F_block_m] = {16, 32, 64, 128, 256},
        [KRN_F_block_n] = {32, 64, 128, 256},
        [KRN_F_block_k] = {64, 128, 256},
        [KRN_F_group_m] = {1, 16, 32, 64},
        [KRN_F_num_warps] = {4, 8},
        [KRN_F_num_stages] = {2, 3, 4, 5},
    };
    memset(s, 0, sizeof *s);
    for (int f = 0; f < KRN_N_FIELDS; f++) {
        while (s->n[f] < KRN_MAX_VALUES && def[f][s->n[f]]) s->n[f]++;
        memcpy(s->values[f], def[f], s->n[f] * sizeof def[f][0]);
    }
}

size_t krn_space_size(const krn_space_t *s) {
    if (s->n_list) return s->n_list;
    size_t n = 1;
    for (int f = 0; f < KRN_N_FIELDS; f++) n *= s->n[f];
    return n;
}

/* The first field varies slowest, the last fastest. */
void krn_space_at(const krn_space_t *s, size_t i, krn_config_t *c) {
    if (s->n_list) {
        *c = s->list[i];
        return;
    }
    for (int f = KRN_N_FIELDS - 1; f >= 0; f--) {
        KRN_CONFIG_AT(c, f) = s->values[f][i % s->n[f]];
        i /= s->n[f];
    }
}

void krn_limits_default(krn_limits_t *l) {
    l->smem_per_block = 232448; /* 227 KiB opt-in on sm_90 */
    l->regs_per_thread = 255;
    l->cc_major = 9;
    l->cc_minor = 0;
}

static uint32_t elem_bytes(const krn_shape_t *shape) { return strncmp(shape->dtype, "fp8", 3) == 0 ? 1u : 2u; }

uint32_t krn_smem_bytes(const krn_config_t *c, const krn_shape_t *shape) {
    uint64_t tile = ((uint64_t)c->block_m * c->block_k + (uint64_t)c->block_k * c->block_n) * elem_bytes(shape);
    uint64_t total = tile * c->num_stages;
    return total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
}

static int is_pow2(uint32_t v) { return v && !(v & (v - 1)); }

double krn_time_penalized(const krn_config_t *c, double t, double red, double ctas, double slots) {
    double iters = red / c->block_k;
    if (c->num_stages > iters) t *= 1.0 + 0.3 * (c->num_stages - iters) / c->num_stages;
    if (ctas > slots) {
        double waves = ceil(ctas / slots);
        t *= 1.0 + 0.5 * (waves * slots / ctas - 1.0);
    }
    return t;
}

uint32_t krn_warps_m(const krn_config_t *c) {
    uint32_t best = 0, best_cost = UINT32_MAX;
    if (!c->num_warps) return 0;
    for (uint32_t wm = 1; wm <= c->num_warps; wm *= 2) {
        if (c->num_warps % wm) continue;
        uint32_t wn = c->num_warps / wm;
        if (c->block_m % wm || c->block_n % wn) continue;
        uint32_t tm = c->block_m / wm, tn = c->block_n / wn;
        if (tm % 16 || tn % 8) continue;
        /* Shared-memory fragment traffic per MMA grows with tm + tn at a fixed tm*tn. */
        uint32_t cost = tm + tn;
        if (cost < best_cost || (cost == best_cost && wm > best)) {
            best = wm;
            best_cost = cost;
        }
    }
    return best;
}

/* The rules both kernels share, each with its own bounds: power-of-two block sizes of at least
 * 16, a power-of-two warp count up to max_warps, min_stages..8 stages and GROUP_SIZE_M >= 1. */
static mt_status_t check_tile(const krn_config_t *c, uint32_t max_warps, uint32_t min_stages, char *why,
                              size_t whylen) {
    if (!is_pow2(c->block_m) || !is_pow2(c->block_n) || !is_pow2(c->block_k) || c->block_m < 16 || c->block_n < 16 ||
        c->block_k < 16) {
        mt_fmt(why, whylen, "block sizes must be powers of two >= 16");
        return MT_INVAL;
    }
    if (!is_pow2(c->num_warps) || c->num_warps > max_warps) {
        mt_fmt(why, whylen, "num_warps %u is not a power of two <= %u", c->num_warps, max_warps);
        return MT_INVAL;
    }
    if (c->num_stages < min_stages || c->num_stages > 8 || c->group_m < 1) {
        mt_fmt(why, whylen, "num_stages must be in %u..8 and GROUP_SIZE_M >= 1", min_stages);
        return MT_INVAL;
    }
    return MT_OK;
}

mt_status_t krn_check(const krn_shape_t *shape, const krn_config_t *c, const krn_limits_t *l, char *why,
                      size_t whylen) {
    uint32_t threads = c->num_warps * 32;
    mt_status_t rc = check_tile(c, 16, 2, why, whylen);
    if (rc != MT_OK) return rc;
    /* Divisibility: GEMM1 reduces over K (hidden) and writes 2N columns; GEMM2
     * reduces over N and writes K columns. The kernel has no tail handling. */
    if (shape->k % c->block_k != 0) {
        mt_fmt(why, whylen, "K=%u is not a multiple of BLOCK_SIZE_K=%u", shape->k, c->block_k);
        return MT_INVAL;
    }
    if (shape->n % c->block_k != 0) {
        mt_fmt(why, whylen, "N=%u is not a multiple of BLOCK_SIZE_K=%u (GEMM2 reduction)", shape->n, c->block_k);
        return MT_INVAL;
    }
    if ((2 * shape->n) % c->block_n != 0 || shape->k % c->block_n != 0) {
        mt_fmt(why, whylen, "2N=%u or K=%u is not a multiple of BLOCK_SIZE_N=%u", 2 * shape->n, shape->k, c->block_n);
        return MT_INVAL;
    }
    /* Warp tiling: the warps split the BLOCK_M x BLOCK_N tile; every warp needs
     * whole 16x8 MMA tiles (at least 16 rows, 8 columns). */
    if (krn_warps_m(c) == 0) {
        mt_fmt(why, whylen, "tile %ux%u cannot be split into 16x8 MMA tiles for %u warps", c->block_m, c->block_n,
               c->num_warps);
        return MT_INVAL;
    }
    /* fp32 accumulators per thread must leave room for addresses and fragments. */
    uint32_t acc = (uint32_t)(((uint64_t)c->block_m * c->block_n) / threads);
    if (acc > 128) {
        mt_fmt(why, whylen, "accumulator needs %u registers per thread (> 128 of %u)", acc, l->regs_per_thread);
        return MT_INVAL;
    }
    /* The pipeline's stages plus the block's row-index table (BLOCK_M ints). */
    uint64_t smem = (uint64_t)krn_smem_bytes(c, shape) + 4u * c->block_m;
    if (smem > l->smem_per_block) {
        mt_fmt(why, whylen, "shared memory %llu B > %u B limit", (unsigned long long)smem, l->smem_per_block);
        return MT_INVAL;
    }
    return MT_OK;
}

mt_status_t krn_check_triton(const krn_config_t *c, char *why, size_t whylen) {
    return check_tile(c, 32, 1, why, whylen);
}

/* Opt-in shared memory per block: CUDA's tables of compute capabilities 9.0 (227 KiB) and 12.0
 * (99 KiB). */
const krn_device_t krn_devices[] = {
    {"sm_90", "H100/H200 (sm_90)", {232448, 255, 9, 0}},
    {"sm_120", "RTX PRO 6000 Blackwell (sm_120)", {101376, 255, 12, 0}},
};
const size_t krn_n_devices = sizeof krn_devices / sizeof krn_devices[0];

const krn_device_t *krn_device_find(const char *key) {
    for (size_t i = 0; key && i < krn_n_devices; i++)
        if (strcmp(krn_devices[i].key, key) == 0) return &krn_devices[i];
    return NULL;
}

uint32_t krn_triton_smem_floor(const krn_shape_t *shape, const krn_config_t *c, const krn_limits_t *l) {
    if (c->num_stages < 2 || shape->k % 16 != 0) return 0;
    /* A warpgroup MMA reads both operands from shared memory and keeps one more buffer in flight
     * (recorded: Required = num_stages x tiles exactly for BLOCK_SIZE_M >= 64 on H100 and H200,
     * (num_stages - 1) x tiles below). */
    bool wgmma = l->cc_major == 9 && strcmp(shape->dtype, "bf16") == 0 && c->block_m % 64 == 0 && c->num_warps % 4 == 0;
    uint64_t buffers = wgmma ? c->num_stages : c->num_stages - 1u;
    uint64_t tile = ((uint64_t)c->block_m * c->block_k + (uint64_t)c->block_k * c->block_n) * elem_bytes(shape);
    uint64_t total = buffers * tile;
    return total > UINT32_MAX ? UINT32_MAX : (uint32_t)total;
}

mt_status_t krn_check_triton_on(const krn_shape_t *shape, const krn_config_t *c, const krn_limits_t *l, char *why,
                                size_t whylen) {
    mt_status_t rc = check_tile(c, 32, 1, why, whylen);
    if (rc != MT_OK || !l) return rc;
    uint32_t need = krn_triton_smem_floor(shape, c, l);
    if (need > l->smem_per_block) {
        mt_fmt(why, whylen, "Triton needs at least %u B of shared memory > %u B per block on sm_%u%u", need,
               l->smem_per_block, l->cc_major, l->cc_minor);
        return MT_INVAL;
    }
    return MT_OK;
}

mt_status_t krn_engine_keeps(const char *engine, const krn_shape_t *shape, const krn_config_t *cfg, char *why,
                             size_t whylen) {
    const krn_engine_t *e = krn_engine_find(engine);
    if (!shape->block_n || !shape->block_k || !e) return MT_OK;
    if (e->id == KRN_ENGINE_SGLANG && shape->block_k % cfg->block_k != 0) {
        mt_fmt(why, whylen, "%s: BLOCK_SIZE_K=%u does not divide block_k=%u", e->display, cfg->block_k, shape->block_k);
        return MT_INVAL;
    }
    if (e->id == KRN_ENGINE_VLLM && (cfg->block_k % shape->block_k != 0 || cfg->block_n % shape->block_n != 0)) {
        mt_fmt(why, whylen, "%s: BLOCK_SIZE_N/K=%u/%u are not multiples of block %ux%u", e->display, cfg->block_n,
               cfg->block_k, shape->block_n, shape->block_k);
        return MT_INVAL;
    }
    return MT_OK;
}

mt_status_t krn_shape_check(const krn_shape_t *s, char *err, size_t errlen) {
    if (s->e == 0 || s->n == 0 || s->k == 0 || s->topk == 0) {
        mt_fmt(err, errlen, "E, N, K and topk must all be positive");
        return MT_INVAL;
    }
    if (s->topk > s->e) {
        mt_fmt(err, errlen, "topk=%u is larger than E=%u", s->topk, s->e);
        return MT_INVAL;
    }
    if (s->e > KRN_MAX_E || s->n > KRN_MAX_NK || s->k > KRN_MAX_NK || s->topk > KRN_MAX_TOPK) {
        mt_fmt(err, errlen, "shape out of range (E <= %u, N and K <= %u, topk <= %u)", KRN_MAX_E, KRN_MAX_NK,
               KRN_MAX_TOPK);
        return MT_INVAL;
    }
    if (strcmp(s->dtype, "bf16") != 0 && strcmp(s->dtype, "fp8_w8a8") != 0) {
        mt_fmt(err, errlen, "dtype '%s' is not one of bf16, fp8_w8a8", s->dtype);
        return MT_INVAL;
    }
    if (!krn_routing_hash_ok(s->routing)) {
        mt_fmt(err, errlen, "routing '%.16s' is not a sha256 (64 lowercase hex digits)", s->routing);
        return MT_INVAL;
    }
    if ((s->block_n == 0) != (s->block_k == 0)) {
        mt_fmt(err, errlen, "block_shape needs both sizes");
        return MT_INVAL;
    }
    /* Block scales are fp8's: a bf16 shape with one would be a second name for the same work. */
    if (s->block_n && strcmp(s->dtype, "fp8_w8a8") != 0) {
        mt_fmt(err, errlen, "block_shape applies only to dtype=fp8_w8a8, not %s", s->dtype);
        return MT_INVAL;
    }
    return MT_OK;
}

/* krn_shape_parse's state: the shape and the fields given so far, as bits (E 1, N 2, K 4,
 * topk 8, dtype 16, block_shape 32). */
typedef struct {
    krn_shape_t *s;
    unsigned seen;
} shape_parse_t;

/* One key=value of a shape (mt_kv_fn). */
static mt_status_t shape_field(void *ctx, const char *key, char *val, char *err, size_t errlen) {
    shape_parse_t *p = ctx;
    krn_shape_t *s = p->s;
    static const struct {
        const char *key;
        size_t off;
        unsigned bit;
    } fields[] = {{"E", offsetof(krn_shape_t, e), 1},
                  {"N", offsetof(krn_shape_t, n), 2},
                  {"K", offsetof(krn_shape_t, k), 4},
                  {"topk", offsetof(krn_shape_t, topk), 8}};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (strcasecmp(key, fields[i].key) != 0) continue;
        if (p->seen & fields[i].bit) {
            mt_fmt(err, errlen, "%s is given twice", fields[i].key);
            return MT_INVAL;
        }
        uint32_t v;
        if (mt_parse_u32(val, 1, KRN_MAX_NK, &v) != MT_OK) {
            char why[64];
            mt_fmt(err, errlen, "%s=%s is %s", key, val, mt_u32_problem(val, 1, KRN_MAX_NK, why, sizeof why));
            return MT_INVAL;
        }
        *(uint32_t *)((char *)s + fields[i].off) = v;
        p->seen |= fields[i].bit;
        return MT_OK;
    }
    unsigned bit = strcasecmp(key, "dtype") == 0 ? 16 : strcasecmp(key, "block_shape") == 0 ? 32 : 0;
    if (bit && (p->seen & bit)) {
        mt_fmt(err, errlen, "%s is given twice", key);
        return MT_INVAL;
    }
    p->seen |= bit;
    if (bit == 16) {
        snprintf(s->dtype, sizeof s->dtype, "%s", val);
    } else if (bit == 32) {
        /* Two positive integers; sscanf's %u would take "-1" as 4294967295. */
        char *x = strchr(val, 'x');
        uint32_t bn = 0, bk = 0;
        if (x) *x = '\0';
        if (!x || mt_parse_u32(val, 1, KRN_MAX_BLOCK_SCALE, &bn) != MT_OK ||
            mt_parse_u32(x + 1, 1, KRN_MAX_BLOCK_SCALE, &bk) != MT_OK) {
            if (x) *x = 'x';
            mt_fmt(err, errlen, "block_shape=%s is not NxK (positive integers up to %u)", val, KRN_MAX_BLOCK_SCALE);
            return MT_INVAL;
        }
        s->block_n = bn;
        s->block_k = bk;
    } else {
        mt_fmt(err, errlen, "unknown shape field '%s' (expected E, N, K, topk, dtype, block_shape)", key);
        return MT_INVAL;
    }
    return MT_OK;
}

mt_status_t krn_shape_parse(const char *text, krn_shape_t *s, char *err, size_t errlen) {
    shape_parse_t p = {s, 0};
    memset(s, 0, sizeof *s);
    snprintf(s->dtype, sizeof s->dtype, "bf16");
    mt_status_t rc = mt_parse_kv_list(text, "", shape_field, &p, err, errlen);
    if (rc != MT_OK) return rc;
    if ((p.seen & 15) != 15) {
        mt_fmt(err, errlen, "shape needs E, N, K and topk");
        return MT_INVAL;
    }
    return krn_shape_check(s, err, errlen);
}

void krn_shape_format(const krn_shape_t *s, char *buf, size_t len) {
    int n = snprintf(buf, len, "E=%u,N=%u,K=%u,topk=%u", s->e, s->n, s->k, s->topk);
    if (n > 0 && (size_t)n < len && strcmp(s->dtype, "bf16") != 0)
        n += snprintf(buf + n, len - (size_t)n, ",dtype=%s", s->dtype);
    if (n > 0 && (size_t)n < len && s->block_n)
        snprintf(buf + n, len - (size_t)n, ",block_shape=%ux%u", s->block_n, s->block_k);
}

void krn_shape_name(const krn_shape_t *s, char *buf, size_t len) {
    int n = snprintf(buf, len, "E=%u,N=%u", s->e, s->n);
    if (n < 0 || (size_t)n >= len) return;
    if (strcmp(s->dtype, "bf16") != 0) n += snprintf(buf + n, len - n, ",dtype=%s", s->dtype);
    if (n < 0 || (size_t)n >= len) return;
    if (s->block_n) snprintf(buf + n, len - n, ",block_shape=[%u, %u]", s->block_n, s->block_k);
}
