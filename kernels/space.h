/*
 * space.h - the fused-MoE config space and its static validity rules.
 *
 * A config is (BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps,
 * num_stages). The rules say, before anything is compiled, whether a config can
 * run for a shape on a device, and if not, why. The planner, the sim backend and
 * the CUDA backend all use these same rules.
 */
#ifndef KRN_SPACE_H
#define KRN_SPACE_H

#include <stddef.h>
#include <stdint.h>

#include "mt.h"

typedef struct {
    uint32_t e, n, k, topk;    /* experts, intermediate/TP, hidden, experts per token */
    char dtype[16];            /* "bf16" (default), "fp8_w8a8" */
    uint32_t block_n, block_k; /* fp8 block-scale shape; 0 when none */
    char routing[65];          /* sha256 of the captured routing the inputs draw from; "" = uniform */
} krn_shape_t;

/* The integer fields of a shape, named as in krn_shape_t and the wire's Shape. */
#define KRN_SHAPE_INTS(X) X(e) X(n) X(k) X(topk) X(block_n) X(block_k)

/* The six fields of a config, in their one order (the engines' files, the wire, the
 * configs columns, the text form): X(field, file key, option, max). field is the name of
 * the krn_config_t member, the Moetune__Config and Moetune__Space fields, the configs
 * column and the spec's "space" key; file key is the engines' JSON key; option is the
 * CLI's list option (--block-m). Every value is in 1..max: the bounds a worker accepts in
 * a Job, and so those a spec and a plan take. 32 warps are CUDA's 1024 threads per block;
 * 1024 is past any tile that fits shared memory; 16 stages past any pipeline in use. */
#define KRN_CONFIG_FIELDS(X)                                                                                           \
    X(block_m, "BLOCK_SIZE_M", "block-m", 1024)                                                                        \
    X(block_n, "BLOCK_SIZE_N", "block-n", 1024)                                                                        \
    X(block_k, "BLOCK_SIZE_K", "block-k", 1024)                                                                        \
    X(group_m, "GROUP_SIZE_M", "group-m", 1024)                                                                        \
    X(num_warps, "num_warps", "num-warps", 32)                                                                         \
    X(num_stages, "num_stages", "num-stages", 16)

typedef struct {
#define KRN_X_MEMBER(f, file, opt, max) uint32_t f;
    KRN_CONFIG_FIELDS(KRN_X_MEMBER)
#undef KRN_X_MEMBER
} krn_config_t;

/* The fields' indexes: KRN_F_block_m .. KRN_F_num_stages, KRN_N_FIELDS. */
enum {
#define KRN_X_INDEX(f, file, opt, max) KRN_F_##f,
    KRN_CONFIG_FIELDS(KRN_X_INDEX)
#undef KRN_X_INDEX
        KRN_N_FIELDS
};

/* One row of KRN_CONFIG_FIELDS for code that walks the fields. */
typedef struct {
    const char *name;   /* "block_m" */
    const char *file;   /* "BLOCK_SIZE_M" */
    const char *option; /* "block-m" */
    uint32_t max;       /* values are 1..max */
    size_t off;         /* offsetof(krn_config_t, field) */
} krn_config_field_t;
extern const krn_config_field_t krn_config_fields[KRN_N_FIELDS];

/* Field i of c (krn_config_fields[i]). */
#define KRN_CONFIG_AT(c, i) (*(uint32_t *)((char *)(c) + krn_config_fields[i].off))
#define KRN_CONFIG_GET(c, i) (*(const uint32_t *)((const char *)(c) + krn_config_fields[i].off))

/* The config's text form: "BMxBNxBKxGMxWxS" (64x128x64x1x4x3), the fields in table order.
 * krn_config_format writes it into buf (KRN_CONFIG_TEXT_LEN is enough) and returns buf;
 * krn_config_parse reads exactly six decimal values, each in its field's 1..max, and returns
 * MT_INVAL for anything else (cfg is then unchanged). */
