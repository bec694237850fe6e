/* export_plan.c - what an export plans before it writes anything: the rows it takes
 * (checked), the near ties, each file's entries merged with the file it replaces, its
 * manifest record and its coverage. Below export.c (the plain layout) and export_engine.c
 * (the engine layouts); the writing is export_commit.c's. */
#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "export_int.h"
#include "export_layout.h"
#include "lookup.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "query.h"
#include "states.h"

typedef struct {
    exp_pair_fn fn;
    void *ctx;
    const shipguard_t *guard; /* leaves out rows measured only because of the guard (NULL: none) */
    dbq_result_t best, ru;
    char best_versions[512], ru_versions[512]; /* the rows' versions, kept past their callback */
    bool have, have_ru;
} pairs_t;

/* A directory name from the database must be one plain path component. */
static bool safe_component(const char *s) {
    if (!*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
              c == '.'))
            return false;
    }
    return true;
}

/* MT_OK for a directory name from the database that is one plain path component, else
 * MT_INVAL with the reason in err. */
int exp_check_dir_name(const char *s, char *err, size_t errlen) {
    if (safe_component(s)) return MT_OK;
    mt_fmt(err, errlen, "compiler directory '%s' in the database is not a plain name", s);
    return MT_INVAL;
}

/* The error of an export that selected no ok result: MT_NOTFOUND with the reason in err. */
int exp_no_results(const exp_opts_t *o, char *err, size_t errlen) {
    if (o->sweep_id)
        mt_fmt(err, errlen, "sweep %llu has no ok results to export", (unsigned long long)o->sweep_id);
    else
        mt_fmt(err, errlen, "the selected sweeps have no ok results to export");
    return MT_NOTFOUND;
}

/* MT_OK for a device name an export can put into a file name as it is; else MT_INVAL:
 * a name cut when read, a control character, ',' or '=' (the engines' file names
 * separate their fields with them: "NVIDIA H200,dtype=fp8_w8a8" would name an fp8 file),
 * or bytes that are not UTF-8. */
int exp_check_device_name(const dbq_result_t *r, char *err, size_t errlen) {
    char shown[160];
    size_t o = 0;
    const char *why = NULL;
    json_t *utf8 = json_string(r->device_name); /* NULL: not UTF-8 */
    bool is_utf8 = utf8 != NULL;
    json_decref(utf8);
    for (const unsigned char *p = (const unsigned char *)r->device_name; *p && o + 5 < sizeof shown; p++) {
        bool ctl = *p < 0x20 || *p == 0x7f;
        if (ctl || (*p >= 0x80 && !is_utf8)) { /* shown escaped: the message stays one line of text */
            o += (size_t)snprintf(shown + o, sizeof shown - o, "\\x%02x", *p);
            if (ctl && !why) why = "a control character";
            continue;
        }
        if ((*p == ',' || *p == '=') && !why) why = "',' or '=', the separators of the engines' file names";
        shown[o++] = (char)*p;
    }
    shown[o] = '\0';
    if (!why && r->device_name_cut) why = "more bytes than an export names (it never cuts a name)";
    if (!why && !is_utf8) why = "bytes that are not UTF-8 (no engine names a file so)";
    if (!why) return MT_OK;
    mt_fmt(err, errlen, "device name '%s' (sweep %llu%s%s) holds %s; no file written", shown,
           (unsigned long long)r->sweep_id, r->worker_id[0] ? ", worker " : "", r->worker_id, why);
    return MT_INVAL;
}

static void cfg_text(const krn_config_t *c, char *buf, size_t len) {
    snprintf(buf, len, "M%u N%u K%u G%u w%u s%u", c->block_m, c->block_n, c->block_k, c->group_m, c->num_warps,
             c->num_stages);
}

static bool cfg_eq(const krn_config_t *a, const krn_config_t *b) { return memcmp(a, b, sizeof *a) == 0; }

static void add_unique(json_t *arr, const char *s) {
    if (!s || !*s) return;
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        if (strcmp(json_string_value(x), s) == 0) return;
    }
    json_array_append_new(arr, json_string(s));
}

static void add_unique_int(json_t *arr, uint64_t v) {
    size_t i;
    json_t *x;
    json_array_foreach(arr, i, x) {
        if ((uint64_t)json_integer_value(x) == v) return;
    }
    json_array_append_new(arr, json_integer((json_int_t)v));
}

