/*
 * sched_commit.c - the commit pipeline. Which thread runs what:
 *   event loop:    sched_batch_take (moves buffered results and snapshots of changed
 *                  jobs and sweeps into a batch), sched_batch_done (applies a committed
 *                  batch or puts a failed one back), sched_flush, the Acks;
 *   writer thread: sched_batch_write, which reads and fills only its batch and never
 *                  touches the scheduler, so the loop goes on while it commits.
 * One batch is out at a time (s->inflight). See scheduler.h and sched_int.h.
 */
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "mt.h"
#include "race.h"
#include "sched_int.h"

static char *dup_or_null(const char *p) { return p ? mt_strdup(p) : NULL; }

static int brow_fill(brow_t *br, const entry_t *e, int64_t now_s) {
    const Moetune__Result *r = e->env->result;
    const Moetune__Hello *h = e->w->hello ? e->w->hello->hello : NULL;
    br->strs[0] = dup_or_null(e->w->id);
    br->strs[1] = dup_or_null(h ? h->backend : NULL);
    br->strs[2] = dup_or_null(h ? h->compiler : NULL);
    br->strs[3] = dup_or_null(h ? h->kernel_hash : NULL);
    br->strs[4] = dup_or_null(h ? h->versions : NULL);
    if (!br->strs[0] || (h && ((h->backend && !br->strs[1]) || (h->compiler && !br->strs[2]) ||
                               (h->kernel_hash && !br->strs[3]) || (h->versions && !br->strs[4]))))
        return MT_NOMEM;
    br->base = (store_result_t){
        .sweep_id = e->job->sw->id,
        .shape_id = e->job->shape_id,
        .config_id = r->config_id,
        .job_id = e->job->id,
        .device_id = e->w->device_id,
        .registers = r->registers,
        .spills = r->spills,
        .worker_id = br->strs[0],
        .backend = br->strs[1],
        .compiler = br->strs[2],
        .kernel_hash = br->strs[3],
        .versions = br->strs[4],
        .created = now_s,
        .phase = e->job->phase,
    };
    br->r = r;
    br->crash = e->crash;
    /* Its Hello could not be recorded (a locked database): the writer records the device
     * and the worker in the same transaction as these rows, so no row lacks its device. */
    if (!e->w->device_id && h) {
        size_t len = moetune__hello__get_packed_size(h);
        uint8_t *buf = mt_malloc(len ? len : 1);
        if (!buf) return MT_NOMEM;
        moetune__hello__pack(h, buf);
        br->hello = moetune__hello__unpack(NULL, len, buf);
        free(buf);
        if (!br->hello) return MT_NOMEM;
    }
    return MT_OK;
}

/* Whether every config of j's shape in j's phase has sent its Result (no open job of them has an
 * open config, sched_cfg_open): that pass ends with the commit of those waiting. */
static bool shape_received(const job_t *j) {
    const sweep_t *sw = j->sw;
    for (size_t i = 0; i < sw->n_jobs; i++) {
        const job_t *o = sw->jobs[i];
        if (o->shape_id != j->shape_id || o->phase != j->phase ||
            (o->state != WIRE_JOB_PENDING && o->state != WIRE_JOB_LEASED))
            continue;
        if (sched_job_open_cfgs(o)) return false;
    }
    return true;
}

/* The order of a backlog (more results waiting than a batch takes): first the results of the
 * shapes (and phases) all of whose configs have sent theirs, whose commit ends that pass; their
 * count, which sched_batch_take commits alone, so a shape's phase 2 (and at the end the sweep)
 * waits for one short commit, not for the whole backlog; arrival order otherwise. Nothing depends on the commit order of results of
 * different configs, and a config's results are idempotent. A stable partition; without memory
 * for it, arrival order (0). */
