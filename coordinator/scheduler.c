/* scheduler.c - leases, credits, heartbeats, dispatch and results intake. See scheduler.h;
 * sched_int.h says what the other sched_*.c files hold and which thread runs what. */
#include "scheduler.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert.h"
#include "halving.h"
#include "mt.h"
#include "race.h"
#include "sched_int.h"

#define DEAD_PERIODS 3

/* ---- small helpers */

static uint64_t rng_next(sched_t *s) {
    uint64_t x = s->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    s->rng = x;
    uint64_t v = x * 2685821657736338717ULL;
    return v ? v : 1;
}

char *sched_identity_of(const char *gpu, const char *backend, const char *compiler, const char *kernel_hash,
                        const char *versions) {
    const char *part[] = {gpu, backend, compiler, kernel_hash, versions};
    size_t n = sizeof part / sizeof part[0], len = n;
    for (size_t i = 0; i < n; i++) len += part[i] ? strlen(part[i]) : 0;
    char *out = mt_malloc(len), *p = out;
    if (!out) return NULL;
    for (size_t i = 0; i < n; i++) {
        size_t k = part[i] ? strlen(part[i]) : 0;
        memcpy(p, part[i] ? part[i] : "", k);
        p += k;
        *p++ = i + 1 < n ? SCHED_ID_SEP : '\0';
    }
    return out;
}

const char *sched_identity_text(const char *identity, char *buf, size_t len) {
    size_t o = 0;
    if (!len) return buf;
    for (const char *p = identity ? identity : ""; *p && o + 4 < len; p++) {
        if (*p != SCHED_ID_SEP) {
            buf[o++] = *p;
            continue;
        }
        memcpy(buf + o, " / ", 3);
        o += 3;
    }
    buf[o] = '\0';
    return buf;
}

/* The identity a Hello announces (sched_identity_of). */
static char *hello_identity(const Moetune__Hello *h) {
    return sched_identity_of(h->gpu ? h->gpu->name : "", h->backend, h->compiler, h->kernel_hash, h->versions);
}

static int bs_index(const sweep_t *sw, uint32_t b) {
    size_t lo = 0, hi = sw->nb;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (sw->bs[mid] < b)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < sw->nb && sw->bs[lo] == b ? (int)lo : -1;
}

/* ---- caches */

static const krn_shape_t *shape_get(sched_t *s, uint64_t id) {
    for (size_t i = 0; i < s->n_shapes; i++)
        if (s->shapes[i].id == id) return &s->shapes[i].shape;
    if (mt_grow((void **)&s->shapes, &s->cap_shapes, s->n_shapes + 1, sizeof *s->shapes, 16)) return NULL;
    shape_entry_t *e = &s->shapes[s->n_shapes];
    if (store_shape_get(s->db, id, &e->shape)) return NULL;
    e->id = id;
    s->n_shapes++;
    return &e->shape;
}

static const krn_config_t *config_get(sched_t *s, uint64_t id) {
    if (id >= s->cap_cfgs && mt_grow((void **)&s->cfgs, &s->cap_cfgs, id + 1, sizeof *s->cfgs, 16)) return NULL;
    krn_config_t *c = &s->cfgs[id];
    if (c->block_m == 0 && store_config_get(s->db, id, c)) {
        memset(c, 0, sizeof *c);
        return NULL;
    }
    return c;
}

/* ---- state changes */

/* A sweep bound to a measuring identity by a lease that went back before anything of it was
 * measured (no row committed, none waiting, nothing leased) is unbound: its first worker died
 * or left, and the sweep may go to whichever worker comes next instead of waiting for that one. */
static void sweep_unbind_if_empty(sched_t *s, sweep_t *sw) {
    if (!sw->device || sw->done || sw->jobs_by_state[WIRE_JOB_LEASED]) return;
    for (size_t i = 0; i < s->n_pending; i++)
        if (s->pending[i].job->sw == sw) return;
    for (size_t i = 0; s->inflight && i < s->inflight->n_res; i++)
        if (s->inflight->res[i].e.job->sw == sw) return;
    log_at(MT_LOG_INFO, "sweep %llu: unbound (its leases went back before any result)", (unsigned long long)sw->id);
    free(sw->device);
    sw->device = NULL;
}

