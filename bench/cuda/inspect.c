/* inspect.c - compiles, for one architecture, the exact NVRTC images the cuda backend runs
 * for a list of configs (and the config-independent moe_common image), writes each cubin
 * and its full ptxas -v report to a folder, and prints per config: registers, spills,
 * stack, static and dynamic shared memory, CTAs per SM (from registers and shared memory)
 * and, for the shapes named, the expected number of live GEMM1/GEMM2 CTAs under uniform
 * routing against the SM count. Needs NVRTC, no GPU.
 *
 *   inspect OUT_DIR [CONFIG...]     CONFIG = BMxBNxBKxWxS (default: the winning configs
 *                                   of the CUDA run in docs/performance.md)
 *
 * Each image is compiled twice: once through wcu_compile_config (the backend's own path)
 * and once here with the same options, to keep the log; the two cubins must be
 * byte-identical, so the report describes the image the backend launches. */
#include <math.h>
#include <nvrtc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "kernel_sources.h"
#include "mt.h"
#include "space.h"

#define CC_MAJOR 9u
#define CC_MINOR 0u
#define SMS 132u /* H200 */
#define SM_REGS 65536u
#define SM_SMEM (228u * 1024u) /* per SM; each CTA also reserves 1 KiB */
#define SM_MAX_WARPS 64u
#define SM_MAX_CTAS 32u

typedef struct {
    const char *name;
    uint32_t e, n, k, topk;
} shape_t;

static const shape_t g_shapes[] = {
    {"qwen3-30b-a3b", 128, 768, 2048, 8},
    {"mixtral-8x7b-tp2", 8, 7168, 4096, 2},
};

/* The winning configs of the recorded CUDA run and the points where they won. */
typedef struct {
    const char *cfg;
    const char *where; /* "shape:M,M" list */
} winner_t;

static const winner_t g_winners[] = {
    {"16x32x128x4x4", "qwen3-30b-a3b:1 mixtral-8x7b-tp2:1"},
    {"16x64x64x4x4", "qwen3-30b-a3b:8"},
    {"16x128x64x4x3", "qwen3-30b-a3b:16"},
    {"32x256x64x8x3", "qwen3-30b-a3b:256 mixtral-8x7b-tp2:128"},
    {"64x128x64x4x3", "mixtral-8x7b-tp2:256"},
    {"128x256x64x8x4", "qwen3-30b-a3b:4096 mixtral-8x7b-tp2:4096"},
};

/* Compiles src with opts; fills *log (owned) and *cubin (owned). */
static int nvrtc_compile(const char *src, const char *name, const char **opts, int nopts, char **log,
                         unsigned char **cubin, size_t *cubin_size, char *err, size_t errlen) {
    nvrtcProgram prog = NULL;
    int rc = MT_ERR;
    size_t n = 0;
    *log = NULL;
    *cubin = NULL;
    if (nvrtcCreateProgram(&prog, src, name, 0, NULL, NULL) != NVRTC_SUCCESS) {
        mt_fmt(err, errlen, "nvrtcCreateProgram failed");
        return MT_ERR;
    }
    nvrtcResult cr = nvrtcCompileProgram(prog, nopts, opts);
    if (nvrtcGetProgramLogSize(prog, &n) == NVRTC_SUCCESS && (*log = calloc(1, n + 1)) != NULL)
        nvrtcGetProgramLog(prog, *log);
    if (cr != NVRTC_SUCCESS) {
        mt_fmt(err, errlen, "compile failed: %s", *log ? *log : nvrtcGetErrorString(cr));
        goto out;
    }
    if (nvrtcGetCUBINSize(prog, cubin_size) != NVRTC_SUCCESS || !(*cubin = malloc(*cubin_size)) ||
        nvrtcGetCUBIN(prog, (char *)*cubin) != NVRTC_SUCCESS) {
        mt_fmt(err, errlen, "no cubin");
        goto out;
    }
    rc = MT_OK;
out:
    nvrtcDestroyProgram(&prog);
    return rc;
}

static int write_file(const char *path, const void *data, size_t size) {
    FILE *f = fopen(path, "wb");
    if (!f) return MT_IO;
    size_t w = fwrite(data, 1, size, f);
    return fclose(f) == 0 && w == size ? MT_OK : MT_IO;
}