/* Rows are data: a damaged or hand-written value is refused, never exported. */
int exp_check_row(const dbq_result_t *r, char *bad, size_t len) {
    const char *what = NULL;
    double v = 0;
    if (r->batch_size == 0) {
        mt_fmt(bad, len,
               "result %llu (sweep %llu) has a batch size outside 1..4294967295 in the database; "
               "export refused: the row is damaged or was written by hand",
               (unsigned long long)r->result_id, (unsigned long long)r->sweep_id);
        return MT_INVAL;
    }
    if (!isfinite(r->median_us) || r->median_us <= 0)
        what = "median_us", v = r->median_us;
    else if (!isfinite(r->min_us) || r->min_us < 0)
        what = "min_us", v = r->min_us;
    else if (!isfinite(r->stddev_us) || r->stddev_us < 0)
        what = "stddev_us", v = r->stddev_us;
    else if (!isfinite(r->up_us) || r->up_us < 0)
        what = "up_us", v = r->up_us;
    else if (!isfinite(r->down_us) || r->down_us < 0)
        what = "down_us", v = r->down_us;
    if (!what) return MT_OK;
    mt_fmt(bad, len,
           "result %llu (sweep %llu, batch size %u) is ok but has %s %g (none reads as 0) in the "
           "database; export refused: a latency must be a positive finite number",
           (unsigned long long)r->result_id, (unsigned long long)r->sweep_id, r->batch_size, what, v);
    return MT_INVAL;
}

static bool same_cell(const dbq_result_t *a, const dbq_result_t *b) {
    return a->shape_id == b->shape_id && a->batch_size == b->batch_size && strcmp(a->export_dir, b->export_dir) == 0 &&
           strcmp(a->device_name, b->device_name) == 0;
}

static int pairs_flush(pairs_t *p) {
    if (!p->have) return 0;
    p->have = false;
    return p->fn(p->ctx, &p->best, p->have_ru ? &p->ru : NULL);
}

/* Rows come by cell, fastest first: the first is the pick, the first of another config its runner-up. */
static mt_status_t pairs_row(void *ctx, const dbq_result_t *r) {
    pairs_t *p = ctx;
    if (!shipguard_candidate(p->guard, r)) return 0; /* measured only because of the guard: no pick */
    if (p->have && same_cell(&p->best, r)) {
        if (!p->have_ru && r->config_id != p->best.config_id) {
            p->ru = *r;
            snprintf(p->ru_versions, sizeof p->ru_versions, "%s", r->versions ? r->versions : "");
            p->ru.versions = p->ru_versions;
            p->have_ru = true;
        }
        return 0;
    }
    int rc = pairs_flush(p);
    if (rc) return rc;
    p->best = *r;
    snprintf(p->best_versions, sizeof p->best_versions, "%s", r->versions ? r->versions : "");
    p->best.versions = p->best_versions;
    p->have = true;
    p->have_ru = false;
    return 0;
}

mt_status_t exp_pairs(dbq_t *q, const dbq_select_t *sel, const shipguard_t *guard, exp_pair_fn fn, void *ctx, char *err,
                      size_t errlen) {
    pairs_t *p = mt_calloc(1, sizeof *p);
    if (!p) return MT_NOMEM;
    p->guard = guard;
    p->fn = fn;
    p->ctx = ctx;
    int rc = dbq_export_rows(q, sel, false, pairs_row, p, err, errlen);
    if (rc == MT_OK) rc = pairs_flush(p);
    free(p);
    return rc;
}

/* An entry's runner-up and margin; near_ties gets the batch size of a near tie. */
static void near_tie_fields(json_t *e, const entry_t *ent, json_t *near_ties) {
    const dbq_result_t *r = ent->row, *u = ent->ru;
    if (!u) {
        json_object_set_new(e, "runner_up", json_null());
        json_object_set_new(e, "margin_sd", json_null());
        json_object_set_new(e, "near_tie", json_false());
        return;
    }
    double m = exp_margin_sd(r->median_us, r->stddev_us, u->median_us, u->stddev_us);
    json_object_set_new(e, "runner_up",
                        json_pack("{s:I, s:I, s:f, s:f, s:i}", "sweep_id", (json_int_t)u->sweep_id, "config_id",
                                  (json_int_t)u->config_id, "median_us", u->median_us, "stddev_us", u->stddev_us,
                                  "samples", (int)u->samples));
    json_object_set_new(e, "margin_sd", isfinite(m) ? json_real(m) : json_null());
    json_object_set_new(e, "near_tie", json_boolean(m < EXP_NEAR_TIE_SD));
    if (m < EXP_NEAR_TIE_SD) json_array_append_new(near_ties, json_integer(ent->bs));
}

