/* sched_split.c - tail work: a worker that would idle takes the back half of the open configs
 * of a leased job (sched_job_split), and the results of configs a split moved find the job that
 * holds them now (sched_cfg_owner, sched_late_result, sched_config_elsewhere). Runs on the
 * loop, like scheduler.c, which calls it from dispatch and results intake. */
#include <stdlib.h>
#include <string.h>

#include "halving.h"
#include "mt.h"
#include "race.h"
#include "sched_int.h"

/* Open configs (sched_cfg_open): the first of a held job's is most likely the one its holder
 * measures now (it goes in the job's order); a split moves the back half, which never takes it
 * while 2 or more are open. */

/* The job a split takes from for w: leased to another worker, of a running sweep w may
 * measure, not side by side, with at least 2 open configs; of the shape whose best at its
 * slowest batch size is the largest (race_shape_top), then with the most open configs, then
 * the lowest job id. At a sweep's end every shape's last configs are being split: the shape
 * whose side-by-side decide jobs (or halving's finalists) will take longest finishes its
 * first pass first, and the one left for last is the one whose decide step is shortest. */
static job_t *split_pick(sched_t *s, const sched_worker_t *w, size_t *n_open) {
    job_t *best = NULL;
    size_t best_n = 0;
    double best_top = 0.0;
    for (size_t i = 0; i < s->n_workers; i++) {
        const sched_worker_t *o = s->workers[i];
        if (o == w) continue;
        for (size_t k = 0; k < o->n_held; k++) {
            job_t *j = o->held[k];
            if (j->state != WIRE_JOB_LEASED || j->sw->state != WIRE_SWEEP_RUNNING || !sched_worker_matches(w, j->sw) ||
                sched_job_side_by_side(j))
                continue;
            size_t n = sched_job_open_cfgs(j);
            if (n < 2) continue;
            double top = race_shape_top(s->race, j->sw->id, j->shape_id);
            if (!best || top > best_top || (top == best_top && (n > best_n || (n == best_n && j->id < best->id)))) {
                best = j;
                best_n = n;
                best_top = top;
            }
        }
    }
    *n_open = best ? best_n : 0;
    return best;
}

/* The holder of j learns at once which configs left its job (Ack.moved), so it skips those it
 * has not started instead of measuring them too; an older worker ignores the field and goes on
 * into them, and its results count while the new job still needs them (sched_late_result). A
 * notice that cannot be built or sent costs only that double work. */
static void tell_holder(sched_t *s, const job_t *j, const jcfg_t *moved, size_t n) {
    if (!j->holder || !n) return;
    uint64_t *ids = mt_malloc(n * sizeof *ids);
    if (!ids) return;
    for (size_t k = 0; k < n; k++) ids[k] = moved[k].config_id;
    Moetune__JobMoved jm = MOETUNE__JOB_MOVED__INIT;
    jm.job_id = j->id;
    jm.n_config_ids = n;
    jm.config_ids = ids;
    Moetune__JobMoved *jmp = &jm;
    Moetune__Ack ack = MOETUNE__ACK__INIT;
    ack.n_moved = 1;
    ack.moved = &jmp;
    wire_env_t env;
    wire_env_wrap(&env, &ack.base);
    sched_send_env(s, j->holder, &env);
    free(ids);
}

/* Tail work: w holds nothing and nothing is pending for it. The leased job split_pick chooses
 * gives the back half of its open configs (what its holder reaches last) to a new pending
 * job, listed back to front, stored at once in its own transaction (job_configs moved, the
 * job's phase and batch sizes kept) and returned for w to lease. Its holder is told
 * (tell_holder) and skips the moved configs it has not started; the one it may be measuring,
 * or all of them for a worker that ignores the notice (going on into them front to back while
 * w comes the other way), has its results accepted while the new job needs them
 * (sched_on_result) and credited to the job that holds them now (sched_commit.c).
 * Bounded: only a worker holding no job splits, one job a dispatch, a job with fewer than 2
 * open configs is never split, and each move at least halves the job a config is in, so a
 * config moves at most log2(chunk) times. NULL when nothing splits or on failure (memory or
 * storage: nothing changed). */