/* Writes DIR/NAME.cubin and DIR/NAME.ptxas.txt (the ptxas -v log); MT_IO with the file that
 * failed in path. */
static int save_image(const char *dir, const char *name, const unsigned char *cubin, size_t size, const char *log,
                      char *path, size_t pathlen) {
    mt_fmt(path, pathlen, "%s/%s.cubin", dir, name);
    if (write_file(path, cubin, size) != MT_OK) return MT_IO;
    mt_fmt(path, pathlen, "%s/%s.ptxas.txt", dir, name);
    return write_file(path, log, strlen(log));
}

/* One image compiled twice: here with the backend's options and -Xptxas=-v, to keep the
 * report, and through the backend (img), whose cubin must be the same bytes. */
typedef struct {
    char *log;            /* the ptxas -v report (owned) */
    unsigned char *cubin; /* owned */
    size_t size;
    wcu_image_t img;
} twin_t;

static void twin_clear(twin_t *t) {
    wcu_image_clear(&t->img);
    free(t->log);
    free(t->cubin);
}

/* Compiles src as name with the architecture, the n defines, --std=c++17 and -Xptxas=-v (the
 * backend's options in the backend's order, plus the report), and through the backend: the
 * config image of c, or moe_common when c is NULL. Checks the two cubins agree and saves the
 * image in dir. Prints what failed; t is the caller's to twin_clear either way. */
static int twin_build(const char *dir, const char *src, const char *name, const char *const *defines, int n,
                      const krn_config_t *c, twin_t *t) {
    char arch[48], err[512], path[4096];
    const char *opts[12];
    int nopts = 0;
    memset(t, 0, sizeof *t);
    mt_fmt(arch, sizeof arch, "--gpu-architecture=sm_%u%u", CC_MAJOR, CC_MINOR);
    opts[nopts++] = arch;
    for (int i = 0; i < n; i++) opts[nopts++] = defines[i];
    opts[nopts++] = "--std=c++17";
    opts[nopts++] = "-Xptxas=-v";
    if (nvrtc_compile(src, name, opts, nopts, &t->log, &t->cubin, &t->size, err, sizeof err) != MT_OK) {
        fprintf(stderr, "%s: %s\n", name, err);
        return MT_ERR;
    }
    int rc = c ? wcu_compile_config(c, CC_MAJOR, CC_MINOR, NULL, &t->img)
               : wcu_compile_common(CC_MAJOR, CC_MINOR, NULL, &t->img);
    if (rc != MT_OK) {
        fprintf(stderr, "%s: backend compile: %s\n", name, t->img.error);
        return MT_ERR;
    }
    if (t->img.cubin_size != t->size || memcmp(t->img.cubin, t->cubin, t->size) != 0) {
        fprintf(stderr, "%s: the backend's cubin differs from this compile (%zu vs %zu B)\n", name, t->img.cubin_size,
                t->size);
        return MT_ERR;
    }
    if (save_image(dir, name, t->cubin, t->size, t->log, path, sizeof path) != MT_OK) {
        fprintf(stderr, "cannot write %s\n", path);
        return MT_IO;
    }
    return MT_OK;
}

/* Sum over experts of E[ceil(X / bm)], X ~ Binomial(m, topk / e): the expected number of
 * BLOCK_M row blocks the align step produces under uniform routing. */
static double expected_row_blocks(const shape_t *s, uint32_t m, uint32_t bm) {
    double p = (double)s->topk / s->e, sum = 0.0;
    for (uint32_t x = 0; x <= m; x++) {
        double lp = lgamma(m + 1.0) - lgamma(x + 1.0) - lgamma(m - x + 1.0) + x * log(p) +
                    (m - x) * (p < 1.0 ? log1p(-p) : 0.0);
        sum += exp(lp) * ((x + bm - 1) / bm);
    }
    return sum * s->e;
}

