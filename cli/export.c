/* export.c - config files and manifest from the store (see export.h). */
#include "export.h"
#include "engine_check.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <dirent.h>
#include <signal.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "compare.h"
#include "engines.h"
#include "exports.h"
#include "lock.h"
#include "lookup.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "query.h"
#include "shipguard.h"
#include "states.h"

#define MAX_FILE_SWEEPS 16
#define LOCK_WAIT_MS 60000
/* The list of renames an export has committed to, in out_dir while they run (see commit). */
#define JOURNAL ".moetune-export.journal"

typedef struct {
    dbq_result_t *rows;
    dbq_result_t *ru; /* per row, its runner-up (config_id 0: none) */
    size_t n, cap;
    char bad[400]; /* why a row was refused */
} rowvec_t;

/* One entry of a file being written: from a result row, or kept from the old file. */
typedef struct {
    uint32_t bs;
    krn_config_t cfg;
    const dbq_result_t *row; /* NULL when kept from the previous file */
    double cost;             /* what "slower" compares: median, or up + down for a split pair */
    bool split;
    const dbq_result_t *ru; /* the best ok row of another config at this batch size, or NULL */
} entry_t;

/* What exports gets per file. */
typedef struct {
    uint64_t shape_id;
    char dir[48];
    char sweep_ids[256];
    char hash[17];
} file_meta_t;

/* A file planned: nothing is written until every file is planned. */
typedef struct {
    char mdir[1024]; /* folder of the file and its manifest */
    char name[420];  /* file name: the manifest key */
    char *text;      /* new body; NULL when the file is left as it is */
    json_t *rec;     /* its manifest record */
    char *changes;   /* "path: batch size M: old -> new" lines, shown once written */
    exp_file_t f;
    file_meta_t meta;
    bool done;
} pend_t;

/* A manifest being rebuilt: one per folder. */
typedef struct {
    char dir[1024];
    json_t *m;
} mdir_t;

/* One export's state, from the selection to the last write. */
typedef struct {
    const exp_opts_t *o;
    dbq_select_t sel;
    uint64_t one_id;
    dbq_coverage_t *cov;
    size_t n_cov, cap_cov;
    struct sampled {
        uint64_t sweep_id;
        uint32_t sample; /* the spec's Space.sample: configs kept per shape */
        char *warm;      /* the spec's warm_start: what its start came from (owned); NULL = none */
    } * sampled;
    size_t n_sampled, cap_sampled;
    mdir_t *dirs;
    size_t n_dirs;
    pend_t *pend;
    size_t n_pend, cap_pend;
    int lock_fd;
    uint32_t recovered; /* renames of an interrupted export completed first */
    shipguard_t *guard; /* the ship guard's rows and decisions (shipguard.h) */
} run_t;

const char *exp_state_name(exp_state_t s) {
    static const char *const names[] = {"new", "changed", "unchanged"};
    return (unsigned)s < 3 ? names[s] : "?";
}

void exp_report_clear(exp_report_t *r) {
    if (!r) return;
    free(r->files);
    r->files = NULL;
    r->n_files = 0;
}

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
static int check_dir_name(const char *s, char *err, size_t errlen) {
    if (safe_component(s)) return MT_OK;
    mt_fmt(err, errlen, "compiler directory '%s' in the database is not a plain name", s);
    return MT_INVAL;
}