static size_t prioritize_pending(sched_t *s) {
    struct {
        const sweep_t *sw;
        uint64_t shape_id;
        uint32_t phase;
        bool received;
    } memo[64];
    size_t n_memo = 0, n = s->n_pending, k = 0, r = 0;
    bool *first = mt_malloc(n * sizeof *first);
    entry_t *rest = mt_malloc(n * sizeof *rest);
    if (!first || !rest) goto out;
    for (size_t i = 0; i < n; i++) {
        const job_t *j = s->pending[i].job;
        size_t m = 0;
        while (m < n_memo && (memo[m].sw != j->sw || memo[m].shape_id != j->shape_id || memo[m].phase != j->phase)) m++;
        if (m < n_memo) {
            first[i] = memo[m].received;
        } else {
            first[i] = shape_received(j);
            if (n_memo < sizeof memo / sizeof memo[0]) {
                memo[n_memo].sw = j->sw, memo[n_memo].shape_id = j->shape_id, memo[n_memo].phase = j->phase;
                memo[n_memo++].received = first[i];
            }
        }
    }
    for (size_t i = 0; i < n; i++) {
        if (first[i])
            s->pending[k++] = s->pending[i];
        else
            rest[r++] = s->pending[i];
    }
    memcpy(s->pending + k, rest, r * sizeof *rest);
out:
    free(first);
    free(rest);
    return k;
}

mt_status_t sched_batch_take(sched_t *s, sched_batch_t **out) {
    *out = NULL;
    if (s->inflight) return MT_BUSY;
    size_t n_sw = 0;
    for (size_t i = 0; i < s->n_sweeps; i++) n_sw += s->sweeps[i]->dirty;
    bhalving_t *hv = NULL;
    size_t n_hv = 0;
    if (sched_halving_take(s, &hv, &n_hv)) return MT_NOMEM;
    /* a shape's phase 2 rides alone: the jobs its answer waits on are planned (and leased)
     * after one short commit, not after a full batch of results; in a backlog, the results
     * that end a pass go first, alone: a short commit */
    size_t n_e = 0;
    if (!n_hv) {
        size_t n_first = s->n_pending > SCHED_BATCH_MAX ? prioritize_pending(s) : 0;
        n_e = n_first ? n_first : s->n_pending;
        if (n_e > SCHED_BATCH_MAX) n_e = SCHED_BATCH_MAX;
    }
    if (!n_e && !s->n_dirty && !n_sw && !n_hv) {
        sched_send_acks(s); /* rejections need no commit */
        return MT_AGAIN;
    }
    sched_batch_t *b = mt_calloc(1, sizeof *b);
    if (!b) {
        sched_halving_done(s, hv, n_hv, false, 0);
        sched_halving_free(hv, n_hv);
        return MT_NOMEM;
    }
    b->hv = hv; /* halving's phase transitions ride in this batch's transaction */
    b->n_hv = n_hv;
    size_t nj = s->n_dirty;
    b->res = mt_calloc(n_e ? n_e : 1, sizeof *b->res);
    b->jobs = mt_calloc(nj ? nj : 1, sizeof *b->jobs);
    b->sweeps = mt_calloc(n_sw ? n_sw : 1, sizeof *b->sweeps);
    if (!b->res || !b->jobs || !b->sweeps) goto nomem;
    int64_t now_s = mt_wall_s();
    for (size_t i = 0; i < n_e; i++) {
        b->n_res++; /* counted first so sched_batch_free releases partial copies */
        if (brow_fill(&b->res[i].row, &s->pending[i], now_s)) goto nomem;
    }
    for (size_t i = 0; i < nj; i++) {
        job_t *j = s->dirty_jobs[i];
        bjob_t *bj = &b->jobs[b->n_jobs++];
        bj->job = j;
        bj->u = (store_job_update_t){
            .id = j->id,
            .state = wire_job_state_name(j->state),
            .attempts = j->attempts,
            .worker_id = dup_or_null(j->last_worker),
            .lease_token = j->token,
            .lease_expires_ms = j->state == WIRE_JOB_LEASED ? j->lease_expires_wall_ms : 0,
            .finished = j->state >= WIRE_JOB_DONE ? j->finished : 0,
        };
        if (j->last_worker && !bj->u.worker_id) goto nomem;
    }
    for (size_t i = 0; i < s->n_sweeps; i++) {
        sweep_t *sw = s->sweeps[i];
        if (!sw->dirty) continue;
        b->sweeps[b->n_sweeps++] =
            (bsweep_t){.sw = sw, .id = sw->id, .state = wire_sweep_state_name(sw->state), .finished = sw->finished};
    }
    /* everything copied: move ownership into the batch */
    for (size_t i = 0; i < n_e; i++) b->res[i].e = s->pending[i];
    if (n_e) { /* s->pending may be NULL when only job or sweep states changed */
        memmove(s->pending, s->pending + n_e, (s->n_pending - n_e) * sizeof *s->pending);
        s->n_pending -= n_e;
    }
    for (size_t i = 0; i < b->n_jobs; i++) b->jobs[i].job->dirty = false;
    s->n_dirty = 0;
    for (size_t i = 0; i < b->n_sweeps; i++) b->sweeps[i].sw->dirty = false;
    s->inflight = b;
    sched_send_acks(s);
    *out = b;
    return MT_OK;
nomem:
    sched_halving_done(s, b->hv, b->n_hv, false, 0);
    sched_batch_free(b);
    log_at(MT_LOG_ERROR, "out of memory building a commit batch; kept for the next try");
    return MT_NOMEM;
}