/* The warm start of sweep_id's spec, or NULL. */
static const char *sweep_warm(const run_t *x, uint64_t sweep_id) {
    for (size_t i = 0; i < x->n_sampled; i++)
        if (x->sampled[i].sweep_id == sweep_id) return x->sampled[i].warm;
    return NULL;
}

static uint32_t sweep_sample(const run_t *x, uint64_t sweep_id) {
    for (size_t i = 0; i < x->n_sampled; i++)
        if (x->sampled[i].sweep_id == sweep_id) return x->sampled[i].sample;
    return 0;
}

/* The distinct sweeps of a file's entries. */
static size_t entry_sweeps(const entry_t *ents, size_t n, uint64_t *ids) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ents[i].row) continue;
        bool dup = false;
        for (size_t j = 0; j < k; j++) dup = dup || ids[j] == ents[i].row->sweep_id;
        if (!dup && k < MAX_FILE_SWEEPS) ids[k++] = ents[i].row->sweep_id;
    }
    return k;
}

/* Coverage of one file: the rows of its sweeps on its (dir, device, shape). Fills the
 * manifest's "coverage" object, whether it is complete, a one-line summary and, when
 * incomplete, the first shortfall in words. */
static json_t *file_coverage(const run_t *x, const dbq_result_t *first, const uint64_t *ids, size_t n_ids,
                             exp_file_t *f, char *why, size_t whylen) {
    json_t *cov = json_object(), *sweeps = json_object();
    bool complete = true, uniform = true;
    uint32_t sample = 0;
    uint64_t m0 = 0, p0 = 0;
    size_t n_bs = 0, used = 0;
    char not_done[160] = "";
    why[0] = '\0';
    f->coverage[0] = '\0';
    for (size_t s = 0; s < n_ids; s++) {
        json_t *sw = json_object(), *sizes = json_object();
        const char *state = "?";
        for (size_t i = 0; i < x->n_cov; i++) {
            const dbq_coverage_t *c = &x->cov[i];
            if (c->sweep_id != ids[s] || c->shape_id != first->shape_id ||
                strcmp(c->export_dir, first->export_dir) != 0 || strcmp(c->device_name, first->device_name) != 0)
                continue;
            state = c->state;
            char key[16];
            snprintf(key, sizeof key, "%u", c->batch_size);
            json_t *e = json_object();
            json_object_set_new(e, "measured", json_integer((json_int_t)c->measured));
            json_object_set_new(e, "planned", json_integer((json_int_t)c->planned));
            json_object_set_new(sizes, key, e);
            if (n_bs++ == 0) m0 = c->measured, p0 = c->planned;
            uniform = uniform && c->measured == m0 && c->planned == p0;
            if (used + 32 < sizeof f->coverage)
                used += (size_t)snprintf(f->coverage + used, sizeof f->coverage - used, "%sM=%u %llu/%llu",
                                         used ? ", " : "", c->batch_size, (unsigned long long)c->measured,
                                         (unsigned long long)c->planned);
            if (c->measured < c->planned && complete) {
                complete = false;
                mt_fmt(why, whylen,
                       "sweep %llu (%s) measured %llu of the %llu planned configs at batch size %u "
                       "on %s",
                       (unsigned long long)c->sweep_id, c->state, (unsigned long long)c->measured,
                       (unsigned long long)c->planned, c->batch_size, c->device_name);
            }
        }
        if (!wire_sweep_is(state, WIRE_SWEEP_DONE)) {
            if (complete) mt_fmt(why, whylen, "sweep %llu is %s, not done", (unsigned long long)ids[s], state);
            complete = false;
            size_t l = strlen(not_done);
            mt_fmt(not_done + l, sizeof not_done - l, "%ssweep %llu is %s", l ? ", " : "", (unsigned long long)ids[s],
                   state);
        }
        json_object_set_new(sw, "state", json_string(state));
        uint32_t n = sweep_sample(x, ids[s]);
        if (n) { /* the picks are the best of a sample, not of the space */
            json_object_set_new(sw, "sample", json_integer(n));
            if (!sample || n < sample) sample = n;
        }
        const char *warm = sweep_warm(x, ids[s]);
        if (warm) json_object_set_new(sw, "warm_start", json_string(warm));
        json_object_set_new(sw, "batch_sizes", sizes);
        char key[24];
        snprintf(key, sizeof key, "%llu", (unsigned long long)ids[s]);
        json_object_set_new(sweeps, key, sw);
    }
    if (uniform && n_bs > 1)
        mt_fmt(f->coverage, sizeof f->coverage, "%llu/%llu planned configs measured at each of %zu batch sizes",
               (unsigned long long)m0, (unsigned long long)p0, n_bs);
    f->sample = sample;
    if (sample) {
        size_t l = strlen(f->coverage);
        mt_fmt(f->coverage + l, sizeof f->coverage - l, "%sa sample: at most %u valid configs per shape (--sample)",
               l ? "; " : "", sample);
    }
    if (not_done[0]) {
        size_t l = strlen(f->coverage);
        mt_fmt(f->coverage + l, sizeof f->coverage - l, "%s%s", l ? "; " : "", not_done);
    }
    f->partial = !complete;
    json_object_set_new(cov, "complete", json_boolean(complete));
    json_object_set_new(cov, "sweeps", sweeps);
    return cov;
}

