/*
 * sim.h - the simulated GPU behind the `sim` backend (wrk_backend_sim).
 *
 * The sim backend answers measure() with a deterministic roofline-style model of
 * one fused-MoE layer plus seeded noise, so the whole system (planning, leases,
 * storage, merge, export) runs and is tested without a GPU. Its numbers are marked
 * simulated everywhere (compiler "sim"). This header exposes the model and the
 * fault-spec parser for tests; the daemon only uses the backend table.
 */
#ifndef WRK_SIM_H
#define WRK_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "mt.h"
#include "space.h"

#define WRK_SIM_MAX_FAULTS 16

/* Parsed --sim-faults SPEC. Config lists hold exact configs
 * ("BMxBNxBKxGMxWxS": BLOCK_SIZE_M, _N, _K, GROUP_SIZE_M, num_warps, num_stages). */
typedef struct {
    krn_config_t crash[WRK_SIM_MAX_FAULTS]; /* the child dies (SIGSEGV) on these */
    size_t n_crash;
    krn_config_t hang[WRK_SIM_MAX_FAULTS]; /* the child sleeps forever on these */
    size_t n_hang;
    krn_config_t wrong[WRK_SIM_MAX_FAULTS]; /* status WRONG_RESULT */
    size_t n_wrong;
    double crash_rate;      /* probability a config kills the child */
    uint32_t slow_start_ms; /* open() sleeps this long */
    double slowdown;        /* every latency times this (a simulated driver or
                                               toolkit regression); 0 = 1 */
    struct {                /* speed=CFG@M:X: that config's latency at batch size M (0: every) times X */
        krn_config_t cfg;
        uint32_t m;
        double factor;
    } speed[WRK_SIM_MAX_FAULTS];
    size_t n_speed;
} wrk_sim_faults_t;

/* The backend itself; found by wrk_backend_find("sim"). */
extern const wrk_backend_ops_t wrk_backend_sim;

/* Parses SPEC ("crash=64x128x64x1x4x3,wrong=...,crash_rate=0.01,hang=...,
 * slow_start_ms=500,slowdown=1.25,speed=64x64x32x8x4x3@256:0.8"; NULL or "" = no faults; speed
 * plants a config faster or slower at one batch size, M 0 or '*' at every one) into out. Returns MT_OK, MT_NOMEM, or
 * MT_INVAL with a one-line reason in err. */
mt_status_t wrk_sim_faults_parse(const char *spec, wrk_sim_faults_t *out, char *err, size_t errlen);

/* The simulated compiler of one worker, as the cuda and triton backends compile: a config
 * announced ahead (prepare: a job's configs when it starts) compiles on the first free of
 * WRK_SIM_POOL threads while the GPU measures others; one not announced compiles when
 * measured, in the measuring process; the last WRK_SIM_COMPILED stay compiled (the backends'
 * caches). Keys name (shape, config); times are microseconds of CLOCK_MONOTONIC. */
#define WRK_SIM_POOL 15 /* the cuda backend's pool on the 16-core H200 host: cores - 1 */
#define WRK_SIM_COMPILED 64
typedef struct {
    uint64_t key[WRK_SIM_COMPILED];      /* announced or compiled, a ring */
    uint64_t ready_us[WRK_SIM_COMPILED]; /* when each is (or was) compiled */
    size_t n;
    uint64_t free_us[WRK_SIM_POOL]; /* when each compile thread is next free */
} wrk_sim_compiler_t;

/* Announces key at now_us: unless it is known, it compiles for compile_us on the thread that
 * is free first, from when it is free (now_us at the earliest). */
void wrk_sim_compile_ahead(wrk_sim_compiler_t *c, uint64_t key, uint64_t now_us, uint64_t compile_us);

/* What measuring key at now_us waits for its compile, microseconds: what is left of an
 * announced compile (at most compile_us: the measuring process would compile it itself), 0
 * when compiled, compile_us when never announced. key is compiled after. */
uint64_t wrk_sim_compile_wait_us(wrk_sim_compiler_t *c, uint64_t key, uint64_t now_us, uint64_t compile_us);

/* Parses "BMxBNxBKxGMxWxS" into cfg; MT_INVAL when malformed. */
mt_status_t wrk_sim_config_parse(const char *text, krn_config_t *cfg);

/* Noise-free simulated latency in microseconds of one MoE layer for shape, cfg and
 * batch size m on the default simulated device (H200). Valid configs only
 * (krn_check passes); returns a positive finite number. */
double wrk_sim_latency_us(const krn_shape_t *shape, const krn_config_t *cfg, uint32_t m);

/* Whether the crash_rate draw kills the child for this config in this process:
 * seeded by (seed, shape, cfg, pid), so a retry in another process (a new child or
 * another worker) draws again and can succeed, while the same process is
 * deterministic. */
int wrk_sim_crash_draw(const wrk_sim_faults_t *faults, uint64_t seed, const krn_shape_t *shape, const krn_config_t *cfg,
                       uint32_t pid);

#endif
