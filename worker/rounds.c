/* rounds.c - folding a side-by-side job's rounds into one measurement per batch size. */
#include "rounds.h"

#include <math.h>
#include <string.h>

#include "moetune.pb-c.h"
#include "mt.h"

static bool is_ok(const wrk_meas_t *m) { return m->status == MOETUNE__STATUS__STATUS_OK; }

/* b folded into a: both OK. */
static void pool(wrk_meas_t *a, const wrk_meas_t *b) {
    double na = a->samples, nb = b->samples, n = na + nb;
    if (n <= 0) return;
    double mean = (a->mean_us * na + b->mean_us * nb) / n;
    /* sums of squared deviations of each round, about the pooled mean */
    double ssa = (na > 1 ? (na - 1) * a->stddev_us * a->stddev_us : 0) + na * (a->mean_us - mean) * (a->mean_us - mean);
    double ssb = (nb > 1 ? (nb - 1) * b->stddev_us * b->stddev_us : 0) + nb * (b->mean_us - mean) * (b->mean_us - mean);
    a->mean_us = mean;
    a->stddev_us = n > 1 ? sqrt((ssa + ssb) / (n - 1)) : 0;
    a->samples += b->samples;
    if (b->min_us < a->min_us) a->min_us = b->min_us;
    if (b->median_us < a->median_us) {
        a->median_us = b->median_us;
        a->up_us = b->up_us;
        a->down_us = b->down_us;
        memcpy(a->detail, b->detail, sizeof a->detail);
    }
}

void wrk_rounds_merge(wrk_meas_t *kept, const wrk_meas_t *round, size_t n, bool first) {
    for (size_t i = 0; i < n; i++) {
        wrk_meas_t *k = &kept[i];
        const wrk_meas_t *r = &round[i];
        if (first) {
            *k = *r;
            continue;
        }
        double timed = k->timed_us + r->timed_us;
        if (!is_ok(k)) {
            /* failed before: stays failed */
        } else if (!is_ok(r)) {
            *k = *r;
        } else {
            pool(k, r);
        }
        k->timed_us = timed;
    }
}

void wrk_rounds_note(wrk_meas_t *m, const double *round_us, size_t n_rounds) {
    if (!is_ok(m)) return;
    for (size_t i = 0; i < n_rounds; i++) {
        size_t len = strlen(m->detail);
        const char *sep = i ? " " : len ? "; rounds " : "rounds ";
        mt_fmt(m->detail + len, sizeof m->detail - len, "%s%.5g", sep, round_us[i]);
    }
}

bool wrk_rounds_settled(const wrk_meas_t *kept, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (is_ok(&kept[i])) return false;
    return true;
}