/* Back to pending (or failed at max_attempts) from whatever lease it had. */
static void job_requeue(sched_t *s, job_t *j, bool count_attempt, const char *why) {
    if (j->state != WIRE_JOB_LEASED && j->state != WIRE_JOB_PENDING) return;
    sched_job_release(j);
    if (count_attempt) j->attempts++;
    s->c.requeued_jobs++;
    if (count_attempt && j->attempts >= j->sw->max_attempts) {
        log_at(MT_LOG_WARN, "job %llu failed: %s (attempt %u of %u)", (unsigned long long)j->id, why, j->attempts,
               j->sw->max_attempts);
        sched_job_finish(s, j, WIRE_JOB_FAILED);
        return;
    }
    log_at(MT_LOG_INFO, "job %llu back to pending: %s (attempts %u)", (unsigned long long)j->id, why, j->attempts);
    if (j->state != WIRE_JOB_PENDING) sched_set_job_state(j, WIRE_JOB_PENDING);
    if (j->idx < j->sw->hint) j->sw->hint = j->idx;
    sched_job_dirty(s, j);
    sweep_unbind_if_empty(s, j->sw);
}

/* ---- workers */

/* Every job w holds goes back to pending. */
static void worker_release_all(sched_t *s, sched_worker_t *w, bool count_attempt, const char *why) {
    while (w->n_held) job_requeue(s, w->held[w->n_held - 1], count_attempt, why);
}

static void dispatch(sched_t *s, sched_worker_t *w, uint64_t now_ms);

void sched_dispatch_all(sched_t *s, uint64_t now_ms) {
    for (size_t i = 0; i < s->n_workers; i++)
        if (s->workers[i]->alive && s->workers[i]->credits) dispatch(s, s->workers[i], now_ms);
}

/* Sends a refusal to the peer of a Hello (it stops; it does not retry) and logs it. */
static mt_status_t refuse_hello(sched_t *s, const uint8_t *rid, size_t rid_len, const char *why) {
    wire_env_t out;
    Moetune__Error e = MOETUNE__ERROR__INIT;
    e.code = WIRE_E_REFUSED;
    e.message = (char *)why;
    wire_env_wrap(&out, &e.base);
    if (s->o.send) s->o.send(s->o.send_ctx, rid, rid_len, &out);
    log_at(MT_LOG_WARN, "hello refused: %s", why);
    return MT_INVAL;
}

/* Why a Hello from rid is refused, into why, or NULL: its worker id is not its routing id
 * (leases are kept by id), or a live worker of another process holds that id. */
static const char *hello_conflict(const sched_t *s, const sched_worker_t *w, const uint8_t *rid, size_t rid_len,
                                  const Moetune__Hello *h, uint64_t now_ms, char *why, size_t len) {
    const char *id = h->worker_id ? h->worker_id : "";
    if (strlen(id) != rid_len || memcmp(id, rid, rid_len) != 0)
        return mt_fmt(why, len, "worker id '%s' is not the connection's routing id '%.*s'", id, (int)rid_len,
                      (const char *)rid);
    const Moetune__Hello *o = w && w->alive && w->hello ? w->hello->hello : NULL;
    if (!o || now_ms - w->last_heard > (uint64_t)DEAD_PERIODS * s->o.heartbeat_ms) return NULL;
    const char *oh = o->host ? o->host : "", *nh = h->host ? h->host : "";
    if (o->pid == h->pid && strcmp(oh, nh) == 0) return NULL; /* the same process, reconnecting */
    return mt_fmt(why, len,
                  "worker id '%s' is in use by host %s pid %u (heard %llu ms ago); this hello came from host %s "
                  "pid %u: give each worker its own --id",
                  id, oh, o->pid, (unsigned long long)(now_ms - w->last_heard), nh, h->pid);
}