/* A shape in words, with its captured routing when it has one: two shapes that differ only
 * there must not read alike. */
void exp_shape_text(const krn_shape_t *s, char *buf, size_t len) {
    int n = snprintf(buf, len, "E=%u,N=%u,K=%u,topk=%u,%s", s->e, s->n, s->k, s->topk, s->dtype);
    if (s->block_n && n > 0 && (size_t)n < len)
        n += snprintf(buf + n, len - (size_t)n, ",block_shape=[%u,%u]", s->block_n, s->block_k);
    if (s->routing[0] && n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ",routing=%.12s", s->routing);
}

/* The shape a manifest record names; false when it names none. */
static bool record_shape(json_t *rec, krn_shape_t *s) {
    json_t *sh = json_object_get(rec, "shape");
    if (!json_is_object(sh)) return false;
    memset(s, 0, sizeof *s);
    s->e = (uint32_t)json_integer_value(json_object_get(sh, "E"));
    s->n = (uint32_t)json_integer_value(json_object_get(sh, "N"));
    s->k = (uint32_t)json_integer_value(json_object_get(sh, "K"));
    s->topk = (uint32_t)json_integer_value(json_object_get(sh, "topk"));
    const char *d = json_string_value(json_object_get(sh, "dtype"));
    snprintf(s->dtype, sizeof s->dtype, "%s", d ? d : "?");
    json_t *bs = json_object_get(sh, "block_shape");
    s->block_n = (uint32_t)json_integer_value(json_array_get(bs, 0));
    s->block_k = (uint32_t)json_integer_value(json_array_get(bs, 1));
    const char *rt = json_string_value(json_object_get(json_object_get(rec, "routing"), "sha256"));
    snprintf(s->routing, sizeof s->routing, "%s", rt ? rt : "");
    return true;
}

static bool shape_eq(const krn_shape_t *a, const krn_shape_t *b) {
    return a->e == b->e && a->n == b->n && a->k == b->k && a->topk == b->topk && strcmp(a->dtype, b->dtype) == 0 &&
           a->block_n == b->block_n && a->block_k == b->block_k && strcmp(a->routing, b->routing) == 0;
}

/* The manifest record of one file. Entries kept from the previous file keep what the
 * previous record said of them. */
