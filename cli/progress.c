/* progress.c - progress line (see progress.h). */
#include "progress.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "eta.h"
#include "mt.h"
#include "states.h"

struct cli_progress {
    FILE *out;
    bool json, tty, drawn;
    uint64_t last_ms;
    char last_state[16];
    size_t last_len;
    uint64_t first_ms, first_done; /* for a local rate when the coordinator reports none */
    bool have_first;
    char storage[300]; /* the coordinator's last commit error, "" when none */
    uint64_t unacked;
    bool storage_changed;
    cli_eta_t *eta; /* NULL when out of memory: the ETA then shows "--" */
    double eta_s;   /* its last answer; < 0 unknown */
};

mt_status_t cli_progress_new(FILE *out, bool json, bool tty, cli_progress_t **pp) {
    cli_progress_t *p = mt_calloc(1, sizeof *p);
    *pp = NULL;
    if (!p) return MT_NOMEM;
    p->out = out;
    p->json = json;
    p->tty = tty && !json;
    p->eta_s = -1.0;
    if (cli_eta_new(&p->eta) != MT_OK) p->eta = NULL;
    *pp = p;
    return MT_OK;
}

static void fmt_eta(double secs, char *buf, size_t len) {
    if (secs < 0 || secs > 365.0 * 86400) {
        snprintf(buf, len, "--");
        return;
    }
    unsigned long s = (unsigned long)(secs + 0.5);
    if (s >= 3600)
        snprintf(buf, len, "%luh%02lum", s / 3600, (s / 60) % 60);
    else if (s >= 60)
        snprintf(buf, len, "%lum%02lus", s / 60, s % 60);
    else
        snprintf(buf, len, "%lus", s);
}

/* The seconds left to show: 0 once the work is in or the sweep is done, none (-1) once it
 * ended otherwise (cancelled, failed: nothing is left to wait for), else eta_s. */
static double eta_shown(const Moetune__SweepStatus *st, double eta_s) {
    if (cli_progress_complete(st) || wire_sweep_is(st->state, WIRE_SWEEP_DONE)) return 0.0;
    return wire_sweep_finished(st->state) ? -1.0 : eta_s;
}

void cli_progress_eta_text(const Moetune__SweepStatus *st, double eta_s, char *buf, size_t len) {
    fmt_eta(eta_shown(st, eta_s), buf, len);
}

void cli_progress_work(const Moetune__SweepStatus *st, uint64_t *planned, uint64_t *done) {
    uint64_t finalists =
        st->finalists_expected > st->finalists_planned ? st->finalists_expected : st->finalists_planned;
    *planned = st->results_planned + finalists;
    *done = st->results_done + st->finalists_done;
}

bool cli_progress_complete(const Moetune__SweepStatus *st) {
    uint64_t planned, done;
    cli_progress_work(st, &planned, &done);
    return planned && done >= planned;
}

void cli_progress_sample(const Moetune__SweepStatus *st, double t_s, double wall_s, cli_eta_sample_t *s) {
    uint64_t planned, done;
    cli_progress_work(st, &planned, &done);
    if (st->finalist_rounds > 1) {
        uint64_t extra = st->finalist_rounds - 1;
        planned += extra * (planned - st->results_planned);
        done += extra * st->finalists_done;
    }
    /* halving's transition turns most phase-1 rows 'pruned' at once: no racing trend */
    *s = (cli_eta_sample_t){t_s, wall_s, planned, done, st->phase ? 0 : st->results_pruned, st->created_s, st->rate};
}

void cli_progress_counts(const Moetune__SweepStatus *st, char *buf, size_t len) {
    unsigned long long rd = st->results_done, rp = st->results_planned, fd = st->finalists_done,
                       fp = st->finalists_planned;
    if (st->phase == 0)
        snprintf(buf, len, "%llu/%llu results", rd, rp);
    else if (st->phase == 1 && fp)
        snprintf(buf, len, "phase 1: %llu/%llu results, phase 2: %llu/%llu finalists", rd, rp, fd, fp);
    else if (st->phase == 1)
        snprintf(buf, len, "phase 1: %llu/%llu results", rd, rp);
    else
        snprintf(buf, len, "phase 2: %llu/%llu finalists, %llu/%llu results", fd, fp, rd, rp);
}

double cli_progress_percent(const Moetune__SweepStatus *st) {
    uint64_t total, done;
    cli_progress_work(st, &total, &done);
    double pct = total ? 100.0 * (double)done / (double)total : 0.0;
    /* a halving sweep is over when the coordinator says so, not when a count is reached */
    if (st->phase && pct > 99.9 && (!st->state || wire_sweep_is(st->state, WIRE_SWEEP_RUNNING))) pct = 99.9;
    return pct;
}

void cli_progress_format(const Moetune__SweepStatus *st, uint32_t workers_alive, double eta_s, char *buf, size_t len) {
    char counts[160], eta[32];
    cli_progress_counts(st, counts, sizeof counts);
    cli_progress_eta_text(st, eta_s, eta, sizeof eta);
    char racing[80] = ""; /* ", N pruned, GPU busy P%" when known */
    if (st->results_pruned) snprintf(racing, sizeof racing, ", %llu pruned", (unsigned long long)st->results_pruned);
    if (st->gpu_busy > 0)
        snprintf(racing + strlen(racing), sizeof racing - strlen(racing), ", GPU busy %.0f%%", 100.0 * st->gpu_busy);
    snprintf(buf, len, "sweep %llu %s: %s (%.1f%%), %.0f/s, ETA %s, %llu failed%s, jobs %u/%u done%s%s, %u workers",
             (unsigned long long)st->sweep_id, st->state ? st->state : "?", counts, cli_progress_percent(st), st->rate,
             eta, (unsigned long long)st->results_failed, racing, st->jobs_done, st->jobs_total,
             st->jobs_failed ? ", jobs failed " : "", st->jobs_failed ? "yes" : "", workers_alive);
}