mt_status_t sched_on_hello(sched_t *s, const uint8_t *rid, size_t rid_len, wire_env_t **env, uint64_t now_ms) {
    const Moetune__Hello *h = (*env)->hello;
    char why[512];
    sched_worker_t *w = sched_worker_find(s, rid, rid_len);
    if (hello_conflict(s, w, rid, rid_len, h, now_ms, why, sizeof why)) return refuse_hello(s, rid, rid_len, why);
    char *id = mt_strdup(h->worker_id ? h->worker_id : "");
    char *identity = hello_identity(h);
    if (!w) w = sched_worker_add(s, rid, rid_len);
    if (!id || !identity || !w) {
        free(id);
        free(identity);
        return MT_NOMEM;
    }
    /* what it measures with changed (another GPU, toolkit or kernel build): what it holds was
     * leased to the identity it had, so none of it may come back measured by this one */
    if (w->identity && strcmp(w->identity, identity) != 0 && w->n_held) {
        char was[1024], now[1024];
        log_at(MT_LOG_WARN, "worker %s said hello as %s, no longer %s: its %zu leases go back", id,
               sched_identity_text(identity, now, sizeof now), sched_identity_text(w->identity, was, sizeof was),
               w->n_held);
        worker_release_all(s, w, false, "its worker's measuring identity changed");
    }
    /* It keeps its leases; its first heartbeat says which of them it still holds. */
    w->await_hb = w->n_held > 0;
    for (size_t i = 0; i < w->n_held; i++) w->held[i]->reclaim = true;
    if (w->n_held)
        log_at(MT_LOG_INFO, "worker %s said hello holding %zu leases; its heartbeat settles them", id, w->n_held);
    wire_free(&w->hello);
    w->hello = *env;
    *env = NULL;
    free(w->id);
    w->id = id;
    free(w->identity);
    w->identity = identity;
    /* leases kept for it across a restart are for the sweeps its identity still measures */
    for (size_t i = 0; i < w->n_held;) {
        job_t *j = w->held[i];
        if (sched_worker_matches(w, j->sw)) {
            i++;
            continue;
        }
        job_requeue(s, j, false, "its holder came back with another measuring identity");
    }
    w->alive = true;
    w->credits = 0;
    w->last_heard = now_ms;
    w->device_id = 0;
    uint64_t dev = 0;
    if (store_hello(s->db, h, mt_wall_s(), &dev))
        log_at(MT_LOG_WARN, "worker %s: not recorded yet (%s); it is recorded with its first results", w->id,
               store_errmsg(s->db));
    else
        w->device_id = dev;
    log_at(MT_LOG_INFO, "worker %s joined: host %s pid %u backend %s gpu '%s' compiler %s", w->id,
           h->host ? h->host : "", h->pid, h->backend ? h->backend : "", sched_worker_gpu(w),
           h->compiler ? h->compiler : "");
    wire_env_t out;
    Moetune__Welcome wel = MOETUNE__WELCOME__INIT;
    wel.heartbeat_ms = s->o.heartbeat_ms;
    wel.lease_ms = s->o.lease_ms;
    wire_env_wrap(&out, &wel.base);
    sched_send_env(s, w, &out);
    sched_dispatch_all(s, now_ms); /* jobs it gave back may go to others */
    return MT_OK;
}

void sched_on_heard(sched_t *s, sched_worker_t *w, uint64_t now_ms) {
    bool changed = false;
    w->last_heard = now_ms;
    /* an expired lease is not revived by a late message: the job goes back first */
    for (size_t i = 0; i < w->n_held;) {
        job_t *j = w->held[i];
        if (now_ms > j->lease_expires) {
            job_requeue(s, j, true, "lease expired");
            changed = true;
            continue;
        }
        i++;
    }
    if (changed) sched_dispatch_all(s, now_ms);
}

/* w made progress: every lease it holds runs lease_ms from now (the jobs queued behind the one
 * it measures wait on that one). A lease already expired is left to expire. */
static void leases_renew(sched_t *s, sched_worker_t *w, uint64_t now_ms) {
    for (size_t i = 0; i < w->n_held; i++) {
        job_t *j = w->held[i];
        if (now_ms <= j->lease_expires) j->lease_expires = now_ms + s->o.lease_ms;
    }
}

/* Whether w's claim that it measures config cfg_id of job job_id is progress: the job is
 * leased to w, the config is one the job still waits for, and either it is a config w began
 * since its last claim (a config at most once, a side-by-side job's once per round) or the
 * same config, within its config timeout since w began it. */
static bool claim_is_progress(sched_t *s, sched_worker_t *w, uint64_t job_id, uint64_t cfg_id, uint64_t now_ms) {
    job_t *j = job_id ? sched_job_lookup(s, job_id) : NULL;
    if (!j || j->state != WIRE_JOB_LEASED || j->holder != w || now_ms > j->lease_expires || !cfg_id) return false;
    jcfg_t *c = NULL;
    for (size_t i = 0; i < j->n_cfgs && !c; i++)
        if (j->cfgs[i].config_id == cfg_id && (!j->cfgs[i].removed || j->cfgs[i].moved)) c = &j->cfgs[i];
    if (!c || c->received || c->rows >= sched_job_nb(j)) return false;
    if (j->claim_cfg == cfg_id) {
        uint32_t t = sched_job_measure(j)->timeout_ms;
        return now_ms - j->claim_since <= (uint64_t)(t ? t : 60000);
    }
    if (c->claims >= (sched_job_side_by_side(j) ? WIRE_SIDE_BY_SIDE_ROUNDS : 1u)) return false;
    c->claims++;
    j->claim_cfg = cfg_id;
    j->claim_since = now_ms;
    return true;
}

void sched_on_progress(sched_t *s, sched_worker_t *w, uint64_t job_id, uint64_t cfg_id, uint64_t now_ms) {
    if (claim_is_progress(s, w, job_id, cfg_id, now_ms)) leases_renew(s, w, now_ms);
}