#define KRN_CONFIG_TEXT_LEN 48
/* The index (KRN_F_*) of c's first field outside 1..its max, or -1 when every field is in
 * bounds: the one bounds check of a config (text, wire and listed spaces). */
int krn_config_bad_field(const krn_config_t *cfg);
char *krn_config_format(const krn_config_t *cfg, char *buf, size_t len);
mt_status_t krn_config_parse(const char *text, krn_config_t *cfg);

/* What a device allows; krn_limits_default() gives Hopper (sm_90) values. */
typedef struct {
    uint32_t smem_per_block;  /* opt-in maximum shared memory per block, bytes */
    uint32_t regs_per_thread; /* architectural maximum registers per thread */
    uint32_t cc_major, cc_minor;
} krn_limits_t;

/* The value lists of a space, one per field (KRN_F_*); each at most KRN_MAX_VALUES long.
 * A space of n_list > 0 is instead exactly list[0..n_list) (the lists are unused): the few
 * configs a re-measure takes side by side. */
#define KRN_MAX_VALUES 16
#define KRN_MAX_LIST 64
typedef struct {
    uint32_t values[KRN_N_FIELDS][KRN_MAX_VALUES];
    uint32_t n[KRN_N_FIELDS];
    krn_config_t list[KRN_MAX_LIST];
    uint32_t n_list;
} krn_space_t;

/* The default space the serving frameworks tune (1920 configs). */
void krn_space_default(krn_space_t *space);
/* Number of configs in the space (product of the list lengths, or n_list). */
size_t krn_space_size(const krn_space_t *space);
/* The i-th config of the space, 0 <= i < krn_space_size(), in a fixed order. */
void krn_space_at(const krn_space_t *space, size_t i, krn_config_t *out);

/* The default 18 batch sizes the engines' files carry. */
extern const uint32_t krn_default_batch_sizes[];
extern const size_t krn_n_default_batch_sizes;

/* Hopper limits: 227 KiB shared memory per block, 255 registers per thread. */
void krn_limits_default(krn_limits_t *limits);

/* Shared memory in bytes the CUDA kernel needs for cfg (the pipeline's A and B
 * tiles times num_stages). */
uint32_t krn_smem_bytes(const krn_config_t *cfg, const krn_shape_t *shape);

/* How the CUDA kernel splits a BLOCK_M x BLOCK_N tile among num_warps warps: the number
 * of warps along M (the rest go along N), chosen so every warp holds whole 16x8 MMA tiles
 * and the warp tile is as square as possible. Returns 0 when no split fits. */
uint32_t krn_warps_m(const krn_config_t *cfg);

/* A GEMM's time t (any unit) with the two costs of its shape that the sim's roofline and
 * the coordinator's order model share: pipeline stages beyond the K loop's red / block_k
 * iterations are a wasted prologue, and a partial last wave of ctas CTAs over slots
 * concurrent ones idles part of the machine. */
double krn_time_penalized(const krn_config_t *cfg, double t, double red, double ctas, double slots);

/* Checks cfg for shape on a device with limits. Returns MT_OK when it can run,
 * else MT_INVAL with a one-line reason in why (e.g. "shared memory 294912 B >
 * 232448 B limit"). */
mt_status_t krn_check(const krn_shape_t *shape, const krn_config_t *cfg, const krn_limits_t *limits, char *why,
                      size_t whylen);

/* The static rules for a Triton kernel on no device in particular: only what no Triton MoE kernel
 * can run (block sizes not powers of two or below 16, warps not a power of two up to 32, i.e. at
 * most 1024 threads, stages outside 1..8, GROUP_SIZE_M 0). Triton masks the tails, so there is no
 * divisibility rule. */
mt_status_t krn_check_triton(const krn_config_t *c, char *why, size_t whylen);