/* Runs on the writer thread: reads and fills only the batch. */
mt_status_t sched_batch_write(store_t *db, void *arg) {
    sched_batch_t *b = arg;
    int rc = MT_OK;
    for (size_t i = 0; !rc && i < b->n_res; i++) {
        brow_t *br = &b->res[i].row;
        store_result_t row = br->base;
        br->new_rows = br->new_failed = br->new_pruned = br->new_replaced = 0;
        br->new_timed_us = 0;
        memset(br->new_by_status, 0, sizeof br->new_by_status);
        if (br->hello) {
            rc = store_hello(db, br->hello, row.created, &br->device_id);
            row.device_id = br->device_id;
        }
        for (size_t k = 0; !rc && k < br->r->n_measurements; k++) {
            const Moetune__Measurement *m = br->r->measurements[k];
            int outcome = STORE_ROW_KEPT;
            row.batch_size = m->batch_size;
            row.status = m->status;
#define X(f) row.f = m->f;
            WIRE_MEASUREMENT_STATS(X)
#undef X
            row.detail = m->detail;
            row.timed_us = m->timed_us;
            rc = store_result_put(db, &row, &outcome);
            if (!rc && outcome != STORE_ROW_KEPT) {
                /* a halving finalist's phase-2 row replaces its phase-1 ok row: its job's, not a new row */
                if (outcome == STORE_ROW_NEW)
                    br->new_rows++;
                else
                    br->new_replaced++;
                br->new_timed_us += m->timed_us;
                if (m->status == MOETUNE__STATUS__STATUS_PRUNED)
                    br->new_pruned++;
                else if (wire_status_failed(m->status)) /* the wire took only known statuses */
                    br->new_failed++;
                if (outcome == STORE_ROW_NEW)
                    br->new_by_status[(unsigned)m->status < WIRE_N_STATUS ? (unsigned)m->status : 0]++;
            }
        }
        if (!rc && br->crash) {
            uint32_t count = 0;
            rc = store_crash_bump(db, row.sweep_id, row.shape_id, row.config_id, row.worker_id, &count);
        }
    }
    for (size_t i = 0; !rc && i < b->n_jobs; i++) rc = store_job_update(db, &b->jobs[i].u);
    for (size_t i = 0; !rc && i < b->n_sweeps; i++)
        rc = store_sweep_set_state(db, b->sweeps[i].id, b->sweeps[i].state, b->sweeps[i].finished);
    for (size_t i = 0; !rc && i < b->n_hv; i++) {
        bhalving_t *h = &b->hv[i];
        rc = halving_advance(db, h->sweep_id, h->shape_id, h->bs, h->nb, h->chunk, h->decide, mt_wall_s(), &h->st);
    }
    return rc;
}