/* The error of an export that selected no ok result: MT_NOTFOUND with the reason in err. */
static int no_results(const exp_opts_t *o, char *err, size_t errlen) {
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
static int check_device_name(const dbq_result_t *r, char *err, size_t errlen) {
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

static void file_name(const dbq_result_t *r, char *buf, size_t len) {
    char dev[sizeof r->device_name];
    snprintf(dev, sizeof dev, "%s", r->device_name);
    for (char *p = dev; *p; p++) {
        if (*p == ' ' || *p == '/' || *p == '\\') *p = '_';
    }
    int n = snprintf(buf, len, "E=%u,N=%u,device_name=%s", r->shape.e, r->shape.n, dev);
    if (n > 0 && (size_t)n < len && strcmp(r->shape.dtype, "bf16") != 0)
        n += snprintf(buf + n, len - (size_t)n, ",dtype=%s", r->shape.dtype);
    if (n > 0 && (size_t)n < len && r->shape.block_n)
        n += snprintf(buf + n, len - (size_t)n, ",block_shape=[%u, %u]", r->shape.block_n, r->shape.block_k);
    if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ".json");
}

static void cfg_text(const krn_config_t *c, char *buf, size_t len) {
    snprintf(buf, len, "M%u N%u K%u G%u w%u s%u", c->block_m, c->block_n, c->block_k, c->group_m, c->num_warps,
             c->num_stages);
}

static bool cfg_eq(const krn_config_t *a, const krn_config_t *b) { return memcmp(a, b, sizeof *a) == 0; }

/* Dumps a JSON value the way the frameworks' files look: indent 4, keys in insertion
 * order, newline at the end. Caller frees. */
static char *dump(json_t *v) {
    char *body = json_dumps(v, JSON_PRESERVE_ORDER | JSON_INDENT(4));
    if (!body) return NULL;
    size_t n = strlen(body);
    char *text = mt_realloc(body, n + 2);
    if (!text) {
        free(body);
        return NULL;
    }
    text[n] = '\n';
    text[n + 1] = '\0';
    return text;
}

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
static int check_row(const dbq_result_t *r, char *bad, size_t len) {
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

static mt_status_t collect(void *ctx, const dbq_result_t *row, const dbq_result_t *ru) {
    rowvec_t *v = ctx;
    if (check_row(row, v->bad, sizeof v->bad) != MT_OK) return MT_INVAL;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        dbq_result_t *grown = mt_realloc(v->rows, cap * sizeof *grown);
        if (!grown) return MT_NOMEM;
        v->rows = grown;
        grown = mt_realloc(v->ru, cap * sizeof *grown);
        if (!grown) return MT_NOMEM;
        v->ru = grown;
        v->cap = cap;
    }
    v->rows[v->n] = *row;
    if (ru)
        v->ru[v->n] = *ru;
    else
        memset(&v->ru[v->n], 0, sizeof v->ru[v->n]);
    v->rows[v->n].versions = ""; /* points into the statement; this layout does not use it */
    v->ru[v->n++].versions = "";
    return 0;
}

/* ---- near ties */

double exp_margin_sd(double best_us, double best_sd, double ru_us, double ru_sd) {
    double gap = ru_us - best_us;
    double sd = sqrt(best_sd * best_sd + ru_sd * ru_sd);
    if (gap == 0) return 0.0;
    return sd > 0 ? gap / sd : INFINITY;
}

typedef struct {
    exp_pair_fn fn;
    void *ctx;
    dbq_result_t best, ru;
    char best_versions[512], ru_versions[512]; /* the rows' versions, kept past their callback */
    bool have, have_ru;
} pairs_t;

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

mt_status_t exp_pairs(dbq_t *q, const dbq_select_t *sel, exp_pair_fn fn, void *ctx, char *err, size_t errlen) {
    pairs_t *p = mt_calloc(1, sizeof *p);
    if (!p) return MT_NOMEM;
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

/* ---- selection and coverage */

static void sel_init(run_t *x) {
    const exp_opts_t *o = x->o;
    memset(&x->sel, 0, sizeof x->sel);
    if (o->sweep_id) {
        x->one_id = o->sweep_id;
        x->sel.ids = &x->one_id;
        x->sel.n_ids = 1;
    } else {
        x->sel.ids = o->sweep_ids;
        x->sel.n_ids = o->sweep_ids ? o->n_sweep_ids : 0;
    }
    x->sel.latest = o->latest;
}

static mt_status_t cov_collect(void *ctx, const dbq_coverage_t *c) {
    run_t *x = ctx;
    if (mt_grow((void **)&x->cov, &x->cap_cov, x->n_cov + 1, sizeof *x->cov, 64) != MT_OK) return MT_NOMEM;
    x->cov[x->n_cov++] = *c;
    return 0;
}

/* Notes each sweep of the coverage whose spec measures a sample of the space (--sample); the
 * specs of sweeps the export does not read are not unpacked. */
static mt_status_t sample_collect(void *ctx, const dbq_sweep_t *s) {
    run_t *x = ctx;
    bool covered = false;
    for (size_t i = 0; i < x->n_cov && !covered; i++) covered = x->cov[i].sweep_id == s->id;
    if (!covered) return 0;
    Moetune__SweepSpec *spec = moetune__sweep_spec__unpack(NULL, s->spec_len, s->spec);
    uint32_t n = spec && spec->space ? spec->space->sample : 0;
    char *warm = spec && spec->warm_start && *spec->warm_start ? mt_strdup(spec->warm_start) : NULL;
    bool lost = spec && spec->warm_start && *spec->warm_start && !warm;
    moetune__sweep_spec__free_unpacked(spec, NULL);
    if (lost) return MT_NOMEM;
    if (!n && !warm) return 0;
    if (mt_grow((void **)&x->sampled, &x->cap_sampled, x->n_sampled + 1, sizeof *x->sampled, 8) != MT_OK) {
        free(warm);
        return MT_NOMEM;
    }
    x->sampled[x->n_sampled++] = (struct sampled){s->id, n, warm};
    return 0;
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

/* Reads the coverage of the selection; with one_sweep, refuses several sweeps. */
static int load_coverage(run_t *x, dbq_t *q, char *err, size_t errlen) {
    int rc = dbq_coverage(q, &x->sel, cov_collect, x, err, errlen);
    if (rc == MT_OK) rc = dbq_sweeps(q, NULL, sample_collect, x, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (rc != MT_OK || !x->o->one_sweep) return rc;
    char list[200] = "";
    size_t used = 0, n = 0;
    for (size_t i = 0; i < x->n_cov; i++) {
        if (i && x->cov[i].sweep_id == x->cov[i - 1].sweep_id) continue; /* rows come by sweep */
        n++;
        if (used + 24 < sizeof list)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%llu", used ? ", " : "",
                                     (unsigned long long)x->cov[i].sweep_id);
    }
    if (n <= 1) return MT_OK;
    mt_fmt(err, errlen,
           "the database holds results of %zu sweeps (%s): export one with --sweep N, merge some "
           "with --sweeps A,B, or take the newest per file with --latest",
           n, list);
    return MT_INVAL;
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

/* ---- the folder: lock, manifests, writes */

static int recover(run_t *x, char *err, size_t errlen);

/* Takes an exclusive lock on out_dir (created when missing) for the whole export, then
 * completes or cleans up what an export that died there left (recover). */
static int lock_out(run_t *x, char *err, size_t errlen) {
    int rc = mt_mkdirs(x->o->out_dir, err, errlen);
    if (rc != MT_OK) return rc;
    x->lock_fd = open(x->o->out_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (x->lock_fd < 0) {
        mt_fmt(err, errlen, "%s: %s", x->o->out_dir, strerror(errno));
        return MT_IO;
    }
    uint64_t start = mt_now_ms();
    while (flock(x->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK && errno != EINTR) {
            mt_fmt(err, errlen, "lock %s: %s", x->o->out_dir, strerror(errno));
            return MT_IO;
        }
        if (mt_now_ms() - start > LOCK_WAIT_MS) {
            mt_fmt(err, errlen, "another export into %s has held its lock for over %d s; nothing written",
                   x->o->out_dir, LOCK_WAIT_MS / 1000);
            return MT_BUSY;
        }
        usleep(10000);
    }
    return recover(x, err, errlen);
}

/* The manifest of a folder, loaded once (after the lock). A manifest that exists but
 * is not a JSON object is refused: rebuilding it would drop its records. */
static int manifest_for(run_t *x, const char *dir, json_t **out, char *err, size_t errlen) {
    for (size_t i = 0; i < x->n_dirs; i++) {
        if (strcmp(x->dirs[i].dir, dir) == 0) {
            *out = x->dirs[i].m;
            return MT_OK;
        }
    }
    char mpath[1100];
    json_error_t jerr;
    json_t *m = NULL;
    mt_fmt(mpath, sizeof mpath, "%s/manifest.json", dir);
    if (access(mpath, F_OK) == 0) {
        /* read without blocking, a regular file only: a FIFO there must not hold the export */
        char *text = NULL, why[600];
        size_t len = 0;
        int rrc = mt_read_regular(mpath, 256u << 20, &text, &len, why, sizeof why);
        if (rrc != MT_OK) {
            mt_fmt(err, errlen, "%s; move it away to export", why);
            return rrc == MT_NOMEM ? MT_NOMEM : rrc == MT_INVAL ? MT_INVAL : MT_IO;
        }
        m = json_loadb(text, len, JSON_PRESERVE_ORDER, &jerr);
        free(text);
        if (!json_is_object(m)) {
            mt_fmt(err, errlen, "%s is not a manifest (%s); move it away to export", mpath,
                   m ? "not a JSON object" : jerr.text);
            json_decref(m);
            return MT_INVAL;
        }
    } else {
        m = json_object();
    }
    mdir_t *grown = mt_realloc(x->dirs, (x->n_dirs + 1) * sizeof *grown);
    if (!grown || !m) {
        json_decref(m);
        if (grown) x->dirs = grown;
        return MT_NOMEM;
    }
    x->dirs = grown;
    mt_fmt(x->dirs[x->n_dirs].dir, sizeof x->dirs[0].dir, "%s", dir);
    x->dirs[x->n_dirs++].m = m;
    *out = m;
    return MT_OK;
}

/* Writes text to the new file tmp, the temp file of path (errors name path), and syncs
 * it to disk; on any error the file is removed. */
static int write_temp(const char *tmp, const char *path, const char *text, char *err, size_t errlen) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        mt_fmt(err, errlen, "%s: %s", tmp, strerror(errno));
        return MT_IO;
    }
    size_t len = strlen(text), done = 0;
    int rc = MT_OK;
    while (done < len && rc == MT_OK) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            mt_fmt(err, errlen, "%s: %s", path, w < 0 ? strerror(errno) : "short write");
            rc = MT_IO;
        } else {
            done += (size_t)w;
        }
    }
    if (rc == MT_OK && fsync(fd) != 0) {
        mt_fmt(err, errlen, "%s: %s", path, strerror(errno));
        rc = MT_IO;
    }
    if (close(fd) != 0 && rc == MT_OK) {
        mt_fmt(err, errlen, "%s: %s", path, strerror(errno));
        rc = MT_IO;
    }
    if (rc != MT_OK) unlink(tmp);
    return rc;
}

/* Syncs a folder, so the renames in it are on disk. */
static void sync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    if (fsync(fd) != 0) { /* nothing more to do: the renames themselves succeeded */
    }
    close(fd);
}

