/* eta.c - the time a sweep has left (see eta.h). */
#include "eta.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "mt.h"

#define ETA_CHUNK_SHARE 0.005   /* a chunk: this share of the plan ... */
#define ETA_CHUNK_MIN 8         /* ... and at least this many results */
#define ETA_HALF_LIFE 0.25      /* a chunk's weight halves per this share of the plan since it */
#define ETA_TAU_S 30.0          /* time constant of the move toward a new estimate */
#define ETA_MAX_STEP 0.15       /* at most this share of itself per snapshot ... */
#define ETA_MAX_STEP_PER_S 0.03 /* ... and per second between snapshots */
#define ETA_SHARE_AHEAD 0.3     /* the pruned share ahead: at most this much above the recent one */

typedef struct {
    double cost;  /* seconds per result */
    double share; /* pruned share */
    double x;     /* progress (done / planned) at its middle */
    double n;     /* results */
} chunk_t;

struct cli_eta {
    bool started, have_eta;
    bool measured; /* the ETA comes from chunks, not from the provisional life-so-far guess */
    double c_t;    /* where the open chunk began */
    uint64_t c_done, c_pruned;
    chunk_t *chunks;
    size_t n, cap;
    double eta, t_last;
};

mt_status_t cli_eta_new(cli_eta_t **out) {
    *out = mt_calloc(1, sizeof **out);
    return *out ? MT_OK : MT_NOMEM;
}

void cli_eta_destroy(cli_eta_t **e) {
    if (!e || !*e) return;
    free((*e)->chunks);
    free(*e);
    *e = NULL;
}

double cli_eta_once(const cli_eta_sample_t *s) {
    if (s->planned && s->done >= s->planned) return 0.0;
    double left = (double)(s->planned - (s->done < s->planned ? s->done : s->planned));
    if (s->created_s && s->done && s->wall_s > (double)s->created_s)
        return left * (s->wall_s - (double)s->created_s) / (double)s->done;
    return s->rate > 0 ? left / s->rate : -1.0;
}

/* Weighted least squares of y on x over the chunks: slope and value at x0. False when
 * the x do not spread. */
static bool fit(const chunk_t *c, const double *w, size_t n, double (*xf)(const chunk_t *),
                double (*yf)(const chunk_t *), double x0, double *at, double *slope) {
    double sw = 0, sx = 0, sy = 0;
    for (size_t i = 0; i < n; i++) {
        sw += w[i];
        sx += w[i] * xf(&c[i]);
        sy += w[i] * yf(&c[i]);
    }
    if (sw <= 0) return false;
    double mx = sx / sw, my = sy / sw, sxx = 0, sxy = 0;
    for (size_t i = 0; i < n; i++) {
        double dx = xf(&c[i]) - mx;
        sxx += w[i] * dx * dx;
        sxy += w[i] * dx * (yf(&c[i]) - my);
    }
    *slope = 0.0;
    *at = my;
    if (n < 3 || sxx / sw < 1e-6) return false;
    *slope = sxy / sxx;
    *at = my + *slope * (x0 - mx);
    return true;
}

static double ch_x(const chunk_t *c) { return c->x; }
static double ch_share(const chunk_t *c) { return c->share; }
static double ch_cost(const chunk_t *c) { return c->cost; }