static json_t *manifest_record(const dbq_result_t *first, const entry_t *ents, size_t n_ents, file_meta_t *meta,
                               json_t *old_rec) {
    json_t *rec = json_object();
    json_t *shape = json_object();
    json_t *sweeps = json_array(), *uuids = json_array(), *drivers = json_array();
    json_t *toolkits = json_array(), *hashes = json_array(), *entries = json_object();
    json_t *near_ties = json_array();
    json_t *old_entries = json_object_get(old_rec, "entries");
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_set_new(shape, "E", json_integer(first->shape.e));
    json_object_set_new(shape, "N", json_integer(first->shape.n));
    json_object_set_new(shape, "K", json_integer(first->shape.k));
    json_object_set_new(shape, "topk", json_integer(first->shape.topk));
    json_object_set_new(shape, "dtype", json_string(first->shape.dtype));
    if (first->shape.block_n) {
        json_t *bs = json_array();
        json_array_append_new(bs, json_integer(first->shape.block_n));
        json_array_append_new(bs, json_integer(first->shape.block_k));
        json_object_set_new(shape, "block_shape", bs);
    }
    /* Which routing the entries were measured on: uniform random, or a captured file. */
    if (first->shape.routing[0])
        json_object_set_new(rec, "routing",
                            json_pack("{s:s, s:s, s:s}", "kind", "captured", "sha256", first->shape.routing, "source",
                                      first->routing_source));
    else
        json_object_set_new(rec, "routing", json_pack("{s:s}", "kind", "uniform"));
    for (size_t i = 0; i < n_ents; i++) {
        const dbq_result_t *r = ents[i].row;
        char key[16];
        snprintf(key, sizeof key, "%u", ents[i].bs);
        if (!r) {
            json_t *was = json_object_get(old_entries, key);
            json_t *e = json_is_object(was) ? json_deep_copy(was) : json_object();
            json_t *sid = json_object_get(e, "sweep_id");
            /* the record names every sweep the file holds entries of */
            if (json_is_integer(sid) && json_integer_value(sid) > 0)
                add_unique_int(sweeps, (uint64_t)json_integer_value(sid));
            else
                json_object_set_new(e, "sweep_id", json_null());
            json_object_set_new(e, "kept_from_previous_file", json_true());
            json_object_set_new(entries, key, e);
            continue;
        }
        json_t *e = json_object();
        add_unique_int(sweeps, r->sweep_id);
        add_unique(uuids, r->device_uuid);
        add_unique(drivers, r->driver_version);
        add_unique(toolkits, r->cuda_version);
        add_unique(hashes, r->kernel_hash);
        json_object_set_new(e, "sweep_id", json_integer((json_int_t)r->sweep_id));
        json_object_set_new(e, "config_id", json_integer((json_int_t)r->config_id));
        json_object_set_new(e, "median_us", json_real(r->median_us));
        json_object_set_new(e, "min_us", json_real(r->min_us));
        json_object_set_new(e, "stddev_us", json_real(r->stddev_us));
        json_object_set_new(e, "samples", json_integer(r->samples));
        json_object_set_new(e, "device_uuid", json_string(r->device_uuid));
        near_tie_fields(e, &ents[i], near_ties);
        json_object_set_new(entries, key, e);
    }
    size_t used = 0, i;
    json_t *x;
    meta->sweep_ids[0] = '\0';
    json_array_foreach(sweeps, i, x) {
        int n = snprintf(meta->sweep_ids + used, sizeof meta->sweep_ids - used, "%s%lld", i ? "," : "",
                         (long long)json_integer_value(x));
        if (n < 0 || (size_t)n >= sizeof meta->sweep_ids - used) break;
        used += (size_t)n;
    }
    bool sim = strcmp(first->backend, "sim") == 0;
    json_object_set_new(rec, "shape", shape);
    json_object_set_new(rec, "sweep_ids", sweeps);
    json_object_set_new(rec, "device_name", json_string(first->device_name));
    json_object_set_new(rec, "device_uuids", uuids);
    json_object_set_new(rec, "driver_versions", drivers);
    json_object_set_new(rec, "toolkit_versions", toolkits);
    json_object_set_new(rec, "compiler", json_string(first->compiler));
    json_object_set_new(rec, "kernel_hashes", hashes);
    json_object_set_new(rec, "backend", json_string(first->backend));
    json_object_set_new(rec, "simulated", json_boolean(sim));
    json_object_set_new(rec, "exported_at", json_string(stamp));
    json_object_set_new(rec, "entries", entries);
    json_object_set_new(rec, "near_tie_rule",
                        json_string("margin_sd = (runner_up - best) / sqrt(sd_best^2 + "
                                    "sd_runner_up^2) under 1: the pick is within noise"));
    json_object_set_new(rec, "near_ties", near_ties);
    return rec;
}

/* Completes cov, the coverage of a file's new entries, with the entries kept from the
 * previous file: their sweeps' coverage as the previous record gave it, and complete only
 * when each kept entry names its sweep and that record was complete. f->partial and
 * f->coverage follow. */
static void kept_coverage(json_t *cov, json_t *orec, const entry_t *ents, size_t n, exp_file_t *f) {
    json_t *ocov = json_object_get(orec, "coverage");
    json_t *osweeps = json_object_get(ocov, "sweeps"), *oents = json_object_get(orec, "entries");
    json_t *sweeps = json_object_get(cov, "sweeps");
    bool old_complete = json_is_true(json_object_get(ocov, "complete"));
    size_t kept = 0, unsure = 0;
    for (size_t i = 0; i < n; i++) {
        if (ents[i].row) continue;
        char key[16], skey[24];
        kept++;
        snprintf(key, sizeof key, "%u", ents[i].bs);
        json_t *sid = json_object_get(json_object_get(oents, key), "sweep_id");
        if (!json_is_integer(sid)) {
            unsure++;
            continue;
        }
        snprintf(skey, sizeof skey, "%lld", (long long)json_integer_value(sid));
        json_t *osw = json_object_get(osweeps, skey);
        json_t *have = json_object_get(sweeps, skey);
        json_t *bsz = json_object_get(have, "batch_sizes");
        json_t *obs = json_object_get(json_object_get(osw, "batch_sizes"), key);
        if (!have && json_is_object(osw))
            json_object_set_new(sweeps, skey, json_deep_copy(osw));
        else if (json_is_object(bsz) && json_is_object(obs) && !json_object_get(bsz, key))
            json_object_set_new(bsz, key, json_deep_copy(obs));
        if (!json_is_object(osw) || !old_complete) unsure++;
    }
    if (kept) json_object_set_new(cov, "kept_from_previous_file", json_integer((json_int_t)kept));
    if (!unsure) return;
    json_object_set_new(cov, "complete", json_false());
    f->partial = true;
    size_t l = strlen(f->coverage);
    mt_fmt(f->coverage + l, sizeof f->coverage - l,
           "%s%zu of %zu entries kept from the previous file come from a sweep its record does not show complete",
           l ? "; " : "", unsure, kept);
}