/* Test hook: MOETUNE_TEST_EXPORT_DIE=step or step:n kills the export (SIGKILL) at that
 * point of its commit, so that the tests can check what a crash there leaves behind. */
static void die_at(const char *step, size_t n) {
    const char *at = getenv("MOETUNE_TEST_EXPORT_DIE");
    char want[48];
    if (!at) return;
    snprintf(want, sizeof want, "%s:%zu", step, n);
    if (strcmp(at, step) == 0 || strcmp(at, want) == 0) raise(SIGKILL);
}

/* Whether name is "<something>.tmp.<pid>" with a pid not alive (and not ours): a temp
 * file of an export that died. */
static bool stale_temp(const char *name) {
    const char *t = strstr(name, ".tmp.");
    while (t && strstr(t + 1, ".tmp.")) t = strstr(t + 1, ".tmp.");
    if (!t || t == name || !t[5]) return false;
    char *end = NULL;
    long pid = strtol(t + 5, &end, 10);
    if (*end || pid <= 0 || pid == (long)getpid()) return false;
    bool ours = (t - name >= 5 && strncmp(t - 5, ".json", 5) == 0) ||
                ((size_t)(t - name) == strlen(JOURNAL) && strncmp(name, JOURNAL, strlen(JOURNAL)) == 0);
    return ours && kill((pid_t)pid, 0) != 0 && errno == ESRCH;
}

/* Removes the stale temp files of dir and, depth levels down, of its folders. */
static void clean_temps(const char *dir, int depth) {
    DIR *d = opendir(dir);
    struct dirent *e;
    if (!d) return;
    while ((e = readdir(d)) != NULL) {
        char path[1500];
        struct stat st;
        if (e->d_name[0] == '.' && (!e->d_name[1] || (e->d_name[1] == '.' && !e->d_name[2]))) continue;
        if (snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= (int)sizeof path) continue;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode) && depth > 0)
            clean_temps(path, depth - 1);
        else if (S_ISREG(st.st_mode) && stale_temp(e->d_name))
            unlink(path);
    }
    closedir(d);
}

/* A path of the journal: relative, no "..", no control character. */
static bool journal_path_ok(const char *p) {
    size_t n = strlen(p);
    if (!n || *p == '/' || strncmp(p, "../", 3) == 0 || strstr(p, "/../") || strcmp(p, "..") == 0 ||
        (n >= 3 && strcmp(p + n - 3, "/..") == 0))
        return false;
    for (; *p; p++)
        if ((unsigned char)*p < 0x20) return false;
    return true;
}

/* Finishes the renames of an export that died after committing to them (its journal is
 * in out_dir), then removes the temp files of exports that died before: the folder then
 * holds one export's state whole. Runs under the folder's lock, before anything is read. */
static int recover(run_t *x, char *err, size_t errlen) {
    const char *out = x->o->out_dir;
    char jpath[1100], line[3300];
    mt_fmt(jpath, sizeof jpath, "%s/%s", out, JOURNAL);
    FILE *j = NULL;
    int rc = mt_fopen_regular(jpath, &j, err, errlen);
    if (rc == MT_NOTFOUND) {
        clean_temps(out, 2);
        return MT_OK;
    }
    if (rc != MT_OK) return rc;
    while (fgets(line, sizeof line, j)) {
        char *tab = strchr(line, '\t');
        line[strcspn(line, "\n")] = '\0';
        if (tab) *tab = '\0';
        size_t fl = tab ? strlen(tab + 1) : 0;
        if (!tab || !journal_path_ok(line) || !journal_path_ok(tab + 1) || strncmp(line, tab + 1, fl) != 0 ||
            strncmp(line + fl, ".tmp.", 5) != 0) {
            mt_fmt(err, errlen, "%s is damaged; nothing written: move it away to export into %s", jpath, out);
            fclose(j);
            return MT_INVAL;
        }
        char from[1600], to[1600];
        struct stat st;
        mt_fmt(from, sizeof from, "%s/%s", out, line);
        mt_fmt(to, sizeof to, "%s/%s", out, tab + 1);
        /* a temp file that is gone was renamed before the export died */
        if (lstat(from, &st) == 0 && rename(from, to) != 0) {
            mt_fmt(err, errlen, "completing an interrupted export: rename %s: %s", to, strerror(errno));
            fclose(j);
            return MT_IO;
        }
        char *slash = strrchr(to, '/');
        if (slash) *slash = '\0';
        sync_dir(to);
        x->recovered++;
    }
    fclose(j);
    if (unlink(jpath) != 0) {
        mt_fmt(err, errlen, "%s: %s", jpath, strerror(errno));
        return MT_IO;
    }
    sync_dir(out);
    clean_temps(out, 2);
    return MT_OK;
}

/* A shape in words, with its captured routing when it has one: two shapes that differ only
 * there must not read alike. */