void sched_on_heartbeat(sched_t *s, sched_worker_t *w, const uint64_t *job_ids, size_t n, uint64_t now_ms) {
    if (!w->await_hb) return;
    w->await_hb = false;
    bool changed = false;
    for (size_t i = 0; i < w->n_held;) {
        job_t *j = w->held[i];
        bool listed = false;
        for (size_t k = 0; k < n && !listed; k++) listed = job_ids[k] == j->id;
        if (!j->reclaim || listed) {
            j->reclaim = false;
            i++;
            continue;
        }
        j->reclaim = false;
        job_requeue(s, j, false, "its worker no longer holds it");
        changed = true;
    }
    if (changed) sched_dispatch_all(s, now_ms);
}

void sched_on_ready(sched_t *s, sched_worker_t *w, uint32_t credits, uint64_t now_ms) {
    uint64_t c = (uint64_t)w->credits + credits;
    w->credits = c > WIRE_MAX_HELD ? WIRE_MAX_HELD : (uint32_t)c;
    dispatch(s, w, now_ms);
}

void sched_dispatch_capped(sched_t *s, uint64_t now_ms) {
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        if (!w->capped || w->n_held >= WIRE_MAX_HELD) continue;
        w->capped = false;
        if (w->alive && w->credits) dispatch(s, w, now_ms);
    }
}

void sched_on_bye(sched_t *s, sched_worker_t *w, uint64_t now_ms) {
    log_at(MT_LOG_INFO, "worker %s said bye", w->id);
    worker_release_all(s, w, false, "its worker left");
    w->alive = false;
    w->credits = 0;
    sched_dispatch_all(s, now_ms);
}

/* ---- dispatch */

static bool other_live_worker(const sched_t *s, const sched_worker_t *w, const sweep_t *sw) {
    for (size_t i = 0; i < s->n_workers; i++) {
        const sched_worker_t *o = s->workers[i];
        if (o != w && o->alive && sched_worker_matches(o, sw)) return true;
    }
    return false;
}

/* The first pending job in (sweep id, phase 2 first, job id) order that w may take. A
 * phase-2 job (halving's finalists, the decide step's near-ties) is what its shape's answer
 * waits on, so it goes before any first-pass job of its sweep. */
static job_t *pick(sched_t *s, sched_worker_t *w) {
    for (size_t i = 0; i < s->n_sweeps; i++) {
        sweep_t *sw = s->sweeps[i];
        if (sw->state != WIRE_SWEEP_RUNNING || !sw->jobs_by_state[WIRE_JOB_PENDING] || !sched_worker_matches(w, sw))
            continue;
        while (sw->hint < sw->n_jobs && sw->jobs[sw->hint]->state != WIRE_JOB_PENDING) sw->hint++;
        int other = -1;
        job_t *first = NULL;
        /* without a pending phase-2 job the first pending job is the answer, without a scan of
         * the rest (the scan, while a sweep's decide rows were still to commit, was a few % of
         * the loop's time on a cluster sweep) */
        bool want2 = sw->pending2 > 0;
        for (size_t k = sw->hint; k < sw->n_jobs; k++) {
            job_t *j = sw->jobs[k];
            if (j->state != WIRE_JOB_PENDING) continue;
            if (j->avoid && strcmp(j->avoid, w->id) == 0) {
                if (other < 0) other = other_live_worker(s, w, sw);
                if (other) continue;
            }
            if (j->phase == 2 || !want2) return j;
            if (!first) first = j;
        }
        if (first) return first;
    }
    return NULL;
}