/* Refuses a file whose coverage is incomplete, unless partial (DB only: runs before
 * anything is created). */
int exp_check_coverage(const run_t *x, const dbq_result_t *first, const entry_t *ents, size_t n, const char *rel,
                       char *err, size_t errlen) {
    uint64_t ids[MAX_FILE_SWEEPS] = {0};
    size_t n_ids = entry_sweeps(ents, n, ids);
    exp_file_t f;
    char why[400];
    json_decref(file_coverage(x, first, ids, n_ids, &f, why, sizeof why));
    if (!f.partial || x->o->partial) return MT_OK;
    mt_fmt(err, errlen,
           "%s/%s: %s; a file is written only from a finished sweep whose device measured every "
           "planned config at every batch size (pass --partial to write it, marked partial)",
           x->o->out_dir, rel, why);
    return MT_INVAL;
}

static int add_pend(run_t *x, pend_t **out) {
    if (mt_grow((void **)&x->pend, &x->cap_pend, x->n_pend + 1, sizeof *x->pend, 16) != MT_OK) return MT_NOMEM;
    *out = &x->pend[x->n_pend++];
    memset(*out, 0, sizeof **out);
    return MT_OK;
}

/* The latency an old entry was recorded with, comparable with a new entry's cost; <0
 * when the record has none. */
static double old_cost(json_t *old_entries, const char *key, bool split) {
    json_t *e = json_object_get(old_entries, key);
    json_t *v = split ? json_object_get(e, "split_sum_us") : NULL;
    if (!json_is_number(v)) v = json_object_get(e, "median_us");
    return json_is_number(v) ? json_number_value(v) : -1.0;
}

/* Refuses to plan over a file of another shape (its manifest record), other versions or
 * kernel hash, or another Triton version (tv against the file's old_tv). */
static int check_old_file(const run_t *x, json_t *orec, bool existed, const char *rel, const dbq_result_t *first,
                          const char *tv, const char *old_tv, const char *versions, char *err, size_t errlen) {
    const exp_opts_t *o = x->o;
    krn_shape_t was;
    if (existed && record_shape(orec, &was) && !shape_eq(&was, &first->shape)) {
        char a[128], b[128];
        exp_shape_text(&was, a, sizeof a);
        exp_shape_text(&first->shape, b, sizeof b);
        mt_fmt(err, errlen,
               "%s/%s holds shape %s (its manifest record); these results are for shape %s: an "
               "engine's file name carries E and N but not K or topk, so one folder cannot hold both; export into "
               "another --out",
               o->out_dir, rel, a, b);
        return MT_INVAL;
    }
    const char *ov = json_string_value(json_object_get(orec, "versions"));
    const char *oh = json_string_value(json_array_get(json_object_get(orec, "kernel_hashes"), 0));
    if (existed && ((versions && ov && strcmp(ov, versions) != 0) ||
                    (oh && first->kernel_hash[0] && strcmp(oh, first->kernel_hash) != 0))) {
        mt_fmt(err, errlen,
               "%s/%s was exported from results with versions '%s' (kernel_hash %s); these are "
               "'%s' (kernel_hash %s), and one file never mixes them: export into another --out or move "
               "the file away",
               o->out_dir, rel, ov ? ov : "?", oh ? oh : "?", versions ? versions : "",
               first->kernel_hash[0] ? first->kernel_hash : "none");
        return MT_INVAL;
    }
    if (tv && old_tv[0] && strcmp(old_tv, tv) != 0) {
        mt_fmt(err, errlen,
               "%s/%s holds configs for Triton %s; these are for Triton %s, and one file never "
               "mixes them: export into another --out or move the file away",
               o->out_dir, rel, old_tv, tv);
        return MT_INVAL;
    }
    return MT_OK;
}