static void shape_text(const krn_shape_t *s, char *buf, size_t len) {
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
static int check_coverage(const run_t *x, const dbq_result_t *first, const entry_t *ents, size_t n, const char *rel,
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

/* Appends a line to a growing string; false when out of memory. */
static bool append_line(char **buf, const char *line) {
    size_t have = *buf ? strlen(*buf) : 0, add = strlen(line);
    char *grown = mt_realloc(*buf, have + add + 2);
    if (!grown) return false;
    memcpy(grown + have, line, add);
    grown[have + add] = '\n';
    grown[have + add + 1] = '\0';
    *buf = grown;
    return true;
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
        shape_text(&was, a, sizeof a);
        shape_text(&first->shape, b, sizeof b);
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
                if (existed && !append_line(changes, line)) {
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
static int plan_file(run_t *x, const char *mdir, const char *name, const char *rel, const entry_t *new_ents, size_t n,
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
    rc = manifest_for(x, mdir, &man, err, errlen);
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
    text = dump(obj);
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

/* One file of a commit: its new text goes to tmp, then tmp is renamed to path. */
typedef struct {
    char path[1600], tmp[1600];
    const char *text;
    char *own; /* a manifest's text, freed with the move */
} move_t;

/* Adds the move of text to mdir/name; false when out of memory. */
static bool add_move(move_t **mv, size_t *n, size_t *cap, const char *mdir, const char *name, const char *text,
                     char *own) {
    if (mt_grow((void **)mv, cap, *n + 1, sizeof **mv, 8) != MT_OK) return false;
    move_t *m = &(*mv)[(*n)++];
    mt_fmt(m->path, sizeof m->path, "%s/%s", mdir, name);
    mt_fmt(m->tmp, sizeof m->tmp, "%s.tmp.%ld", m->path, (long)getpid());
    m->text = text;
    m->own = own;
    return true;
}

/* The moves of the planned files, folder by folder, each folder's manifest (with the
 * records of its files) after its files. */
static int plan_moves(run_t *x, move_t **mv, size_t *n_mv) {
    size_t cap = 0;
    for (size_t d = 0; d < x->n_dirs; d++) {
        mdir_t *md = &x->dirs[d];
        size_t n_done = 0;
        for (size_t i = 0; i < x->n_pend; i++) {
            pend_t *p = &x->pend[i];
            if (strcmp(p->mdir, md->dir) != 0) continue;
            if (p->text && !add_move(mv, n_mv, &cap, p->mdir, p->name, p->text, NULL)) return MT_NOMEM;
            json_object_set(md->m, p->name, p->rec);
            n_done++;
        }
        if (n_done == 0) continue;
        char *text = dump(md->m);
        if (!text || !add_move(mv, n_mv, &cap, md->dir, "manifest.json", text, text)) {
            free(text);
            return MT_NOMEM;
        }
    }
    return MT_OK;
}

/* path relative to out_dir (every file of an export lies under it). */
static const char *rel_to(const run_t *x, const char *path) {
    size_t n = strlen(x->o->out_dir);
    return strncmp(path, x->o->out_dir, n) == 0 && path[n] == '/' ? path + n + 1 : path;
}

/* Writes the journal: the renames this export commits to, one "tmp<TAB>path" line each
 * (relative to out_dir), through a temp file and a rename, synced. From then on the
 * export lands whole: what a crash leaves undone, the next export's recover() does. */
static int write_journal(run_t *x, const move_t *mv, size_t n, char *err, size_t errlen) {
    char jpath[1100], tmp[1200];
    char *text = NULL;
    int rc = MT_OK;
    mt_fmt(jpath, sizeof jpath, "%s/%s", x->o->out_dir, JOURNAL);
    mt_fmt(tmp, sizeof tmp, "%s.tmp.%ld", jpath, (long)getpid());
    for (size_t i = 0; i < n && rc == MT_OK; i++) {
        char line[3300];
        mt_fmt(line, sizeof line, "%s\t%s", rel_to(x, mv[i].tmp), rel_to(x, mv[i].path));
        if (!append_line(&text, line)) rc = MT_NOMEM;
    }
    if (rc == MT_OK) rc = write_temp(tmp, jpath, text ? text : "", err, errlen);
    if (rc == MT_OK && rename(tmp, jpath) != 0) {
        mt_fmt(err, errlen, "rename %s: %s", jpath, strerror(errno));
        unlink(tmp);
        rc = MT_IO;
    }
    if (rc == MT_OK) sync_dir(x->o->out_dir);
    free(text);
    return rc;
}

/* Writes the planned files and manifests so that the folder holds either the previous
 * state or the new one whole, never a mix: every new text goes to a synced temp file
 * first (a full disk fails here, and the temp files are removed); then the journal
 * commits to the renames; then the renames, files before manifests; then the journal
 * goes. No path written is the database or one of its files. The files are then
 * recorded in the database. */
static int commit(run_t *x, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    const exp_opts_t *o = x->o;
    dbx_export_t *rows = NULL;
    move_t *mv = NULL;
    size_t n_mv = 0, n_tmp = 0;
    rc = plan_moves(x, &mv, &n_mv);
    for (size_t i = 0; i < n_mv && rc == MT_OK; i++) {
        rc = db_lock_refuse_overwrite(o->db_path, mv[i].path, err, errlen);
        if (rc == MT_OK) rc = db_lock_refuse_overwrite(o->db_path, mv[i].tmp, err, errlen);
    }
    for (; n_tmp < n_mv && rc == MT_OK; n_tmp++)
        rc = write_temp(mv[n_tmp].tmp, mv[n_tmp].path, mv[n_tmp].text, err, errlen);
    die_at("temps", 0);
    if (rc == MT_OK && n_mv) rc = write_journal(x, mv, n_mv, err, errlen);
    if (rc != MT_OK) {
        for (size_t i = 0; i < n_tmp; i++) unlink(mv[i].tmp);
        if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
        goto out;
    }
    die_at("journal", 0);
    for (size_t i = 0; i < n_mv && rc == MT_OK; i++) {
        if (rename(mv[i].tmp, mv[i].path) != 0) {
            mt_fmt(err, errlen, "rename %s: %s (the next export into %s completes this one)", mv[i].path,
                   strerror(errno), o->out_dir);
            rc = MT_IO;
        }
        die_at("rename", i + 1);
    }
    if (rc != MT_OK) goto out;
    for (size_t d = 0; d < x->n_dirs; d++) sync_dir(x->dirs[d].dir);
    if (n_mv) {
        char jpath[1100];
        mt_fmt(jpath, sizeof jpath, "%s/%s", o->out_dir, JOURNAL);
        unlink(jpath);
        sync_dir(o->out_dir);
    }
    for (size_t i = 0; i < x->n_pend; i++) x->pend[i].done = true;
    rep->files = mt_calloc(x->n_pend + 1, sizeof *rep->files);
    rows = mt_calloc(x->n_pend + 1, sizeof *rows);
    if (!rep->files || !rows) {
        rc = MT_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < x->n_pend; i++) {
        pend_t *p = &x->pend[i];
        if (o->changes && p->changes) fputs(p->changes, o->changes);
        rows[rep->n_files] = (dbx_export_t){p->f.path, p->meta.sweep_ids, p->f.entries, p->f.changed, p->meta.hash};
        rep->files[rep->n_files++] = p->f;
    }
    char derr[600];
    int drc = dbx_exports_add(o->db_path, o->out_dir, rows, rep->n_files, derr, sizeof derr);
    if (drc != MT_OK) {
        rc = drc;
        mt_fmt(err, errlen, "files written, but recording them in the database failed: %s", derr);
    }
out:
    for (size_t i = 0; i < n_mv; i++) free(mv[i].own);
    free(mv);
    free(rows);
    return rc;
}

static void run_free(run_t *x) {
    shipguard_free(&x->guard);
    for (size_t i = 0; i < x->n_pend; i++) {
        free(x->pend[i].text);
        json_decref(x->pend[i].rec);
        free(x->pend[i].changes);
    }
    free(x->pend);
    for (size_t i = 0; i < x->n_dirs; i++) json_decref(x->dirs[i].m);
    free(x->dirs);
    free(x->cov);
    for (size_t i = 0; i < x->n_sampled; i++) free(x->sampled[i].warm);
    free(x->sampled);
    if (x->lock_fd >= 0) close(x->lock_fd); /* releases the lock */
}

/* ---- engine layouts (export.h "With an engine"; names in export_layout.c) */

#define MAX_SPLIT_BM 8

/* Best up and best down timing among the rows with one BLOCK_SIZE_M. */
typedef struct {
    uint32_t bm;
    dbq_result_t up, down;
    bool has_up, has_down;
} split_t;

/* What one (group, shape, batch size) needs: the best whole-layer row and, per
 * BLOCK_SIZE_M, the best rows of each GEMM alone. */
typedef struct {
    char *versions; /* owned; the rows' versions point here */
    uint64_t shape_id;
    uint32_t bs;
    dbq_result_t best;
    dbq_result_t second; /* the best row of another config: the runner-up (near ties) */
    bool has_second;
    split_t split[MAX_SPLIT_BM];
    size_t n_split;
    const split_t *pair; /* the chosen pair, set when the file is split */
    split_t guard_pair;  /* the ship guard's config for both GEMMs, where it beats the pair (shipguard.h) */
} cell_t;

typedef struct {
    cell_t *cells;
    size_t n, cap;
    size_t last;            /* cell of the previous row: rows come grouped */
    char other_backend[16]; /* first non-triton row seen */
    uint64_t other_sweep;
    int rc_detail;       /* MT_INVAL when a row had too many BLOCK_SIZE_M values */
    char bad[400];       /* why a row was refused */
    exp_engine_t engine; /* rows of configs this engine cannot run are not its */
} eng_t;

/* Rows alike in all that decides a file: one Triton build, kernel, versions, device, shape. */
static bool same_group(const dbq_result_t *a, const char *av, const dbq_result_t *b, const char *bv) {
    return a->shape_id == b->shape_id && strcmp(a->compiler, b->compiler) == 0 &&
           strcmp(a->kernel_hash, b->kernel_hash) == 0 && strcmp(a->device_name, b->device_name) == 0 &&
           strcmp(av, bv) == 0;
}

static bool cell_is(const cell_t *c, const dbq_result_t *r) {
    return c->bs == r->batch_size && same_group(&c->best, c->versions, r, r->versions);
}

static bool row_better(const dbq_result_t *a, double ta, const dbq_result_t *b, double tb) {
    return ta < tb || (ta == tb && a->config_id < b->config_id);
}

static void keep_row(dbq_result_t *dst, const dbq_result_t *src, const char *versions) {
    *dst = *src;
    dst->versions = versions;
}

static mt_status_t reduce_row(void *ctx, const dbq_result_t *r) {
    eng_t *g = ctx;
    if (check_row(r, g->bad, sizeof g->bad) != MT_OK) return MT_INVAL;
    if (strcmp(r->backend, "triton") != 0) {
        if (!g->other_backend[0]) {
            snprintf(g->other_backend, sizeof g->other_backend, "%s", r->backend);
            g->other_sweep = r->sweep_id;
        }
        return 0;
    }
    /* A sweep for both engines measured the union of their fp8 block-scale spaces. */
    if (krn_engine_keeps(exp_engine_name(g->engine), &r->shape, &r->config, NULL, 0) != MT_OK) return 0;
    cell_t *c = NULL;
    if (g->n && cell_is(&g->cells[g->last], r)) c = &g->cells[g->last];
    for (size_t i = 0; !c && i < g->n; i++) {
        if (cell_is(&g->cells[i], r)) {
            c = &g->cells[i];
            g->last = i;
        }
    }
    if (!c) {
        if (mt_grow((void **)&g->cells, &g->cap, g->n + 1, sizeof *g->cells, 64) != MT_OK) return MT_NOMEM;
        c = &g->cells[g->n];
        memset(c, 0, sizeof *c);
        c->versions = mt_strdup(r->versions);
        if (!c->versions) return MT_NOMEM;
        c->shape_id = r->shape_id;
        c->bs = r->batch_size;
        keep_row(&c->best, r, c->versions);
        g->last = g->n++;
    } else if (row_better(r, r->median_us, &c->best, c->best.median_us)) {
        if (r->config_id != c->best.config_id) {
            keep_row(&c->second, &c->best, c->versions);
            c->has_second = true;
        }
        keep_row(&c->best, r, c->versions);
    } else if (r->config_id != c->best.config_id &&
               (!c->has_second || row_better(r, r->median_us, &c->second, c->second.median_us))) {
        keep_row(&c->second, r, c->versions);
        c->has_second = true;
    }
    if (r->up_us <= 0 && r->down_us <= 0) return 0;
    split_t *sp = NULL;
    for (size_t i = 0; !sp && i < c->n_split; i++)
        if (c->split[i].bm == r->config.block_m) sp = &c->split[i];
    if (!sp) {
        if (c->n_split == MAX_SPLIT_BM) {
            g->rc_detail = MT_INVAL;
            return MT_INVAL;
        }
        sp = &c->split[c->n_split++];
        sp->bm = r->config.block_m;
    }
    if (r->up_us > 0 && (!sp->has_up || row_better(r, r->up_us, &sp->up, sp->up.up_us))) {
        keep_row(&sp->up, r, c->versions);
        sp->has_up = true;
    }
    if (r->down_us > 0 && (!sp->has_down || row_better(r, r->down_us, &sp->down, sp->down.down_us))) {
        keep_row(&sp->down, r, c->versions);
        sp->has_down = true;
    }
    return 0;
}

static int cmp_cell(const void *pa, const void *pb) {
    const cell_t *a = pa, *b = pb;
    const dbq_result_t *x = &a->best, *y = &b->best;
    int d;
    if ((d = strcmp(x->compiler, y->compiler)) != 0) return d;
    if ((d = strcmp(x->device_name, y->device_name)) != 0) return d;
    if (x->shape.e != y->shape.e) return x->shape.e < y->shape.e ? -1 : 1;
    if (x->shape.n != y->shape.n) return x->shape.n < y->shape.n ? -1 : 1;
    if ((d = strcmp(x->shape.dtype, y->shape.dtype)) != 0) return d;
    if (x->shape.block_n != y->shape.block_n) return x->shape.block_n < y->shape.block_n ? -1 : 1;
    if (x->shape.block_k != y->shape.block_k) return x->shape.block_k < y->shape.block_k ? -1 : 1;
    if (x->shape.k != y->shape.k) return x->shape.k < y->shape.k ? -1 : 1;
    if (x->shape.topk != y->shape.topk) return x->shape.topk < y->shape.topk ? -1 : 1;
    if (a->shape_id != b->shape_id) return a->shape_id < b->shape_id ? -1 : 1;
    if ((d = strcmp(x->kernel_hash, y->kernel_hash)) != 0) return d;
    if ((d = strcmp(a->versions, b->versions)) != 0) return d;
    return a->bs < b->bs ? -1 : a->bs > b->bs;
}

/* Triton's version: from versions, else from the compiler "triton_3_6_0". */
static void triton_version(const cell_t *c, char *buf, size_t len) {
    exp_version_of(c->versions, "triton", buf, len);
    if (buf[0] || strncmp(c->best.compiler, "triton_", 7) != 0) return;
    snprintf(buf, len, "%s", c->best.compiler + 7);
    for (char *p = buf; *p; p++) {
        if (*p == '_') *p = '.';
    }
}

/* One file to write: cells [first, first + n) of one group. */
typedef struct {
    size_t first, n;
    char dir[1024];   /* folder of the file and its manifest */
    char name[400];   /* file name, without _down */
    char rel[512];    /* path relative to OUT */
    char sweeps[128]; /* the sweeps its rows came from, for messages */
    bool split;
} group_t;

static void group_sweeps(const eng_t *g, group_t *gr) {
    size_t used = 0;
    uint64_t seen[16];
    size_t n_seen = 0;
    gr->sweeps[0] = '\0';
    for (size_t i = gr->first; i < gr->first + gr->n; i++) {
        uint64_t id = g->cells[i].best.sweep_id;
        bool dup = false;
        for (size_t k = 0; k < n_seen; k++) dup = dup || seen[k] == id;
        if (dup || n_seen == 16) continue;
        seen[n_seen++] = id;
        int w =
            snprintf(gr->sweeps + used, sizeof gr->sweeps - used, "%s%llu", used ? "," : "", (unsigned long long)id);
        if (w < 0 || (size_t)w >= sizeof gr->sweeps - used) break;
        used += (size_t)w;
    }
}

static void describe(const cell_t *c, const group_t *gr, char *buf, size_t len) {
    mt_fmt(buf, len, "sweep%s %s (%s, kernel_hash %s, versions '%s')", strchr(gr->sweeps, ',') ? "s" : "", gr->sweeps,
           c->best.compiler, c->best.kernel_hash[0] ? c->best.kernel_hash : "none", c->versions);
}

/* The pair for one cell: lowest up + down among BLOCK_SIZE_M values with both. */
static const split_t *best_pair(const cell_t *c) {
    const split_t *best = NULL;
    for (size_t i = 0; i < c->n_split; i++) {
        const split_t *s = &c->split[i];
        if (!s->has_up || !s->has_down) continue;
        double sum = s->up.up_us + s->down.down_us;
        if (!best || sum < best->up.up_us + best->down.down_us ||
            (sum == best->up.up_us + best->down.down_us && s->bm < best->bm))
            best = s;
    }
    return best;
}

/* Adds the engine's fields to a manifest record; for a split file also the per-entry
 * comparison of the whole-layer best with the pair. */
static void engine_record(json_t *rec, const exp_opts_t *o, const eng_t *g, const group_t *gr, const char *tv,
                          bool down_file) {
    const cell_t *c0 = &g->cells[gr->first];
    char kernel[32], engine[64];
    exp_version_of(c0->versions, "kernel", kernel, sizeof kernel);
    exp_version_of(c0->versions, "engine", engine, sizeof engine);
    json_object_set_new(rec, "engine", json_string(exp_engine_name(o->engine)));
    json_object_set_new(rec, "kernel", kernel[0] ? json_string(kernel) : json_null());
    json_object_set_new(rec, "kernel_engine", engine[0] ? json_string(engine) : json_null());
    json_object_set_new(rec, "versions", json_string(c0->versions));
    json_object_set_new(rec, "triton_version", json_string(tv));
    if (o->engine != EXP_ENGINE_SGLANG) return;
    char down[420];
    mt_fmt(down, sizeof down, "%.*s_down.json", (int)(strlen(gr->name) - 5), gr->name);
    if (down_file) {
        json_object_set_new(rec, "role", json_string("down"));
        json_object_set_new(rec, "up_file", json_string(gr->name));
        json_object_set_new(
            rec, "entry_rule",
            json_string("down config of the pair (up, down) with the lowest up_us + down_us whose BLOCK_SIZE_M agree"));
    } else {
        json_object_set_new(rec, "role", json_string(gr->split ? "up" : "whole"));
        json_object_set_new(rec, "down_file", gr->split ? json_string(down) : json_null());
        json_object_set_new(
            rec, "entry_rule",
            json_string(
                gr->split
                    ? "up config of the pair (up, down) with the lowest up_us + down_us whose BLOCK_SIZE_M agree; "
                      "the engine runs the first GEMM with this file and the second with down_file"
                    : "best whole-layer config (lowest median); no down file: the rows lack separate up/down timings"));
    }
    json_t *entries = json_object_get(rec, "entries");
    for (size_t i = gr->first; i < gr->first + gr->n; i++) {
        const cell_t *c = &g->cells[i];
        char key[16];
        snprintf(key, sizeof key, "%u", c->bs);
        json_t *e = json_object_get(entries, key);
        if (!e) continue;
        json_object_set_new(e, "whole_layer_best_us", json_real(c->best.median_us));
        json_object_set_new(e, "whole_layer_best_config_id", json_integer((json_int_t)c->best.config_id));
        if (c->best.up_us > 0 && c->best.down_us > 0)
            json_object_set_new(e, "whole_layer_best_up_down_us", json_real(c->best.up_us + c->best.down_us));
        if (!c->pair) continue;
        if (down_file) {
            json_object_set_new(e, "down_us", json_real(c->pair->down.down_us));
        } else {
            json_object_set_new(e, "up_us", json_real(c->pair->up.up_us));
        }
        json_object_set_new(e, "split_up_us", json_real(c->pair->up.up_us));
        json_object_set_new(e, "split_down_us", json_real(c->pair->down.down_us));
        json_object_set_new(e, "split_sum_us", json_real(c->pair->up.up_us + c->pair->down.down_us));
        json_object_set_new(e, "split_block_m", json_integer(c->pair->bm));
    }
}

/* ---- the engine layouts: plan, lock, write */

/* Plans a group's file(s) and their manifest records. */
static int engine_group(run_t *x, const eng_t *g, group_t *gr, char *err, size_t errlen) {
    int rc = MT_OK;
    const exp_opts_t *o = x->o;
    entry_t *ents = NULL;
    const cell_t *c0 = &g->cells[gr->first];
    char tv[64];
    triton_version(c0, tv, sizeof tv);
    ents = mt_calloc(gr->n + 1, sizeof *ents);
    if (!ents) return MT_NOMEM;
    for (int pass = 0; pass < (gr->split ? 2 : 1); pass++) {
        bool down = pass == 1;
        for (size_t i = 0; i < gr->n; i++) {
            const cell_t *c = &g->cells[gr->first + i];
            const dbq_result_t *r = !gr->split ? &c->best : down ? &c->pair->down : &c->pair->up;
            double cost = gr->split ? c->pair->up.up_us + c->pair->down.down_us : r->median_us;
            /* the margin is the whole layer's: a split pair's entry has none */
            ents[i] = (entry_t){c->bs, r->config, r, cost, gr->split, !gr->split && c->has_second ? &c->second : NULL};
        }
        char name[420], rel[540];
        if (down)
            mt_fmt(name, sizeof name, "%.*s_down.json", (int)(strlen(gr->name) - 5), gr->name);
        else
            mt_fmt(name, sizeof name, "%s", gr->name);
        if (o->engine == EXP_ENGINE_SGLANG)
            mt_fmt(rel, sizeof rel, "configs/%s/%s", c0->best.compiler, name);
        else
            mt_fmt(rel, sizeof rel, "%s", name);
        pend_t *p = NULL;
        rc = plan_file(x, gr->dir, name, rel, ents, gr->n, o->engine == EXP_ENGINE_VLLM ? tv : NULL, c0->versions,
                       &c0->best, &p, err, errlen);
        if (rc != MT_OK) goto out;
        snprintf(p->meta.dir, sizeof p->meta.dir, "%s", c0->best.compiler);
        engine_record(p->rec, o, g, gr, tv, down);
    }
out:
    free(ents);
    return rc;
}

/* The engine's own get_config_file_name names every planned file as moetune does, where the
 * engine imports (engine_check.h); a disagreement refuses the export before anything is written. */
static int engine_names_check(const exp_opts_t *o, const eng_t *g, const group_t *groups, size_t n, char *err,
                              size_t errlen) {
    const char **devs = mt_calloc(n + 1, sizeof *devs), **names = mt_calloc(n + 1, sizeof *names);
    krn_shape_t *shapes = mt_calloc(n + 1, sizeof *shapes);
    int rc = devs && names && shapes ? MT_OK : MT_NOMEM;
    for (size_t k = 0; rc == MT_OK && k < n; k++) {
        devs[k] = g->cells[groups[k].first].best.device_name;
        shapes[k] = g->cells[groups[k].first].best.shape;
        names[k] = groups[k].name;
    }
    if (rc == MT_OK) rc = eng_check_names(o->engine, devs, shapes, names, n, o->changes, err, errlen);
    free(devs);
    free(names);
    free(shapes);
    return rc;
}

/* The refusal of two groups, other's and c's, that would write one file gr->rel: two
 * shapes, two devices, or two builds or versions. */
static void clash_text(const eng_t *g, const group_t *og, const cell_t *c, const group_t *gr, char *err,
                       size_t errlen) {
    const cell_t *other = &g->cells[og->first];
    char a[400], b[400], sa[128], sb[128];
    describe(other, og, a, sizeof a);
    describe(c, gr, b, sizeof b);
    shape_text(&other->best.shape, sa, sizeof sa);
    shape_text(&c->best.shape, sb, sizeof sb);
    if (other->shape_id != c->shape_id)
        mt_fmt(err, errlen,
               "two shapes, %s and %s, would both be written to %s (the name carries E and N "
               "only): %s and %s; export one sweep at a time with --sweep N into separate --out folders",
               sa, sb, gr->rel, a, b);
    else if (strcmp(other->best.device_name, c->best.device_name) != 0)
        mt_fmt(err, errlen,
               "results of two devices, %s and %s, would be merged into %s: %s and %s; "
               "export one sweep at a time with --sweep N",
               other->best.device_name, c->best.device_name, gr->rel, a, b);
    else
        mt_fmt(err, errlen,
               "results of different Triton builds, kernels or versions would be merged "
               "into %s: %s and %s; export one sweep at a time with --sweep N",
               gr->rel, a, b);
}

static int engine_run(run_t *x, dbq_t **q, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    const exp_opts_t *o = x->o;
    eng_t g;
    group_t *groups = NULL;
    size_t n_groups = 0;
    entry_t *tmp = NULL;
    memset(&g, 0, sizeof g);
    g.engine = o->engine;
    rc = dbq_export_rows(*q, &x->sel, false, reduce_row, &g, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (g.rc_detail == MT_INVAL)
        mt_fmt(err, errlen, "more than %d BLOCK_SIZE_M values for one batch size", MAX_SPLIT_BM);
    else if (rc == MT_INVAL && g.bad[0])
        mt_fmt(err, errlen, "%s", g.bad);
    if (rc != MT_OK) goto out;
    size_t kept = 0;
    for (size_t k = 0; k < g.n; k++) { /* the ship guard: never slower than the default or the incumbent */
        cell_t *c = &g.cells[k];
        const dbq_result_t *ship = shipguard_ship(x->guard, &c->best);
        if (!ship) { /* between two keys, where the engine's entry holds: no key */
            free(c->versions);
            continue;
        }
        if (ship != &c->best) {
            keep_row(&c->second, &c->best, c->versions);
            c->has_second = true;
            keep_row(&c->best, ship, c->versions);
        }
        g.cells[kept++] = *c;
    }
    g.n = kept;
    dbq_close(q);
    if (g.other_backend[0]) {
        bool sim = strcmp(g.other_backend, "sim") == 0;
        mt_fmt(err, errlen,
               "sweep %llu measured with the %s backend: %s; --engine exports triton results "
               "only (export it without --engine%s)",
               (unsigned long long)g.other_sweep, g.other_backend,
               sim ? "its numbers are simulated, never a measurement"
               : strcmp(g.other_backend, "cuda") == 0
                   ? "its configs are for moetune's CUDA kernel, which no engine runs"
                   : "its configs are not for an engine's Triton kernel",
               o->sweep_id ? "" : ", or pick a triton sweep with --sweep N");
        rc = MT_INVAL;
        goto out;
    }
    if (g.n == 0) {
        rc = no_results(o, err, errlen);
        goto out;
    }
    qsort(g.cells, g.n, sizeof *g.cells, cmp_cell);
    groups = mt_calloc(g.n, sizeof *groups);
    tmp = mt_calloc(g.n, sizeof *tmp);
    if (!groups || !tmp) {
        rc = MT_NOMEM;
        goto out;
    }
    /* Plan every file from the rows first: nothing is created when one is refused. */
    for (size_t i = 0; i < g.n;) {
        const cell_t *c = &g.cells[i];
        size_t j = i + 1;
        while (j < g.n && same_group(&g.cells[j].best, g.cells[j].versions, &c->best, c->versions)) j++;
        rc = check_dir_name(c->best.compiler, err, errlen);
        if (rc == MT_OK) rc = check_device_name(&c->best, err, errlen);
        if (rc != MT_OK) goto out;
        group_t *gr = &groups[n_groups++];
        gr->first = i;
        gr->n = j - i;
        group_sweeps(&g, gr);
        exp_engine_file_name(o->engine, c->best.device_name, &c->best.shape, gr->name, sizeof gr->name);
        if (o->engine == EXP_ENGINE_SGLANG) {
            mt_fmt(gr->dir, sizeof gr->dir, "%s/configs/%s", o->out_dir, c->best.compiler);
            mt_fmt(gr->rel, sizeof gr->rel, "configs/%s/%s", c->best.compiler, gr->name);
        } else {
            mt_fmt(gr->dir, sizeof gr->dir, "%s", o->out_dir);
            mt_fmt(gr->rel, sizeof gr->rel, "%s", gr->name);
        }
        for (size_t k = 0; k + 1 < n_groups; k++) {
            if (strcmp(groups[k].rel, gr->rel) != 0) continue;
            clash_text(&g, &groups[k], c, gr, err, errlen);
            rc = MT_INVAL;
            goto out;
        }
        /* Split only when every batch size has a pair: a partial _down file would
         * hand some batch sizes a down config chosen for another up config. */
        gr->split = o->engine == EXP_ENGINE_SGLANG;
        for (size_t k = i; k < j; k++) {
            g.cells[k].pair = best_pair(&g.cells[k]);
            gr->split = gr->split && g.cells[k].pair;
        }
        if (!gr->split)
            for (size_t k = i; k < j; k++) g.cells[k].pair = NULL;
        for (size_t k = i; gr->split && k < j; k++) { /* the ship guard, whole layer against the pair */
            cell_t *ck = &g.cells[k];
            const dbq_result_t *lay =
                shipguard_layer(x->guard, &ck->best, ck->pair->up.up_us + ck->pair->down.down_us);
            if (!lay) continue;
            ck->guard_pair = (split_t){.bm = lay->config.block_m, .has_up = true, .has_down = true};
            keep_row(&ck->guard_pair.up, lay, ck->versions);
            keep_row(&ck->guard_pair.down, lay, ck->versions);
            ck->pair = &ck->guard_pair;
        }
        for (size_t k = i; k < j; k++)
            tmp[k - i] = (entry_t){g.cells[k].bs, g.cells[k].best.config, &g.cells[k].best, 0, false, NULL};
        rc = check_coverage(x, &c->best, tmp, j - i, gr->rel, err, errlen);
        if (rc != MT_OK) goto out;
        i = j;
    }
    rc = engine_names_check(o, &g, groups, n_groups, err, errlen);
    if (rc != MT_OK) goto out;
    rc = lock_out(x, err, errlen);
    if (rc != MT_OK) goto out;
    for (size_t k = 0; k < n_groups; k++) {
        rc = mt_mkdirs(groups[k].dir, err, errlen);
        if (rc != MT_OK) goto out;
    }
    for (size_t k = 0; k < n_groups; k++) {
        rc = engine_group(x, &g, &groups[k], err, errlen);
        if (rc != MT_OK) goto out;
    }
    rc = commit(x, rep, err, errlen);
out:
    free(tmp);
    free(groups);
    for (size_t i = 0; i < g.n; i++) free(g.cells[i].versions);
    free(g.cells);
    return rc;
}

/* ---- today's layout: OUT/<compiler or sim>/name.json */

typedef struct {
    size_t first, n;
    char dir[1024];
    char name[400];
    char rel[512];
} plain_t;

static int plain_run(run_t *x, dbq_t **q, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    const exp_opts_t *o = x->o;
    rowvec_t v;
    plain_t *files = NULL;
    size_t n_files = 0;
    entry_t *ents = NULL;
    memset(&v, 0, sizeof v);
    rc = exp_pairs(*q, &x->sel, collect, &v, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (rc == MT_INVAL && v.bad[0]) mt_fmt(err, errlen, "%s", v.bad);
    if (rc != MT_OK) goto out;
    size_t kept = 0;
    for (size_t k = 0; k < v.n; k++) { /* the ship guard: never slower than the default or the incumbent */
        const dbq_result_t *ship = shipguard_ship(x->guard, &v.rows[k]);
        if (!ship) continue; /* between two keys, where the engine's entry holds: no key */
        if (ship != &v.rows[k]) {
            v.ru[k] = v.rows[k];
            v.rows[k] = *ship;
        }
        v.rows[kept] = v.rows[k];
        v.ru[kept++] = v.ru[k];
    }
    v.n = kept;
    dbq_close(q);
    if (v.n == 0) {
        rc = no_results(o, err, errlen);
        goto out;
    }
    files = mt_calloc(v.n, sizeof *files);
    ents = mt_calloc(v.n + 1, sizeof *ents);
    if (!files || !ents) {
        rc = MT_NOMEM;
        goto out;
    }
    for (size_t k = 0; k < v.n; k++)
        ents[k] = (entry_t){v.rows[k].batch_size,
                            v.rows[k].config,
                            &v.rows[k],
                            v.rows[k].median_us,
                            false,
                            v.ru[k].config_id ? &v.ru[k] : NULL};
    /* Plan every file from the rows first: nothing is created when one is refused. */
    for (size_t i = 0; i < v.n;) {
        const dbq_result_t *r = &v.rows[i];
        size_t j = i + 1;
        while (j < v.n && v.rows[j].shape_id == r->shape_id && strcmp(v.rows[j].export_dir, r->export_dir) == 0 &&
               strcmp(v.rows[j].device_name, r->device_name) == 0)
            j++;
        rc = check_dir_name(r->export_dir, err, errlen);
        if (rc == MT_OK) rc = check_device_name(r, err, errlen);
        if (rc != MT_OK) goto out;
        plain_t *pf = &files[n_files++];
        pf->first = i;
        pf->n = j - i;
        file_name(r, pf->name, sizeof pf->name);
        mt_fmt(pf->dir, sizeof pf->dir, "%s/%s", o->out_dir, r->export_dir);
        mt_fmt(pf->rel, sizeof pf->rel, "%s/%s", r->export_dir, pf->name);
        for (size_t k = 0; k + 1 < n_files; k++) {
            if (strcmp(files[k].rel, pf->rel) != 0) continue;
            char a[128], b[128];
            shape_text(&v.rows[files[k].first].shape, a, sizeof a);
            shape_text(&r->shape, b, sizeof b);
            mt_fmt(err, errlen,
                   "two shapes, %s and %s, would both be written to %s (the name carries E and N "
                   "only); export one sweep at a time with --sweep N into separate --out folders",
                   a, b, pf->rel);
            rc = MT_INVAL;
            goto out;
        }
        for (size_t k = i + 1; k < j; k++) {
            if (strcmp(v.rows[k].kernel_hash, r->kernel_hash) == 0) continue;
            mt_fmt(err, errlen,
                   "%s would mix results of two kernel sources: kernel_hash %s (sweep %llu) and %s "
                   "(sweep %llu); export one sweep at a time with --sweep N",
                   pf->rel, r->kernel_hash[0] ? r->kernel_hash : "none", (unsigned long long)r->sweep_id,
                   v.rows[k].kernel_hash[0] ? v.rows[k].kernel_hash : "none", (unsigned long long)v.rows[k].sweep_id);
            rc = MT_INVAL;
            goto out;
        }
        rc = check_coverage(x, r, &ents[i], j - i, pf->rel, err, errlen);
        if (rc != MT_OK) goto out;
        i = j;
    }
    rc = lock_out(x, err, errlen);
    if (rc != MT_OK) goto out;
    for (size_t k = 0; k < n_files; k++) {
        plain_t *pf = &files[k];
        pend_t *p = NULL;
        rc = mt_mkdirs(pf->dir, err, errlen);
        if (rc != MT_OK) goto out;
        rc = plan_file(x, pf->dir, pf->name, pf->rel, &ents[pf->first], pf->n, NULL, NULL, &v.rows[pf->first], &p, err,
                       errlen);
        if (rc != MT_OK) goto out;
    }
    rc = commit(x, rep, err, errlen);
out:
    free(ents);
    free(files);
    free(v.rows);
    free(v.ru);
    return rc;
}

mt_status_t exp_run(const exp_opts_t *o, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    dbq_t *q = NULL;
    run_t x;
    struct sigaction ign, old_xfsz;
    memset(rep, 0, sizeof *rep);
    memset(&x, 0, sizeof x);
    x.o = o;
    x.lock_fd = -1;
    sel_init(&x);
    /* A file size limit must be an error (EFBIG) like a full disk, not a silent death. */
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGXFSZ, &ign, &old_xfsz);
    rc = dbq_open(o->db_path, &q, err, errlen);
    if (rc != MT_OK) goto out;
    /* asked before any file is written: an export it could not record writes nothing */
    rc = dbx_exports_writable(o->db_path, err, errlen);
    if (rc != MT_OK) goto out;
    rc = load_coverage(&x, q, err, errlen);
    if (rc == MT_OK) rc = shipguard_load(q, &x.sel, o->engine, &x.guard, err, errlen);
    if (rc != MT_OK) goto out;
    rc = o->engine != EXP_ENGINE_NONE ? engine_run(&x, &q, rep, err, errlen) : plain_run(&x, &q, rep, err, errlen);
out:
    rep->recovered = x.recovered;
    run_free(&x);
    dbq_close(&q);
    sigaction(SIGXFSZ, &old_xfsz, NULL);
    return rc;
}
