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
} wrk_sim_faults_t;

/* The backend itself; found by wrk_backend_find("sim"). */
extern const wrk_backend_ops_t wrk_backend_sim;

/* Parses SPEC ("crash=64x128x64x1x4x3,wrong=...,crash_rate=0.01,hang=...,
 * slow_start_ms=500,slowdown=1.25"; NULL or "" = no faults) into out. Returns MT_OK, MT_NOMEM, or
 * MT_INVAL with a one-line reason in err. */
mt_status_t wrk_sim_faults_parse(const char *spec, wrk_sim_faults_t *out, char *err, size_t errlen);

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