size_t sched_batch_results(const sched_batch_t *b) { return b->n_res; }

void sched_send_acks(sched_t *s) {
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        if (!w->n_acks) continue;
        Moetune__Ack ack = MOETUNE__ACK__INIT;
        ack.n_seqs = w->n_acks;
        ack.seqs = w->acks;
        /* the best committed so far for each racing job w holds: what other workers found
         * since its lease prunes its next configs (without scratch memory, the seqs alone) */
        size_t nb = 0;
        for (size_t k = 0; k < w->n_held; k++) nb += sched_job_races(w->held[k]) ? sched_job_nb(w->held[k]) : 0;
        bool room = nb && !mt_grow((void **)&s->best, &s->cap_best, nb, sizeof *s->best, 16) &&
                    !mt_grow((void **)&s->jb, &s->cap_jb, w->n_held, sizeof *s->jb, 16) &&
                    !mt_grow((void **)&s->jbp, &s->cap_jbp, w->n_held, sizeof *s->jbp, 16);
        for (size_t k = 0, used = 0; room && k < w->n_held; k++) {
            const job_t *j = w->held[k];
            if (!sched_job_races(j)) continue;
            Moetune__JobBest *b = &s->jb[ack.n_best];
            moetune__job_best__init(b);
            b->job_id = j->id;
            b->n_best_us = sched_job_nb(j);
            b->best_us = s->best + used;
            sched_job_bests(s, j, b->best_us);
            used += b->n_best_us;
            s->jbp[ack.n_best++] = b;
        }
        ack.best = s->jbp;
        wire_env_t env;
        wire_env_wrap(&env, &ack.base);
        sched_send_env(s, w, &env);
        w->n_acks = 0;
    }
}

/* A committed Result's ok medians become the best its sweep races against. */
static void race_note_entry(sched_t *s, const entry_t *e) {
    const Moetune__Result *r = e->env->result;
    for (size_t k = 0; k < r->n_measurements; k++) {
        const Moetune__Measurement *m = r->measurements[k];
        if (m->status == MOETUNE__STATUS__STATUS_OK &&
            race_note(s->race, e->job->sw->id, e->job->shape_id, m->batch_size, m->median_us))
            log_at(MT_LOG_WARN, "racing: out of memory noting a best; that batch size races less");
    }
}

/* New rows of a config a split moved: they count for the job that holds it now (its twin),
 * once, whichever worker's result committed them first (the store keeps one row per batch
 * size), so neither job waits for them twice. */
static void credit_moved(sched_t *s, job_t *j, size_t ci, uint32_t rows) {
    job_t *o = sched_cfg_owner(j, &ci);
    if (!o || !rows) return;
    o->cfgs[ci].rows += rows;
    o->cfgs[ci].twin_rows = true;
    o->rows_done += rows;
    if (o->rows_done >= o->rows_needed && (o->state == WIRE_JOB_PENDING || o->state == WIRE_JOB_LEASED))
        sched_job_finish(s, o, WIRE_JOB_DONE);
}

/* Applies a committed result's new rows to the in-memory counts; its Ack is queued. */
static void apply_entry(sched_t *s, const entry_t *e, const brow_t *br) {
    job_t *j = e->job;
    sweep_t *sw = j->sw;
    jcfg_t *c = &j->cfgs[e->cfg];
    c->rows += br->new_rows + br->new_replaced;
    if (!c->removed)
        j->rows_done += br->new_rows + br->new_replaced;
    else if (c->moved)
        credit_moved(s, j, e->cfg, br->new_rows + br->new_replaced);
    sw->done += br->new_rows;
    sw->failed += br->new_failed;
    sw->pruned += br->new_pruned;
    sw->timed_us += br->new_timed_us;
    if (j->phase >= 2) sw->finalists_done += br->new_rows + br->new_replaced;
    if (br->new_rows && e->w->device_id) sched_sweep_note_device(sw, e->w->device_id);
    s->c.results_committed += br->new_rows;
    for (int k = 0; k < WIRE_N_STATUS; k++) s->c.committed_by_status[k] += br->new_by_status[k];
    e->w->results += br->new_rows;
    sched_ack_push(e->w, e->env->result->seq);
    if (j->rows_done >= j->rows_needed && (j->state == WIRE_JOB_PENDING || j->state == WIRE_JOB_LEASED))
        sched_job_finish(s, j, WIRE_JOB_DONE);
}

