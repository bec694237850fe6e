/* wcase.h - one measurement through the worker's child as test_worker_child.c and
 * test_worker_triton.c run it: a case's shape, config, settings and answers. Header-only:
 * the support library is built without the worker's headers, the tests that use it with. */
#ifndef WCASE_H
#define WCASE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "child.h"
#include "mt.h"

typedef struct {
    krn_shape_t s;
    krn_config_t cfg;
    wrk_measure_t m;
    wrk_meas_t out[3];
    uint32_t regs, spills;
    char err[256];
} wcase_t;

/* A case of config cfg on E=128,N=768,K=2048,topk=8, measured with 5 to 30 samples to a 1 %
 * RSD and seed 5; every other field zero. */
static inline void wcase_init(wcase_t *k, krn_config_t cfg) {
    char err[128];
    memset(k, 0, sizeof *k);
    assert_int_equal(krn_shape_parse("E=128,N=768,K=2048,topk=8", &k->s, err, sizeof err), MT_OK);
    k->cfg = cfg;
    k->m.min_samples = 5;
    k->m.max_samples = 30;
    k->m.rsd_target = 0.01;
    k->m.seed = 5;
}

/* Measures k->cfg at the batch sizes bs[0, n) on c into k->out, k->regs, k->spills and
 * k->err; wrk_child_measure's code. */
static inline int wcase_measure(wrk_child_t *c, wcase_t *k, const uint32_t *bs, size_t n) {
    return wrk_child_measure(c, &k->s, &k->cfg, bs, n, &k->m, k->out, &k->regs, &k->spills, k->err, sizeof k->err);
}

#endif