/* The least shared memory in bytes Triton 3.6 allocates for cfg's K-loop pipeline on a device of
 * limits' compute capability: buffers x (BLOCK_M x BLOCK_K + BLOCK_K x BLOCK_N) x element size.
 * The pipeliner keeps num_stages - 1 buffers of each operand, and num_stages where the dot is a
 * Hopper warpgroup MMA (sm_90, bf16, BLOCK_SIZE_M a multiple of 64, num_warps a multiple of 4).
 * 0 where nothing is certain: one stage, or a hidden size K not a multiple of 16 (Triton may then
 * load an operand without staging it in shared memory). Triton's own figure (OutOfResources'
 * Required) is at least this: the rule never refuses a config Triton can run. */
uint32_t krn_triton_smem_floor(const krn_shape_t *shape, const krn_config_t *cfg, const krn_limits_t *limits);

/* Triton's static rules on a device of limits (the triton backend, and the sim standing in for
 * it): krn_check_triton's, then the shared memory krn_triton_smem_floor says the config needs
 * must fit limits->smem_per_block. limits NULL: krn_check_triton's alone. MT_INVAL with a one-line
 * reason in why ("Triton needs at least 245760 B of shared memory > 232448 B per block on sm_90"). Registers
 * are no rule: Triton bounds them by the block's threads and spills the rest, it never refuses. */
mt_status_t krn_check_triton_on(const krn_shape_t *shape, const krn_config_t *cfg, const krn_limits_t *limits,
                                char *why, size_t whylen);

/* What a sim worker standing in for a Triton kernel puts in its Hello's versions: the planner
 * then plans its sweeps with Triton's rules. */
#define KRN_SIM_TRITON "sim=triton"

/* A device the static rules know by name, for planning without one at hand (bench, tests). */
typedef struct {
    const char *key;  /* "sm_90" */
    const char *name; /* "H100/H200 (sm_90)" */
    krn_limits_t limits;
} krn_device_t;
extern const krn_device_t krn_devices[];
extern const size_t krn_n_devices;
/* The device of krn_devices named key; NULL when none is. */
const krn_device_t *krn_device_find(const char *key);

/* Whether engine ("sglang" or "vllm") can run cfg on shape's fp8 block scales, by the rule its
 * own tuner prunes with (docs/engines.md): SGLang keeps BLOCK_SIZE_K that divide block_k; vLLM keeps
 * BLOCK_SIZE_K and BLOCK_SIZE_N that are multiples of block_k and block_n. A shape without a
 * block shape, or an engine of another name, keeps everything. MT_INVAL with the rule in why
 * when the engine cannot run it. */
mt_status_t krn_engine_keeps(const char *engine, const krn_shape_t *shape, const krn_config_t *cfg, char *why,
                             size_t whylen);

/* The bounds of a shape: E up to KRN_MAX_E experts, N and K up to KRN_MAX_NK, topk up to
 * KRN_MAX_TOPK (and E). The wire, the routing files and the shape parser check these. */
#define KRN_MAX_E 65536u
#define KRN_MAX_NK 1048576u
#define KRN_MAX_TOPK 64u
#define KRN_MAX_BLOCK_SCALE 65536u /* each side of an fp8 block_shape */

/* Parses "E=128,N=768,K=2048,topk=8[,dtype=bf16][,block_shape=128x128]" into shape.
 * Returns MT_INVAL with a reason in err on a malformed or out-of-range field. */
mt_status_t krn_shape_parse(const char *text, krn_shape_t *shape, char *err, size_t errlen);

/* Checks a shape's ranges (all sizes > 0, topk <= E, known dtype). */
mt_status_t krn_shape_check(const krn_shape_t *shape, char *err, size_t errlen);

/* Formats the shape as krn_shape_parse reads it (what --shape takes):
 * "E=128,N=768,K=2048,topk=8" plus ",dtype=fp8_w8a8" and ",block_shape=128x128" when set. */
void krn_shape_format(const krn_shape_t *shape, char *buf, size_t len);

/* Formats the shape the way config files name it, without device:
 * "E=128,N=768" plus ",dtype=fp8_w8a8" and ",block_shape=[128, 128]" when set. */
void krn_shape_name(const krn_shape_t *shape, char *buf, size_t len);

#endif