/* "Used R registers, used B barriers, S bytes smem" of the ptxas log line for kernel. */
static void kernel_resources(const char *log, const char *kernel, unsigned *regs, unsigned *smem, unsigned *stack,
                             unsigned *spill) {
    *regs = *smem = *stack = *spill = 0;
    const char *p = log ? strstr(log, kernel) : NULL;
    if (!p) return;
    const char *sf = strstr(p, "bytes stack frame");
    const char *u = strstr(p, "Used ");
    if (sf) {
        const char *b = sf;
        while (b > p && b[-1] != ':' && b[-1] != '\n') b--;
        unsigned st = 0, ld = 0;
        sscanf(b, " %u bytes stack frame, %u bytes spill stores, %u bytes spill loads", stack, &st, &ld);
        *spill = st + ld;
    }
    if (u) {
        sscanf(u, "Used %u registers", regs);
        const char *sm = strstr(u, "bytes smem");
        const char *nl = strchr(u, '\n');
        if (sm && (!nl || sm < nl)) {
            const char *b = sm;
            while (b > u && b[-1] != ',') b--;
            sscanf(b, " %u", smem);
        }
    }
}

static int parse_cfg(const char *s, krn_config_t *c) {
    char tail;
    memset(c, 0, sizeof *c);
    c->group_m = 1;
    return sscanf(s, "%ux%ux%ux%ux%u%c", &c->block_m, &c->block_n, &c->block_k, &c->num_warps, &c->num_stages, &tail) ==
                   5
               ? MT_OK
               : MT_INVAL;
}

static const char *where_of(const char *cfg) {
    for (size_t i = 0; i < sizeof g_winners / sizeof g_winners[0]; i++)
        if (strcmp(g_winners[i].cfg, cfg) == 0) return g_winners[i].where;
    return "";
}

/* Prints the expected live CTAs of GEMM1/GEMM2 for each "shape:M" in where. */
static void print_grid(const krn_config_t *c, const char *where, unsigned ctas_per_sm) {
    char buf[256];
    mt_fmt(buf, sizeof buf, "%s", where);
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *colon = strchr(tok, ':');
        if (!colon) continue;
        *colon = '\0';
        unsigned m = (unsigned)atoi(colon + 1);
        for (size_t i = 0; i < sizeof g_shapes / sizeof g_shapes[0]; i++) {
            const shape_t *s = &g_shapes[i];
            if (strcmp(s->name, tok) != 0) continue;
            double rb = expected_row_blocks(s, m, c->block_m);
            double g1 = rb * (2.0 * s->n / c->block_n), g2 = rb * ((double)s->k / c->block_n);
            size_t numel = (size_t)m * s->topk, ne = numel < s->e ? numel : s->e;
            size_t em = numel + ne * (c->block_m - 1), pid_m = (em + c->block_m - 1) / c->block_m;
            unsigned slots = ctas_per_sm * SMS;
            printf("    %s M=%u: expected row blocks %.1f (%.0f%% of the MMA rows are real tokens); live CTAs GEMM1 "
                   "%.0f, GEMM2 %.0f (launched %zu, %zu); "
                   "%u resident slots -> waves %.2f, %.2f\n",
                   s->name, m, rb, 100.0 * (double)numel / (rb * c->block_m), g1, g2, pid_m * (2 * s->n / c->block_n),
                   pid_m * (s->k / c->block_n), slots, g1 / slots, g2 / slots);
        }
    }
}