/* Builds and sends the Job for j leased to w. MT_NOTFOUND when nothing is left to measure. */
static int send_job(sched_t *s, sched_worker_t *w, job_t *j) {
    const krn_shape_t *sh = shape_get(s, j->shape_id);
    if (!sh) return MT_IO;
    if (j->n_cfgs > s->cap_jc) {
        void *a = mt_realloc(s->jc, j->n_cfgs * sizeof *s->jc);
        if (a) s->jc = a;
        void *b = mt_realloc(s->jcp, j->n_cfgs * sizeof *s->jcp);
        if (b) s->jcp = b;
        void *c = mt_realloc(s->jcfg, j->n_cfgs * sizeof *s->jcfg);
        if (c) s->jcfg = c;
        if (!a || !b || !c) return MT_NOMEM;
        s->cap_jc = j->n_cfgs;
    }
    size_t n = 0;
    for (size_t i = 0; i < j->n_cfgs; i++) {
        const jcfg_t *c = &j->cfgs[i];
        if (c->removed || c->rows >= sched_job_nb(j)) continue;
        const krn_config_t *k = config_get(s, c->config_id);
        if (!k) return MT_IO;
        moetune__job_config__init(&s->jc[n]);
        wire_config_to_msg(k, &s->jcfg[n]);
        s->jc[n].config_id = c->config_id;
        s->jc[n].config = &s->jcfg[n];
        s->jcp[n] = &s->jc[n];
        n++;
    }
    if (n == 0) return MT_NOTFOUND;
    if (mt_grow((void **)&s->best, &s->cap_best, sched_job_nb(j), sizeof *s->best, 16)) return MT_NOMEM;
    sched_job_bests(s, j, s->best);
    Moetune__Shape shape;
    wire_shape_to_msg(sh, &shape);
    Moetune__Job job = MOETUNE__JOB__INIT;
    job.job_id = j->id;
    job.lease_token = j->token;
    job.sweep_id = j->sw->id;
    job.shape = &shape;
    job.n_configs = n;
    job.configs = s->jcp;
    job.n_batch_sizes = sched_job_nb(j);
    job.batch_sizes = (uint32_t *)sched_job_bs(j);
    job.measure = (Moetune__Measure *)sched_job_measure(j);
    job.n_best_us = sched_job_nb(j);
    job.best_us = s->best;
    job.routing_path = j->sw->routing_path ? j->sw->routing_path : "";
    job.rounds = sched_job_side_by_side(j) ? WIRE_SIDE_BY_SIDE_ROUNDS : 0;
    wire_env_t env;
    wire_env_wrap(&env, &job.base);
    return sched_send_env(s, w, &env);
}

static void dispatch(sched_t *s, sched_worker_t *w, uint64_t now_ms) {
    while (w->alive && w->credits) {
        if (w->n_held >= WIRE_MAX_HELD) {
            w->capped = true; /* its credit waits for one of its jobs to end */
            return;
        }
        job_t *j = pick(s, w);
        if (!j) j = sched_job_split(s, w);
        if (!j) return;
        if (mt_grow((void **)&w->held, &w->cap_held, w->n_held + 1, sizeof *w->held, 16)) return;
        char *holder_id = mt_strdup(w->id); /* the job row's worker_id, before anything is sent */
        char *device = j->sw->device ? NULL : mt_strdup(w->identity);
        if (!holder_id || (!j->sw->device && !device)) {
            free(holder_id);
            free(device);
            return;
        }
        j->reclaim = false;
        uint64_t old_token = j->token;
        j->token = rng_next(s);
        int rc = send_job(s, w, j);
        if (rc == MT_NOTFOUND) {
            free(holder_id);
            free(device);
            j->token = old_token;
            sched_job_finish(s, j, WIRE_JOB_DONE);
            continue;
        }
        if (rc) {
            free(holder_id);
            free(device);
            j->token = old_token;
            log_at(MT_LOG_ERROR, "job %llu not sent to %s (%d)", (unsigned long long)j->id, w->id, rc);
            return;
        }
        if (device) {
            char text[1024];
            j->sw->device = device;
            log_at(MT_LOG_INFO,
                   "sweep %llu bound to %s (its first lease, to %s): only workers of that GPU model, backend, "
                   "compiler, kernel and versions measure it, so its answer is for one device and build, from "
                   "the whole space",
                   (unsigned long long)j->sw->id, sched_identity_text(device, text, sizeof text), w->id);
        }
        j->claim_cfg = 0;
        for (size_t i = 0; i < j->n_cfgs; i++) j->cfgs[i].claims = 0;
        sched_set_job_state(j, WIRE_JOB_LEASED);
        sched_worker_hold(w, j); /* room was made above */
        w->credits--;
        j->lease_expires = now_ms + s->o.lease_ms;
        j->lease_expires_wall_ms = sched_wall_ms() + s->o.lease_ms;
        free(j->last_worker);
        j->last_worker = holder_id;
        sched_job_dirty(s, j);
        log_at(MT_LOG_INFO, "job %llu (sweep %llu) leased to %s, attempt %u", (unsigned long long)j->id,
               (unsigned long long)j->sw->id, w->id, j->attempts + 1);
    }
}

/* ---- results */

static int reject(sched_t *s, sched_worker_t *w, uint64_t seq, uint64_t job_id, const char *why) {
    s->c.rejected_results++;
    sched_ack_push(w, seq);
    log_at(MT_LOG_WARN, "result seq %llu from %s for job %llu rejected: %s", (unsigned long long)seq, w->id,
           (unsigned long long)job_id, why);
    return MT_INVAL;
}

/* A Result from the lease holder, with the job's token, that cannot be stored: the
 * job goes back to pending with an attempt (failed at max_attempts), so a worker
 * that keeps sending what cannot be stored never holds a lease forever. */