/* Seconds left by the chunks, or -1 when there are none. */
static double from_chunks(const cli_eta_t *e, const cli_eta_sample_t *s) {
    if (e->n == 0) return -1.0;
    double x = (double)s->done / (double)s->planned;
    double *w = mt_malloc(e->n * sizeof *w);
    if (!w) return -1.0;
    double sw = 0, cost = 0, share = 0;
    for (size_t i = 0; i < e->n; i++) {
        w[i] = e->chunks[i].n * exp2(-(x - e->chunks[i].x) / ETA_HALF_LIFE);
        sw += w[i];
        cost += w[i] * e->chunks[i].cost;
        share += w[i] * e->chunks[i].share;
    }
    cost /= sw;
    share /= sw;
    /* The pruned share of the results left: the chunks' trend at the middle of what is
     * left, never below the recent share (the best only gets better) nor far above it. */
    double ahead = share, slope;
    fit(e->chunks, w, e->n, ch_x, ch_share, (x + 1.0) / 2.0, &ahead, &slope);
    if (ahead < share) ahead = share;
    if (ahead > share + ETA_SHARE_AHEAD) ahead = share + ETA_SHARE_AHEAD;
    if (ahead > 1.0) ahead = 1.0;
    /* Seconds per result as a line in the pruned share; a pruned result is never dearer. */
    double per = cost, b;
    if (fit(e->chunks, w, e->n, ch_share, ch_cost, ahead, &per, &b) && b > 0) per = cost;
    if (per < 0.1 * cost) per = 0.1 * cost;
    free(w);
    return (double)(s->planned - s->done) * per;
}

mt_status_t cli_eta_observe(cli_eta_t *e, const cli_eta_sample_t *s, double *eta_s) {
    if (e->started && s->t_s < e->t_last) {
        *eta_s = e->have_eta ? e->eta : -1.0;
        return MT_INVAL;
    }
    if (!e->started || s->done < e->c_done || s->pruned < e->c_pruned) {
        /* The first snapshot, or counts that went back (a different sweep): start over. */
        e->started = true;
        e->n = 0;
        e->c_t = s->t_s;
        e->c_done = s->done;
        e->c_pruned = s->pruned;
        e->measured = false;
    }
    /* Until the first result arrives (workers starting, helpers importing, first compiles)
     * the open chunk starts at the latest snapshot: start-up is not a cost of the results. */
    if (e->n == 0 && s->done == e->c_done) e->c_t = s->t_s;
    uint64_t step = (uint64_t)((double)s->planned * ETA_CHUNK_SHARE);
    if (step < ETA_CHUNK_MIN) step = ETA_CHUNK_MIN;
    if (s->done >= e->c_done + step && s->t_s > e->c_t) {
        if (mt_grow((void **)&e->chunks, &e->cap, e->n + 1, sizeof *e->chunks, 64) != MT_OK) return MT_NOMEM;
        double n = (double)(s->done - e->c_done);
        e->chunks[e->n++] = (chunk_t){(s->t_s - e->c_t) / n, (double)(s->pruned - e->c_pruned) / n,
                                      ((double)(s->done + e->c_done) / 2.0) / (double)s->planned, n};
        e->c_t = s->t_s;
        e->c_done = s->done;
        e->c_pruned = s->pruned;
    }
    double raw;
    if (s->planned && s->done >= s->planned)
        raw = 0.0;
    else if (s->planned && e->n)
        raw = from_chunks(e, s);
    else
        raw = cli_eta_once(s);
    if (raw <= 0.0 || !e->have_eta || (e->n && !e->measured)) {
        /* the first estimate from measured chunks replaces the provisional one outright */
        e->eta = raw;
        e->have_eta = raw >= 0.0;
        e->measured = e->n > 0;
    } else {
        double dt = s->t_s - e->t_last;
        double pred = e->eta - dt > 0 ? e->eta - dt : 0.0;
        /* a short sweep must not wait half a minute to follow its estimate */
        double tau = pred / 4.0 < ETA_TAU_S ? (pred / 4.0 > 2.0 ? pred / 4.0 : 2.0) : ETA_TAU_S;
        double next = pred + (raw - pred) * (1.0 - exp(-dt / tau));
        double step_max = ETA_MAX_STEP_PER_S * dt < ETA_MAX_STEP ? ETA_MAX_STEP_PER_S * dt : ETA_MAX_STEP;
        /* Near the end a few seconds are no swing worth holding back. */
        if (pred > 10.0) {
            if (next > pred * (1.0 + step_max)) next = pred * (1.0 + step_max);
            if (next < pred * (1.0 - step_max)) next = pred * (1.0 - step_max);
        }
        e->eta = next;
    }
    e->t_last = s->t_s;
    *eta_s = e->have_eta ? e->eta : -1.0;
    return MT_OK;
}