/* Feeds the estimator every snapshot, shown or not. */
static void observe(cli_progress_t *p, const Moetune__SweepStatus *st) {
    if (!p->eta) return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    cli_eta_sample_t s;
    cli_progress_sample(st, (double)mt_now_ms() / 1000.0, (double)ts.tv_sec + ts.tv_nsec * 1e-9, &s);
    cli_eta_observe(p->eta, &s, &p->eta_s);
}

static void emit(cli_progress_t *p, const Moetune__SweepStatus *in, uint32_t workers_alive, bool final) {
    Moetune__SweepStatus copy = *in;
    const Moetune__SweepStatus *st = &copy;
    uint64_t now = mt_now_ms();
    if (!p->have_first) {
        p->have_first = true;
        p->first_ms = now;
        p->first_done = in->results_done;
    }
    if (copy.rate <= 0 && now > p->first_ms + 500 && in->results_done >= p->first_done)
        copy.rate = (double)(in->results_done - p->first_done) * 1000.0 / (double)(now - p->first_ms);
    if (p->json) {
        json_t *o = json_pack("{s:I, s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:i, s:i, s:i, s:i}", "sweep",
                              (json_int_t)st->sweep_id, "state", st->state ? st->state : "", "done",
                              (json_int_t)st->results_done, "total", (json_int_t)st->results_planned, "failed",
                              (json_int_t)st->results_failed, "pruned", (json_int_t)st->results_pruned, "gpu_busy",
                              st->gpu_busy, "rate", st->rate, "jobs_done", (int)st->jobs_done, "jobs_total",
                              (int)st->jobs_total, "jobs_failed", (int)st->jobs_failed, "workers", (int)workers_alive);
        if (o) json_object_set_new(o, "eta_s", cli_progress_eta_json(st, p->eta_s));
        if (o) cli_progress_json_phase(o, st);
        if (o && p->storage[0]) {
            json_object_set_new(o, "storage_error", cli_json_text(p->storage));
            json_object_set_new(o, "results_unacked", json_integer((json_int_t)p->unacked));
        }
        cli_print_json(p->out, o);
        fflush(p->out);
        return;
    }
    char line[800];
    cli_progress_format(st, workers_alive, p->eta_s, line, sizeof line);
    if (p->storage[0]) {
        size_t used = strlen(line);
        snprintf(line + used, sizeof line - used, "; storage: %s (%llu results waiting for a commit)", p->storage,
                 (unsigned long long)p->unacked);
    }
    if (p->tty) {
        size_t n = strlen(line);
        /* Pad over a longer previous line. */
        fprintf(p->out, "\r%s%*s", line, p->last_len > n ? (int)(p->last_len - n) : 0, "");
        p->last_len = n;
        p->drawn = !final;
        if (final) fputc('\n', p->out);
    } else {
        fprintf(p->out, "%s\n", line);
    }
    fflush(p->out);
}

void cli_progress_update(cli_progress_t *p, const Moetune__SweepStatus *st, uint32_t workers_alive) {
    if (!p || !st) return;
    observe(p, st);
    uint64_t now = mt_now_ms();
    bool state_changed = strcmp(p->last_state, st->state ? st->state : "") != 0 || p->storage_changed;
    p->storage_changed = false;
    if (!p->tty && !state_changed && p->last_ms && now - p->last_ms < 5000) return;
    p->last_ms = now;
    snprintf(p->last_state, sizeof p->last_state, "%s", st->state ? st->state : "");
    emit(p, st, workers_alive, false);
}

void cli_progress_finish(cli_progress_t *p, const Moetune__SweepStatus *st, uint32_t workers_alive) {
    if (!p) return;
    if (st) observe(p, st);
    if (st)
        emit(p, st, workers_alive, true);
    else if (p->drawn)
        fputc('\n', p->out);
    p->drawn = false;
}

void cli_progress_storage(cli_progress_t *p, const Moetune__Counters *c) {
    if (!p) return;
    const char *e = c && c->storage_error ? c->storage_error : "";
    char clean[sizeof p->storage];
    size_t n = 0;
    /* One line: the library's text may hold a newline. */
    for (const char *q = e; *q && n + 1 < sizeof clean; q++) clean[n++] = (*q == '\n' || *q == '\r') ? ' ' : *q;
    clean[n] = '\0';
    if (strcmp(clean, p->storage) != 0) p->storage_changed = true;
    snprintf(p->storage, sizeof p->storage, "%s", clean);
    p->unacked = c ? c->results_unacked : 0;
}

void cli_progress_json_phase(json_t *o, const Moetune__SweepStatus *st) {
    json_object_set_new(o, "percent", json_real(round(cli_progress_percent(st) * 10.0) / 10.0));
    if (!st->phase) return;
    json_object_set_new(o, "phase", json_integer(st->phase));
    json_object_set_new(o, "finalists_planned", json_integer((json_int_t)st->finalists_planned));
    json_object_set_new(o, "finalists_done", json_integer((json_int_t)st->finalists_done));
    json_object_set_new(o, "finalists_expected", json_integer((json_int_t)st->finalists_expected));
}

json_t *cli_progress_eta_json(const Moetune__SweepStatus *st, double eta_s) {
    eta_s = eta_shown(st, eta_s);
    return eta_s >= 0 && eta_s <= 365.0 * 86400 ? json_integer((json_int_t)(eta_s + 0.5)) : json_null();
}

void cli_progress_destroy(cli_progress_t **p) {
    if (!p || !*p) return;
    cli_eta_destroy(&(*p)->eta);
    free(*p);
    *p = NULL;
}