static int reject_holder(sched_t *s, sched_worker_t *w, job_t *j, uint64_t seq, const char *why, uint64_t now_ms) {
    char reason[224];
    reject(s, w, seq, j->id, why);
    job_requeue(s, j, true, mt_fmt(reason, sizeof reason, "its holder sent a result that cannot be stored (%s)", why));
    sched_dispatch_all(s, now_ms);
    return MT_INVAL;
}

void sched_on_bad(sched_t *s, sched_worker_t *w, const wire_reject_t *rej, uint64_t now_ms) {
    char why[320];
    job_t *j = rej->job_id ? sched_job_lookup(s, rej->job_id) : NULL;
    if (j && j->state == WIRE_JOB_LEASED && j->holder == w && j->token == rej->lease_token) {
        reject_holder(s, w, j, rej->seq, rej->reason, now_ms);
        return;
    }
    if (rej->job_id) {
        /* an invalid Result for a lease it does not hold: stale, nothing waits on it */
        reject(s, w, rej->seq, rej->job_id, rej->reason);
        return;
    }
    if (!w->n_held) return;
    /* which job it was about is unknown: every lease it holds goes back, with an attempt */
    mt_fmt(why, sizeof why, "its holder sent a message that does not decode (%s)", rej->reason);
    worker_release_all(s, w, true, why);
    sched_dispatch_all(s, now_ms);
}

/* First crash of a config: take it out of its job into a new job that avoids w.
 * Written at once in its own transaction (rare). Memory for the new job is taken
 * before the commit, so memory and database never disagree: on any failure neither
 * changes and the caller requeues the job. */
static int crash_first(sched_t *s, sched_worker_t *w, job_t *j, size_t ci, uint64_t now_ms) {
    jcfg_t *c = &j->cfgs[ci];
    uint64_t new_id = 0;
    uint32_t count = 0;
    job_t *nj = mt_calloc(1, sizeof *nj);
    jcfg_t *ncfg = mt_calloc(1, sizeof *ncfg);
    char *avoid = mt_strdup(w->id);
    if (!nj || !ncfg || !avoid) goto nomem;
    int rc = store_begin(s->db);
    if (!rc) rc = store_crash_bump(s->db, j->sw->id, j->shape_id, c->config_id, w->id, &count);
    if (!rc) rc = store_job_config_delete(s->db, j->id, c->config_id);
    char bs_text[2048] = "";
    uint32_t *nbs = j->bs ? mt_malloc(j->nb * sizeof *nbs) : NULL;
    if (j->bs && (!nbs || halving_bs_format(j->bs, j->nb, bs_text, sizeof bs_text))) {
        free(nbs);
        store_rollback(s->db);
        goto nomem;
    }
    if (nbs) memcpy(nbs, j->bs, j->nb * sizeof *nbs);
    nj->bs = nbs; /* the retry keeps the job's phase and batch sizes */
    nj->nb = j->nb;
    nj->phase = j->phase;
    if (!rc)
        rc = store_job_insert_phase(s->db, j->sw->id, j->shape_id, j->phase, j->bs ? bs_text : NULL, w->id, mt_wall_s(),
                                    &new_id);
    if (!rc) rc = store_job_config_insert(s->db, new_id, c->config_id);
    if (!rc && sched_job_index_reserve(s, j->sw, new_id)) {
        store_rollback(s->db);
        goto nomem;
    }
    if (!rc) rc = store_commit(s->db);
    if (rc) {
        log_at(MT_LOG_ERROR, "crash of config %llu in job %llu not recorded: %s", (unsigned long long)c->config_id,
               (unsigned long long)j->id, store_errmsg(s->db));
        store_rollback(s->db);
        s->c.commit_failures++;
        sched_job_free(nj);
        free(ncfg);
        free(avoid);
        return rc;
    }
    nj->id = new_id;
    nj->sw = j->sw;
    nj->shape_id = j->shape_id;
    nj->state = WIRE_JOB_PENDING;
    nj->avoid = avoid;
    nj->cfgs = ncfg;
    nj->n_cfgs = 1;
    ncfg->config_id = c->config_id;
    nj->rows_needed = sched_job_nb(nj);
    sched_job_index(s, nj); /* room reserved above: cannot fail */
    c->removed = true;
    c->to = nj;
    j->rows_needed -= sched_job_nb(j);
    j->rows_done -= c->rows;
    log_at(MT_LOG_WARN, "config %llu crashed %s's child in job %llu: retried alone in job %llu elsewhere",
           (unsigned long long)c->config_id, w->id, (unsigned long long)j->id, (unsigned long long)new_id);
    if (j->rows_done >= j->rows_needed && (j->state == WIRE_JOB_PENDING || j->state == WIRE_JOB_LEASED))
        sched_job_finish(s, j, WIRE_JOB_DONE);
    sched_dispatch_all(s, now_ms);
    return MT_OK;
nomem:
    log_at(MT_LOG_ERROR, "out of memory recording the crash of config %llu in job %llu",
           (unsigned long long)c->config_id, (unsigned long long)j->id);
    sched_job_free(nj);
    free(ncfg);
    free(avoid);
    return MT_NOMEM;
}