static int inspect_config(const char *dir, const char *spec) {
    krn_config_t c;
    char o[6][48];
    if (parse_cfg(spec, &c) != MT_OK) {
        fprintf(stderr, "bad config '%s' (want BMxBNxBKxWxS)\n", spec);
        return MT_INVAL;
    }
    uint32_t wm = krn_warps_m(&c);
    mt_fmt(o[0], sizeof o[0], "-DBLOCK_M=%u", c.block_m);
    mt_fmt(o[1], sizeof o[1], "-DBLOCK_N=%u", c.block_n);
    mt_fmt(o[2], sizeof o[2], "-DBLOCK_K=%u", c.block_k);
    mt_fmt(o[3], sizeof o[3], "-DNUM_WARPS=%u", c.num_warps);
    mt_fmt(o[4], sizeof o[4], "-DNUM_STAGES=%u", c.num_stages);
    mt_fmt(o[5], sizeof o[5], "-DWARPS_M=%u", wm);
    const char *defines[6] = {o[0], o[1], o[2], o[3], o[4], o[5]};
    char name[64];
    mt_fmt(name, sizeof name, "moe_gemm_%ux%ux%u_w%u_s%u", c.block_m, c.block_n, c.block_k, c.num_warps, c.num_stages);
    twin_t t;
    int rc = twin_build(dir, krn_src_moe_gemm, name, defines, 6, &c, &t);
    if (rc != MT_OK) goto out;

    krn_shape_t shape;
    memset(&shape, 0, sizeof shape);
    uint32_t dyn = krn_smem_bytes(&c, &shape);
    printf("%s (warps %ux%u, warp tile %ux%u, %zu B cubin, identical to the backend's)\n", name, wm, c.num_warps / wm,
           c.block_m / wm, c.block_n / (c.num_warps / wm), t.size);
    unsigned worst = 0;
    for (int g = 1; g <= 2; g++) {
        unsigned regs, smem, stack, spill;
        char kn[16];
        mt_fmt(kn, sizeof kn, "moe_gemm%d", g);
        kernel_resources(t.log, kn, &regs, &smem, &stack, &spill);
        unsigned threads = c.num_warps * 32;
        unsigned warp_regs = (regs * 32 + 255) / 256 * 256;
        unsigned by_regs = regs ? SM_REGS / (warp_regs * c.num_warps) : 0;
        unsigned by_smem = SM_SMEM / (dyn + smem + 1024);
        unsigned by_warps = SM_MAX_WARPS / c.num_warps;
        unsigned ctas = by_regs;
        if (by_smem < ctas) ctas = by_smem;
        if (by_warps < ctas) ctas = by_warps;
        if (SM_MAX_CTAS < ctas) ctas = SM_MAX_CTAS;
        if (g == 1 || ctas < worst) worst = ctas;
        printf("  %s: %u threads, %u regs, stack %u B, spills %u B, smem %u static + %u dynamic B; "
               "CTAs/SM: regs %u, smem %u, warps %u -> %u (%u warps/SM)\n",
               kn, threads, regs, stack, spill, smem, dyn, by_regs, by_smem, by_warps, ctas, ctas * c.num_warps);
    }
    print_grid(&c, where_of(spec), worst);
out:
    twin_clear(&t);
    return rc;
}

static int inspect_common(const char *dir) {
    twin_t t;
    int rc = twin_build(dir, krn_src_moe_common, "moe_common", NULL, 0, NULL, &t);
    if (rc != MT_OK) goto out;
    printf("moe_common (%zu B cubin, identical to the backend's)\n", t.size);
    static const char *kernels[] = {"moe_align", "moe_topk_sum"};
    for (size_t i = 0; i < 2; i++) {
        unsigned regs, smem, stack, spill;
        kernel_resources(t.log, kernels[i], &regs, &smem, &stack, &spill);
        printf("  %s: %u regs, stack %u B, spills %u B, smem %u static B\n", kernels[i], regs, stack, spill, smem);
    }
out:
    twin_clear(&t);
    return rc;
}

int main(int argc, char **argv) {
    char err[256];
    int fails = 0, maj, min;
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: inspect OUT_DIR [BMxBNxBKxWxS...]\n");
        return MT_EXIT_USAGE;
    }
    if (mt_mkdirs(argv[1], err, sizeof err) != MT_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    wcu_nvrtc_version(&maj, &min);
    printf("# NVRTC %d.%d, sm_%u%u, %u SMs, %u regs and %u B shared memory per SM\n", maj, min, CC_MAJOR, CC_MINOR, SMS,
           SM_REGS, SM_SMEM);
    fails += inspect_common(argv[1]) != MT_OK;
    if (argc > 2) {
        for (int i = 2; i < argc; i++) fails += inspect_config(argv[1], argv[i]) != MT_OK;
    } else {
        for (size_t i = 0; i < sizeof g_winners / sizeof g_winners[0]; i++)
            fails += inspect_config(argv[1], g_winners[i].cfg) != MT_OK;
    }
    return fails ? 1 : 0;
}