void sched_batch_done(sched_t *s, sched_batch_t *b, int rc, const char *why, uint64_t now_ms) {
    if (!b) return;
    if (s->inflight == b) s->inflight = NULL;
    if (rc) {
        /* keep everything: the entries go back in front of what arrived since, the
         * jobs and sweeps are written again with their state at the next try */
        s->c.commit_failures++;
        why = why && *why ? why : "unknown error";
        if (!s->storage_err[0])
            log_at(MT_LOG_WARN, "storage: commit of %zu results failed, kept unacknowledged and retried: %s", b->n_res,
                   why);
        else
            log_at(MT_LOG_DEBUG, "storage: commit of %zu results failed again: %s", b->n_res, why);
        mt_fmt(s->storage_err, sizeof s->storage_err, "%s", why);
        if (!b->n_res) {
            /* only job and sweep rows: nothing to put back */
        } else if (mt_grow((void **)&s->pending, &s->cap_pending, s->n_pending + b->n_res, sizeof *s->pending, 16)) {
            log_at(MT_LOG_ERROR, "out of memory keeping %zu results; their workers resend them", b->n_res);
            for (size_t i = 0; i < b->n_res; i++) wire_free(&b->res[i].e.env);
        } else {
            memmove(s->pending + b->n_res, s->pending, s->n_pending * sizeof *s->pending);
            for (size_t i = 0; i < b->n_res; i++) s->pending[i] = b->res[i].e;
            s->n_pending += b->n_res;
        }
        for (size_t i = 0; i < b->n_jobs; i++) sched_job_dirty(s, b->jobs[i].job);
        for (size_t i = 0; i < b->n_sweeps; i++) b->sweeps[i].sw->dirty = true;
        sched_halving_done(s, b->hv, b->n_hv, false, now_ms);
        sched_batch_free(b);
        sched_send_acks(s);
        return;
    }
    if (s->storage_err[0]) {
        log_at(MT_LOG_INFO, "storage: commits succeed again (%zu results in this one, %zu waiting)", b->n_res,
               sched_pending(s));
        s->storage_err[0] = '\0';
    }
    for (size_t i = 0; i < b->n_res; i++) {
        entry_t *e = &b->res[i].e;
        const brow_t *br = &b->res[i].row;
        if (br->hello && !e->w->device_id) {
            e->w->device_id = br->device_id;
            log_at(MT_LOG_INFO, "worker %s recorded with its results", e->w->id);
        }
        race_note_entry(s, e);
        apply_entry(s, e, br);
        wire_free(&e->env);
    }
    sched_halving_done(s, b->hv, b->n_hv, true, now_ms);
    sched_batch_free(b);
    sched_send_acks(s);
    sched_dispatch_capped(s, now_ms); /* jobs that ended free a held slot */
}

mt_status_t sched_flush(sched_t *s, uint64_t now_ms) {
    int rc = MT_OK;
    do {
        sched_batch_t *b = NULL;
        rc = sched_batch_take(s, &b);
        if (rc == MT_AGAIN) return MT_OK;
        if (rc) return rc;
        rc = store_begin(s->db);
        if (!rc) rc = sched_batch_write(s->db, b);
        if (!rc) rc = store_commit(s->db);
        if (rc) store_rollback(s->db);
        sched_batch_done(s, b, rc, rc ? store_errmsg(s->db) : NULL, now_ms);
    } while (!rc); /* a commit can finish jobs and sweeps: their rows go in the next batch */
    return rc;
}