mt_status_t sched_on_result(sched_t *s, sched_worker_t *w, wire_env_t **env, uint64_t now_ms) {
    const Moetune__Result *r = (*env)->result;
    char why[160];
    job_t *j = sched_job_lookup(s, r->job_id);
    /* Only the current lease may deliver: leased, same token, same holder, not expired. */
    if (!j) return reject(s, w, r->seq, r->job_id, "unknown job");
    /* late: the holder of a done job measured a config a split moved, which its new job still needs */
    bool late = false;
    if (j->state == WIRE_JOB_DONE && r->lease_token == j->token) {
        const char *drop = sched_late_result(j, r->config_id, &late);
        if (drop) {
            sched_ack_push(w, r->seq);
            log_at(MT_LOG_INFO, "result seq %llu from %s for config %llu of done job %llu dropped: %s",
                   (unsigned long long)r->seq, w->id, (unsigned long long)r->config_id, (unsigned long long)j->id,
                   drop);
            return MT_OK;
        }
    }
    if (!late && j->state != WIRE_JOB_LEASED) {
        mt_fmt(why, sizeof why, "job is %s, not leased", wire_job_state_name(j->state));
        return reject(s, w, r->seq, r->job_id, why);
    }
    if (!late && r->lease_token != j->token) return reject(s, w, r->seq, r->job_id, "lease token is not the job's");
    if (!late && j->holder != w) {
        mt_fmt(why, sizeof why, "lease is held by %s", j->holder ? j->holder->id : "nobody");
        return reject(s, w, r->seq, r->job_id, why);
    }
    if (!late && now_ms > j->lease_expires) return reject(s, w, r->seq, r->job_id, "lease expired");
    size_t ci = j->n_cfgs;
    const job_t *other = NULL;
    for (size_t i = 0; i < j->n_cfgs; i++) {
        if (j->cfgs[i].config_id == r->config_id && (!j->cfgs[i].removed || j->cfgs[i].moved)) {
            ci = i;
            break;
        }
    }
    if (ci == j->n_cfgs && (other = sched_config_elsewhere(j, r->config_id)) != NULL) {
        /* moved by a split before a restart, which this scheduler does not remember (it was
         * restarted: the database is the truth): the job that holds it now measures it */
        sched_ack_push(w, r->seq);
        log_at(MT_LOG_INFO, "result seq %llu from %s for config %llu dropped: job %llu holds it, not job %llu",
               (unsigned long long)r->seq, w->id, (unsigned long long)r->config_id, (unsigned long long)other->id,
               (unsigned long long)j->id);
        return MT_OK;
    }
    if (ci == j->n_cfgs) {
        mt_fmt(why, sizeof why, "config %llu is not in the job", (unsigned long long)r->config_id);
        return reject_holder(s, w, j, r->seq, why, now_ms);
    }
    sweep_t *sw = j->sw;
    if (r->n_measurements != sched_job_nb(j)) {
        mt_fmt(why, sizeof why, "%zu measurements for %zu batch sizes", r->n_measurements, sched_job_nb(j));
        return reject_holder(s, w, j, r->seq, why, now_ms);
    }
    if (++sw->stamp == 0) {
        memset(sw->seen, 0, sw->nb * sizeof *sw->seen);
        sw->stamp = 1;
    }
    size_t crashed = 0;
    for (size_t i = 0; i < r->n_measurements; i++) {
        int bi = bs_index(sw, r->measurements[i]->batch_size);
        /* a job of one batch size between the keys (the ship guard's) has no index: it cannot repeat */
        bool gap = bi < 0 && j->bs && j->nb == 1 && r->n_measurements == 1;
        if ((bi < 0 && !gap) || !sched_job_has_bs(j, r->measurements[i]->batch_size) ||
            (!gap && sw->seen[bi] == sw->stamp)) {
            mt_fmt(why, sizeof why, "batch size %u is not one of the job's or repeats", r->measurements[i]->batch_size);
            return reject_holder(s, w, j, r->seq, why, now_ms);
        }
        if (!gap) sw->seen[bi] = sw->stamp;
        if (r->measurements[i]->status == MOETUNE__STATUS__STATUS_CRASHED) crashed++;
    }
    bool crash = crashed == r->n_measurements;
    if (crash && j->cfgs[ci].moved) {
        /* the config's crash is for the job a split moved it to: its holder records it */
        sched_ack_push(w, r->seq);
        log_at(MT_LOG_INFO, "crash of config %llu in job %llu dropped: a split moved it to job %llu",
               (unsigned long long)r->config_id, (unsigned long long)j->id, (unsigned long long)j->cfgs[ci].to->id);
        return MT_OK;
    }
    if (crash) {
        uint32_t count = 0;
        int rc = store_crash_count(s->db, sw->id, j->shape_id, r->config_id, &count);
        if (!rc && count == 0) rc = crash_first(s, w, j, ci, now_ms);
        if (rc) {
            /* not recorded (storage): the job runs again later, so nothing is lost */
            job_requeue(s, j, false, "its crash could not be recorded");
            sched_dispatch_all(s, now_ms);
        }
        if (rc || count == 0) {
            sched_ack_push(w, r->seq);
            return rc;
        }
        log_at(MT_LOG_WARN, "config %llu crashed again on %s: quarantined", (unsigned long long)r->config_id, w->id);
    }
    if (mt_grow((void **)&s->pending, &s->cap_pending, s->n_pending + 1, sizeof *s->pending, 16)) return MT_NOMEM;
    entry_t *e = &s->pending[s->n_pending++];
    memset(e, 0, sizeof *e);
    e->env = *env;
    *env = NULL;
    e->w = w;
    e->job = j;
    e->cfg = ci;
    e->crash = crash;
    size_t oci = ci;
    job_t *owner = sched_cfg_owner(j, &oci); /* where a split moved it, the job that waits for it */
    if (owner) owner->cfgs[oci].received = true;
    leases_renew(s, w, now_ms); /* a result is progress */
    log_at(MT_LOG_DEBUG, "result seq %llu from %s: job %llu config %llu", (unsigned long long)r->seq, w->id,
           (unsigned long long)j->id, (unsigned long long)r->config_id);
    return MT_OK;
}