/* Merges new_ents[0, n) with the old file's entries (both sorted by batch size) into
 * ents (*n_ents): new entries win, the old file's are kept for batch sizes the store has no
 * result for. Counts changes in f, the slower ones in *slower (the first in first_slower),
 * and, for an existing file, appends a line per change to *changes. */
static int merge_entries(const run_t *x, const moetune_lookup_t *old, size_t n_old, json_t *old_entries, bool existed,
                         const entry_t *new_ents, size_t n, entry_t *ents, size_t *n_ents_out, exp_file_t *f,
                         char **changes, size_t *slower_out, char *first_slower, size_t fslen) {
    const exp_opts_t *o = x->o;
    size_t n_ents = 0, slower = 0;
    /* Merge: both lists are sorted by batch size. */
    size_t i = 0, j = 0;
    while (i < n || j < n_old) {
        entry_t oe = {0};
        if (j < n_old) {
            moetune_lookup_config_t c;
            oe.bs = moetune_lookup_key(old, j);
            moetune_lookup_get(old, oe.bs, &c, NULL);
            oe.cfg = (krn_config_t){.block_m = (uint32_t)c.block_m,
                                    .block_n = (uint32_t)c.block_n,
                                    .block_k = (uint32_t)c.block_k,
                                    .group_m = (uint32_t)c.group_m,
                                    .num_warps = (uint32_t)c.num_warps,
                                    .num_stages = (uint32_t)c.num_stages};
        }
        if (j == n_old || (i < n && new_ents[i].bs <= oe.bs)) {
            entry_t *e = &ents[n_ents++];
            *e = new_ents[i];
            bool had = j < n_old && oe.bs == e->bs;
            if (!had || !cfg_eq(&oe.cfg, &e->cfg)) {
                f->changed++;
                char key[16], a[64] = "(none)", b[64], was_txt[32] = "", line[400];
                snprintf(key, sizeof key, "%u", e->bs);
                double was_us = had ? old_cost(old_entries, key, e->split) : -1.0;
                bool is_slower = had && was_us > 0 && e->cost > was_us;
                if (had) cfg_text(&oe.cfg, a, sizeof a);
                if (had && was_us > 0) snprintf(was_txt, sizeof was_txt, "%.2f -> ", was_us);
                cfg_text(&e->cfg, b, sizeof b);
                mt_fmt(line, sizeof line, "%s: batch size %u: %s -> %s (%s%.2f us, sweep %llu)%s", f->path, e->bs, a, b,
                       was_txt, e->cost, (unsigned long long)(e->row ? e->row->sweep_id : 0),
                       is_slower ? (o->force ? ", slower: replaced with --force" : ", slower") : "");
                if (is_slower && slower++ == 0) mt_fmt(first_slower, fslen, "%s", line);
                if (existed && !exp_append_line(changes, line)) {
                    return MT_NOMEM;
                }
            }
            if (had) j++;
            i++;
        } else {
            ents[n_ents++] = oe; /* kept: the store has nothing for this batch size */
            j++;
        }
    }
    *n_ents_out = n_ents;
    *slower_out = slower;
    return MT_OK;
}

/* Plans one config file mdir/name (OUT/rel) holding new_ents[0, n) (sorted by batch
 * size) merged with the entries of the file it replaces, kept for batch sizes new_ents
 * lacks. tv, when not NULL, is written first as "triton_version" (vLLM's files);
 * versions (engine exports) must match the existing record's. Nothing is written: the
 * planned file goes to x->pend (*out). */
