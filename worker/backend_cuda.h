/*
 * backend_cuda.h - the CUDA backend's compile side (NVRTC, no GPU needed) and its
 * measuring entry points, shared by the backend, its CI test, the GPU tests and the
 * benchmark. Built only with the CUDA toolkit (MT_HAVE_CUDA).
 *
 * Prefix wcu_. A compiled image (wcu_image_t) owns its cubin bytes; free it with
 * wcu_image_clear().
 */
#ifndef WCU_BACKEND_CUDA_H
#define WCU_BACKEND_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "mt.h"
#include "space.h"

/* Result statuses, equal to the proto's Moetune__Status values (checked by test_nvrtc). */
enum {
    WCU_ST_OK = 1,
    WCU_ST_INVALID = 2,
    WCU_ST_COMPILE_ERROR = 3,
    WCU_ST_LAUNCH_ERROR = 4,
    WCU_ST_WRONG_RESULT = 5,
    WCU_ST_TIMEOUT = 6,
    WCU_ST_CRASHED = 7,
    WCU_ST_PRUNED = 8,
};

typedef struct {
    int ok;               /* 1 compiled, 0 failed (reason in error) */
    unsigned char *cubin; /* owned */
    size_t cubin_size;
    uint32_t regs;        /* max registers per thread over the image's kernels */
    uint32_t spill_bytes; /* spill stores + loads over the image's kernels, bytes */
    int from_cache;       /* 1 when read from the disk cache */
    double compile_s;
    char error[200]; /* NVRTC's first error line, or the failing call */
} wcu_image_t;

/* The NVRTC library version. */
void wcu_nvrtc_version(int *major, int *minor);

/* Hash of the embedded kernel sources, 16 hex digits into buf. */
void wcu_kernel_hash(char *buf, size_t len);

/* Compiles the per-config GEMM image (kernels/moe_gemm.cu) for sm_<cc_major><cc_minor>
 * with cfg's compile-time constants (GROUP_SIZE_M is a run-time argument and does not
 * matter). cache_dir, when not NULL, is read first and written atomically after a
 * compile. img is filled in every case; returns MT_OK when img->ok. Thread-safe. */
mt_status_t wcu_compile_config(const krn_config_t *cfg, uint32_t cc_major, uint32_t cc_minor, const char *cache_dir,
                               wcu_image_t *img);

/* Compiles the config-independent image (kernels/moe_common.cu: align, top-k sum,
 * input generation, reference). Same contract as wcu_compile_config. */
mt_status_t wcu_compile_common(uint32_t cc_major, uint32_t cc_minor, const char *cache_dir, wcu_image_t *img);

/* Frees the image's bytes and zeroes it. NULL-safe. */
void wcu_image_clear(wcu_image_t *img);

/* The default compiled-image cache directory ($XDG_CACHE_HOME/moetune or
 * ~/.cache/moetune) into buf. */
void wcu_default_cache_dir(char *buf, size_t len);

/* The config-space point that decides the compiled image (group_m set to 1). */
krn_config_t wcu_image_key(const krn_config_t *cfg);

/* Fault, hang and wrong-result injection from MOETUNE_CUDA_INJECT
 * ("fault:BMxBNxBKxGMxWxS,hang:...,wrong:..."): 1 when cfg should fault, 2 when it should hang,
 * 3 when its layer should be 5 % off, 0 otherwise. */
int wcu_inject_for(const krn_config_t *cfg);

/* The reference layer's tiles (kernels/moe_common.cu, RT_ROWS): the slots of ids[numel] (each
 * an expert below e_count) grouped by expert, each expert's slots in order and padded with -1
 * to a multiple of WCU_REF_ROWS, into rows; each tile's expert into tile_e. rows needs room for
 * numel + e_count * (WCU_REF_ROWS - 1) entries, tile_e for a WCU_REF_ROWS-th of that. Returns
 * the tile count. */
#define WCU_REF_ROWS 32
size_t wcu_ref_tiles(const int *ids, size_t numel, uint32_t e_count, int *rows, int *tile_e);

/* The backend table (worker/backend_cuda.c). */
extern const wrk_backend_ops_t wrk_backend_cuda;

#endif