/* ---- timers */

void sched_tick(sched_t *s, uint64_t now_ms) {
    bool changed = false;
    if (now_ms >= s->next_hb) {
        s->next_hb = now_ms + s->o.heartbeat_ms;
        Moetune__Heartbeat hb = MOETUNE__HEARTBEAT__INIT;
        hb.sent_ms = now_ms;
        wire_env_t env;
        wire_env_wrap(&env, &hb.base);
        for (size_t i = 0; i < s->n_workers; i++) {
            sched_worker_t *w = s->workers[i];
            if (!w->alive) continue;
            if (now_ms - w->last_heard > (uint64_t)DEAD_PERIODS * s->o.heartbeat_ms) {
                log_at(MT_LOG_WARN, "worker %s dead: silent for %llu ms", w->id,
                       (unsigned long long)(now_ms - w->last_heard));
                w->alive = false;
                w->credits = 0;
                s->c.dead_workers++;
                worker_release_all(s, w, true, "its worker went silent");
                changed = true;
                continue;
            }
            sched_send_env(s, w, &env);
        }
    }
    for (size_t i = 0; i < s->n_workers; i++) {
        sched_worker_t *w = s->workers[i];
        for (size_t k = 0; k < w->n_held;) {
            job_t *j = w->held[k];
            if (now_ms > j->lease_expires) {
                job_requeue(s, j, true, "lease expired");
                changed = true;
            } else {
                k++;
            }
        }
    }
    sched_rate_sample(s, now_ms);
    if (changed) sched_dispatch_all(s, now_ms);
}

/* ---- control */

sweep_t *sched_sweep_lookup(sched_t *s, uint64_t id) {
    for (size_t i = 0; i < s->n_sweeps; i++)
        if (s->sweeps[i]->id == id) return s->sweeps[i];
    return NULL;
}

mt_status_t sched_cancel(sched_t *s, uint64_t sweep_id, uint32_t *jobs_cancelled, uint64_t now_ms) {
    sweep_t *sw = sched_sweep_lookup(s, sweep_id);
    uint32_t n = 0;
    if (!sw) return MT_NOTFOUND;
    if (sw->state == WIRE_SWEEP_RUNNING) {
        sw->state = WIRE_SWEEP_CANCELLED; /* first, so finishing jobs do not mark it done */
        sw->finished = mt_wall_s();
        sw->dirty = true;
        for (size_t i = 0; i < sw->n_jobs; i++) {
            job_t *j = sw->jobs[i];
            if (j->state == WIRE_JOB_PENDING || j->state == WIRE_JOB_LEASED) {
                sched_job_finish(s, j, WIRE_JOB_CANCELLED);
                n++;
            }
        }
        log_at(MT_LOG_INFO, "sweep %llu cancelled: %u jobs", (unsigned long long)sweep_id, n);
    }
    *jobs_cancelled = n;
    (void)now_ms;
    return MT_OK;
}