job_t *sched_job_split(sched_t *s, sched_worker_t *w) {
    size_t n_open = 0;
    if (w->n_held) return NULL;
    job_t *j = split_pick(s, w, &n_open);
    if (!j) return NULL;
    sweep_t *sw = j->sw;
    size_t move = n_open / 2, nb = sched_job_nb(j);
    uint64_t new_id = 0;
    char bs_text[2048] = "";
    job_t *nj = mt_calloc(1, sizeof *nj);
    jcfg_t *ncfg = mt_calloc(move, sizeof *ncfg);
    size_t *mv = mt_malloc(move * sizeof *mv);
    uint32_t *nbs = j->bs ? mt_malloc(j->nb * sizeof *nbs) : NULL;
    if (!nj || !ncfg || !mv || (j->bs && (!nbs || halving_bs_format(j->bs, j->nb, bs_text, sizeof bs_text)))) {
        log_at(MT_LOG_ERROR, "out of memory splitting job %llu", (unsigned long long)j->id);
        goto fail;
    }
    /* the back `move` open configs, in the job's order */
    for (size_t i = j->n_cfgs, m = move; m && i-- > 0;)
        if (sched_cfg_open(j, &j->cfgs[i])) mv[--m] = i;
    int rc = store_begin(s->db);
    for (size_t k = 0; !rc && k < move; k++) rc = store_job_config_delete(s->db, j->id, j->cfgs[mv[k]].config_id);
    if (!rc)
        rc = store_job_insert_phase(s->db, sw->id, j->shape_id, j->phase, j->bs ? bs_text : NULL, NULL, mt_wall_s(),
                                    &new_id);
    for (size_t k = 0; !rc && k < move; k++) rc = store_job_config_insert(s->db, new_id, j->cfgs[mv[k]].config_id);
    if (!rc && sched_job_index_reserve(s, sw, new_id)) rc = MT_NOMEM;
    if (!rc) rc = store_commit(s->db);
    if (rc) {
        log_at(MT_LOG_WARN, "job %llu not split for %s: %s", (unsigned long long)j->id, w->id,
               rc == MT_NOMEM ? "out of memory" : store_errmsg(s->db));
        store_rollback(s->db);
        if (rc != MT_NOMEM) s->c.commit_failures++;
        goto fail;
    }
    if (nbs) memcpy(nbs, j->bs, j->nb * sizeof *nbs);
    nj->id = new_id;
    nj->sw = sw;
    nj->shape_id = j->shape_id;
    nj->state = WIRE_JOB_PENDING;
    nj->phase = j->phase;
    nj->bs = nbs;
    nj->nb = j->nb;
    nj->cfgs = ncfg;
    nj->n_cfgs = move;
    nj->rows_needed = (uint64_t)move * nb;
    for (size_t k = 0; k < move; k++) {
        /* listed back to front: a holder that ignores the notice goes on from its kept configs into the
         * moved ones front to back, so the two meet and the holder's extra work is not wasted */
        jcfg_t *c = &j->cfgs[mv[k]];
        ncfg[move - 1 - k].config_id = c->config_id;
        ncfg[move - 1 - k].rows = c->rows;
        nj->rows_done += c->rows;
        c->removed = c->moved = true;
        c->to = nj;
        j->rows_needed -= nb;
        j->rows_done -= c->rows;
    }
    sched_job_index(s, nj); /* room reserved above: cannot fail */
    log_at(MT_LOG_INFO, "job %llu (held by %s) split for idle %s: its last %zu of %zu open configs moved to job %llu",
           (unsigned long long)j->id, j->holder ? j->holder->id : "nobody", w->id, move, n_open,
           (unsigned long long)new_id);
    tell_holder(s, j, ncfg, move);
    free(mv);
    return nj;
fail:
    free(nbs);
    free(mv);
    free(ncfg);
    free(nj);
    return NULL;
}

/* A result with the token of done job j for config_id: NULL to go on (*late set when the config
 * was moved by a split and its new job still waits for it: accepted, its rows credited there),
 * or why it is dropped quietly (a split moved it and its rows are in; or its rows came from the
 * holder of the job it was moved from, so this worker's job was done before it got there). */
const char *sched_late_result(job_t *j, uint64_t config_id, bool *late) {
    *late = false;
    for (size_t i = 0; i < j->n_cfgs; i++) {
        jcfg_t *c = &j->cfgs[i];
        if (c->config_id != config_id) continue;
        if (c->moved) {
            size_t oci = i;
            job_t *o = sched_cfg_owner(j, &oci);
            *late = o && (o->state == WIRE_JOB_PENDING || o->state == WIRE_JOB_LEASED) &&
                    o->cfgs[oci].rows < sched_job_nb(o);
            return *late ? NULL : "a split moved it and its rows are in";
        }
        if (!c->removed && c->twin_rows && c->rows >= sched_job_nb(j))
            return "its rows came from the worker it was split from";
        return NULL;
    }
    return NULL;
}

/* Another open job of j's sweep, shape and phase that holds config_id, else NULL. Scans the
 * sweep's jobs: only for a result whose config is not in its job (rare). */
const job_t *sched_config_elsewhere(const job_t *j, uint64_t config_id) {
    const sweep_t *sw = j->sw;
    for (size_t i = sw->n_jobs; i-- > 0;) {
        const job_t *o = sw->jobs[i];
        if (o == j || (o->state != WIRE_JOB_PENDING && o->state != WIRE_JOB_LEASED) || o->shape_id != j->shape_id ||
            o->phase != j->phase)
            continue;
        for (size_t k = 0; k < o->n_cfgs; k++)
            if (o->cfgs[k].config_id == config_id && !o->cfgs[k].removed) return o;
    }
    return NULL;
}