int exp_plan_file(run_t *x, const char *mdir, const char *name, const char *rel, const entry_t *new_ents, size_t n,
                  const char *tv, const char *versions, const dbq_result_t *first, pend_t **out, char *err,
                  size_t errlen) {
    int rc = MT_OK;
    const exp_opts_t *o = x->o;
    moetune_lookup_t *old = NULL;
    entry_t *ents = NULL;
    size_t n_old = 0, n_ents = 0, slower = 0;
    json_t *obj = NULL, *man = NULL;
    char *text = NULL, *changes = NULL;
    char path[1500], first_slower[600] = "";
    const char *old_tv = "";
    pend_t *p = NULL;
    mt_fmt(path, sizeof path, "%s/%s", mdir, name);
    bool existed = access(path, F_OK) == 0;
    if (existed) {
        char why[300];
        int lrc = moetune_lookup_load(path, &old, why, sizeof why);
        if (lrc == MOETUNE_LOOKUP_ENOMEM) return MT_NOMEM;
        if (lrc != MOETUNE_LOOKUP_OK) {
            mt_fmt(err, errlen, "%s exists but is not a config file (%s); move it away to export", path, why);
            return lrc == MOETUNE_LOOKUP_EIO ? MT_IO : MT_INVAL;
        }
        n_old = moetune_lookup_count(old);
        old_tv = moetune_lookup_triton_version(old);
    }
    rc = exp_manifest_for(x, mdir, &man, err, errlen);
    if (rc != MT_OK) goto out;
    json_t *orec = json_object_get(man, name);
    json_t *old_entries = json_object_get(orec, "entries");
    rc = check_old_file(x, orec, existed, rel, first, tv, old_tv, versions, err, errlen);
    if (rc != MT_OK) goto out;
    rc = add_pend(x, &p);
    if (rc != MT_OK) goto out;
    exp_file_t *f = &p->f;
    mt_fmt(f->path, sizeof f->path, "%s", rel);
    mt_fmt(p->mdir, sizeof p->mdir, "%s", mdir);
    mt_fmt(p->name, sizeof p->name, "%s", name);
    f->simulated = strcmp(first->backend, "sim") == 0;
    ents = mt_calloc(n + n_old + 1, sizeof *ents);
    if (!ents) {
        rc = MT_NOMEM;
        goto out;
    }
    rc = merge_entries(x, old, n_old, old_entries, existed, new_ents, n, ents, &n_ents, f, &changes, &slower,
                       first_slower, sizeof first_slower);
    if (rc != MT_OK) goto out;
    if (slower && !o->force) {
        mt_fmt(err, errlen,
               "%zu entr%s would be replaced by configs measured slower than the entry's recorded "
               "latency, e.g. %s; nothing written: pass --force to replace them",
               slower, slower == 1 ? "y" : "ies", first_slower);
        rc = MT_INVAL;
        goto out;
    }
    f->entries = (uint32_t)n_ents;
    obj = json_object();
    if (!obj) {
        rc = MT_NOMEM;
        goto out;
    }
    if (tv) json_object_set_new(obj, "triton_version", json_string(tv));
    for (size_t k = 0; k < n_ents; k++) {
        char key[16];
        snprintf(key, sizeof key, "%u", ents[k].bs);
        json_object_set_new(obj, key, exp_config_json(&ents[k].cfg));
    }
    text = exp_dump(obj);
    if (!text) {
        rc = MT_NOMEM;
        goto out;
    }
    mt_fmt(p->meta.hash, sizeof p->meta.hash, "%016llx", (unsigned long long)mt_fnv1a(MT_FNV_INIT, text, strlen(text)));
    /* A file that lacked its triton_version is rewritten even when no entry changed. */
    bool same_tv = !tv || strcmp(tv, old_tv) == 0;
    if (existed && f->changed == 0 && same_tv) {
        f->state = EXP_UNCHANGED;
    } else {
        f->state = existed ? EXP_CHANGED : EXP_NEW;
        p->text = text;
        text = NULL;
    }
    p->meta.shape_id = first->shape_id;
    snprintf(p->meta.dir, sizeof p->meta.dir, "%s", first->export_dir);
    p->rec = manifest_record(first, ents, n_ents, &p->meta, orec);
    json_t *rec_entries = json_object_get(p->rec, "entries");
    for (size_t k = 0; k < n_ents; k++) { /* what each entry buys over the engine's default and the incumbent */
        char key[16];
        snprintf(key, sizeof key, "%u", ents[k].bs);
        if (ents[k].row) shipguard_entry(x->guard, ents[k].row, json_object_get(rec_entries, key));
    }
    shipguard_file(x->guard, p->rec, f->guard, sizeof f->guard);
    uint64_t ids[MAX_FILE_SWEEPS] = {0};
    size_t n_ids = entry_sweeps(ents, n_ents, ids);
    char why[400];
    json_t *cov = file_coverage(x, first, ids, n_ids, f, why, sizeof why);
    kept_coverage(cov, orec, ents, n_ents, f);
    json_object_set_new(p->rec, "coverage", cov);
    p->changes = changes;
    changes = NULL;
    *out = p;
    p = NULL;
out:
    if (p) { /* the last pend is this one: drop it */
        free(p->text);
        json_decref(p->rec);
        free(p->changes);
        x->n_pend--;
    }
    free(changes);
    free(text);
    json_decref(obj);
    free(ents);
    moetune_lookup_free(&old);
    return rc;
}
