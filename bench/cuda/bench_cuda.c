/* bench_cuda.c - best tuned fused-MoE layer latency per batch size on one GPU, from a
 * reduced sweep, next to the frameworks' default config and the floor
 * max(touched expert weight bytes / copy bandwidth, FLOPs / bf16 GEMM rate).
 *
 *   bench_cuda COPY_GBPS GEMM_TFLOPS [SHAPE...]
 *
 * COPY_GBPS (read + write bytes per second of a large device copy, in GB/s) and
 * GEMM_TFLOPS (a large bf16 cuBLAS matrix product) are measured by bench/cuda/run.sh in
 * the same run. The reduced sweep: BLOCK_M within a factor of the tokens per expert,
 * BLOCK_N {32,64,128,256}, BLOCK_K {64,128}, warps {4,8}, stages {3,4}, GROUP {1,16}. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_cuda.h"
#include "mt.h"

static const uint32_t g_bs[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
#define N_BS (sizeof g_bs / sizeof g_bs[0])

static uint32_t pow2_ceil(double v) {
    uint32_t p = 1;
    while (p < v) p *= 2;
    return p;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: bench_cuda COPY_GBPS GEMM_TFLOPS [SHAPE...]\n");
        return 2;
    }
    double copy_gbps = atof(argv[1]), gemm_tflops = atof(argv[2]);
    const char *def_shapes[] = {"E=128,N=768,K=2048,topk=8", "E=8,N=7168,K=4096,topk=2"};
    const char **shapes = argc > 3 ? (const char **)argv + 3 : def_shapes;
    int n_shapes = argc > 3 ? argc - 3 : 2;
    wrk_backend_opts_t opts = {.gpu_index = 0};
    void *st = NULL;
    wrk_device_t dev;
    char err[256];
    if (wrk_backend_cuda.open(&opts, &st, &dev, err, sizeof err) != MT_OK) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    printf("# %s, %u SMs, driver %s, CUDA %s, %s, kernels %s; copy %.0f GB/s (r+w), bf16 GEMM %.0f TFLOP/s\n", dev.name,
           dev.sm_count, dev.driver_version, dev.cuda_version, dev.compiler, dev.kernel_hash, copy_gbps, gemm_tflops);
    /* Weight streaming reads only: a copy moves read + write bytes, so read bandwidth ~ copy_gbps. */
    double bw = copy_gbps * 1e9;
    krn_limits_t lim;
    krn_limits_default(&lim);
    lim.smem_per_block = dev.smem_per_block;
    wrk_measure_t m = {.warmup = 2,
                       .min_samples = 5,
                       .max_samples = 40,
                       .rsd_target = 0.02,
                       .budget_ms = 400,
                       .timeout_ms = 20000,
                       .seed = 7};
    for (int si = 0; si < n_shapes; si++) {
        krn_shape_t s;
        if (krn_shape_parse(shapes[si], &s, err, sizeof err) != MT_OK) {
            fprintf(stderr, "%s: %s\n", shapes[si], err);
            return 2;
        }
        printf("\n## %s\n| M | best config (BMxBNxBK g w s) | best us | default config | default us | floor us | "
               "floor/best | bound | best TFLOP/s |\n|---|---|---|---|---|---|---|---|---|\n",
               shapes[si]);
        for (size_t bi = 0; bi < N_BS; bi++) {
            uint32_t M = g_bs[bi];
            double t = (double)M * s.topk / s.e;
            uint32_t hi = pow2_ceil(t) * 2, lo = pow2_ceil(t) / 4;
            if (hi < 16) hi = 16;
            if (hi > 256) hi = 256;
            if (lo < 16) lo = 16;
            if (lo > 128) lo = 128;
            static const uint32_t bns[] = {32, 64, 128, 256}, bks[] = {64, 128}, nws[] = {4, 8}, nss[] = {3, 4},
                                  gms[] = {1, 16};
            krn_config_t cands[1024];
            size_t nc = 0;
            for (uint32_t bm = lo; bm <= hi; bm *= 2)
                for (int a = 0; a < 4; a++)
                    for (int b = 0; b < 2; b++)
                        for (int c = 0; c < 2; c++)
                            for (int d = 0; d < 2; d++)
                                for (int g = 0; g < 2; g++) {
                                    krn_config_t cf = {bm, bns[a], bks[b], gms[g], nws[c], nss[d]};
                                    char why[160];
                                    if (krn_check(&s, &cf, &lim, why, sizeof why) == MT_OK && nc < 1024)
                                        cands[nc++] = cf;
                                }
            krn_config_t dflt = M <= s.e ? (krn_config_t){16, 32, 64, 1, 4, 3} : (krn_config_t){64, 64, 32, 8, 4, 3};
            wrk_backend_cuda.prepare(st, &s, cands, nc);
            double best = INFINITY, dus = NAN;
            krn_config_t bc = {0};
            uint32_t regs, spills;
            wrk_meas_t out;
            for (size_t i = 0; i < nc; i++) {
                if (wrk_backend_cuda.measure(st, &s, &cands[i], &M, 1, &m, &out, &regs, &spills, err, sizeof err) !=
                    MT_OK) {
                    fprintf(stderr, "backend lost: %s\n", err);
                    return 1;
                }
                if (out.status == WCU_ST_OK && out.median_us < best) {
                    best = out.median_us;
                    bc = cands[i];
                }
            }
            if (wrk_backend_cuda.measure(st, &s, &dflt, &M, 1, &m, &out, &regs, &spills, err, sizeof err) != MT_OK) {
                fprintf(stderr, "backend lost: %s\n", err);
                return 1;
            }
            if (out.status == WCU_ST_OK) dus = out.median_us;
            /* Expected distinct experts under uniform routing. */
            double touched = s.e * (1.0 - pow(1.0 - (double)s.topk / s.e, M));
            double wbytes = touched * 3.0 * s.n * s.k * 2.0;
            double flops = 2.0 * M * s.topk * 3.0 * s.n * s.k;
            double t_mem = wbytes / bw * 1e6, t_fl = flops / (gemm_tflops * 1e12) * 1e6;
            double floor_us = t_mem > t_fl ? t_mem : t_fl;
            printf("| %u | %ux%ux%u g%u w%u s%u | %.2f | %ux%ux%u g%u | %.2f | %.2f | %.0f%% | %s | %.0f |\n", M,
                   bc.block_m, bc.block_n, bc.block_k, bc.group_m, bc.num_warps, bc.num_stages, best, dflt.block_m,
                   dflt.block_n, dflt.block_k, dflt.group_m, dus, floor_us, 100.0 * floor_us / best,
                   t_mem > t_fl ? "mem" : "flops", flops / best * 1e-6);
        }
    }
    wrk_backend_cuda.close(&st);
    return 0;
}
