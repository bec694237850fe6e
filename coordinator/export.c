/* export.c - config files and manifest from the store (see export.h). */
#include "export.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mt.h"
#include "query.h"

typedef struct {
    dbq_result_t *rows;
    size_t n, cap;
} rowvec_t;

/* One entry of a file being written: from a result row, or kept from the old file. */
typedef struct {
    uint32_t bs;
    krn_config_t cfg;
    const dbq_result_t *row;  /* NULL when kept from the previous file */
} entry_t;

/* What exports gets per file, kept until the end so one transaction records all. */
typedef struct {
    uint64_t shape_id;
    char dir[48];
    char sweep_ids[256];
    char hash[17];
} file_meta_t;

static const struct { const char *json; size_t off; } k_cfg_fields[] = {
    {"BLOCK_SIZE_M", offsetof(krn_config_t, block_m)}, {"BLOCK_SIZE_N", offsetof(krn_config_t, block_n)},
    {"BLOCK_SIZE_K", offsetof(krn_config_t, block_k)}, {"GROUP_SIZE_M", offsetof(krn_config_t, group_m)},
    {"num_warps", offsetof(krn_config_t, num_warps)}, {"num_stages", offsetof(krn_config_t, num_stages)},
};
#define N_CFG_FIELDS (sizeof k_cfg_fields / sizeof k_cfg_fields[0])

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

static int collect(void *ctx, const dbq_result_t *row) {
    rowvec_t *v = ctx;
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 256;
        dbq_result_t *grown = realloc(v->rows, cap * sizeof *grown);
        if (!grown) return MT_NOMEM;
        v->rows = grown;
        v->cap = cap;
    }
    v->rows[v->n] = *row;
    v->rows[v->n++].versions = "";  /* points into the statement; this layout does not use it */
    return 0;
}

/* A directory name from the database must be one plain path component. */
static bool safe_component(const char *s) {
    if (!*s || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) return false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return false;
    }
    return true;
}

static void file_name(const dbq_result_t *r, char *buf, size_t len) {
    char dev[128];
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

static json_t *cfg_json(const krn_config_t *c) {
    json_t *o = json_object();
    for (size_t i = 0; o && i < N_CFG_FIELDS; i++)
        json_object_set_new(o, k_cfg_fields[i].json,
                            json_integer(*(const uint32_t *)((const char *)c + k_cfg_fields[i].off)));
    return o;
}

static void cfg_text(const krn_config_t *c, char *buf, size_t len) {
    snprintf(buf, len, "M%u N%u K%u G%u w%u s%u", c->block_m, c->block_n, c->block_k, c->group_m,
             c->num_warps, c->num_stages);
}

static bool cfg_eq(const krn_config_t *a, const krn_config_t *b) {
    return memcmp(a, b, sizeof *a) == 0;
}

static int cmp_entry(const void *a, const void *b) {
    uint32_t x = ((const entry_t *)a)->bs, y = ((const entry_t *)b)->bs;
    return x < y ? -1 : x > y;
}

/* Reads an existing config file into old[] (sorted) and its "triton_version" string
 * (vLLM files) into tv ("" when none). MT_NOTFOUND when absent. */
static int read_old(const char *path, entry_t **old, size_t *n_old, char *tv, size_t tvlen, char *err,
                    size_t errlen) {
    int rc = MT_OK;
    json_error_t jerr;
    *old = NULL;
    *n_old = 0;
    tv[0] = '\0';
    if (access(path, F_OK) != 0) return MT_NOTFOUND;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root || !json_is_object(root)) {
        mt_fmt(err, errlen, "%s exists but is not a config file (%s); move it away to export",
               path, root ? "not an object" : jerr.text);
        rc = MT_INVAL;
        goto out;
    }
    *old = calloc(json_object_size(root) + 1, sizeof **old);
    if (!*old) {
        rc = MT_NOMEM;
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        entry_t *e = &(*old)[*n_old];
        uint32_t bs;
        if (strcmp(key, "triton_version") == 0 && json_is_string(val)) {
            snprintf(tv, tvlen, "%s", json_string_value(val));
            continue;
        }
        if (mt_parse_u32(key, 1, UINT32_MAX, &bs) != MT_OK || !json_is_object(val)) {
            mt_fmt(err, errlen, "%s exists but is not a config file (entry \"%s\"); move it away to export",
                   path, key);
            rc = MT_INVAL;
            goto out;
        }
        e->bs = bs;
        for (size_t i = 0; i < N_CFG_FIELDS; i++) {
            json_t *f = json_object_get(val, k_cfg_fields[i].json);
            if (!json_is_integer(f) || json_integer_value(f) < 0 || json_integer_value(f) > 1048576) {
                mt_fmt(err, errlen, "%s exists but is not a config file (entry \"%s\": %s); move it away to export",
                       path, key, k_cfg_fields[i].json);
                rc = MT_INVAL;
                goto out;
            }
            *(uint32_t *)((char *)&e->cfg + k_cfg_fields[i].off) = (uint32_t)json_integer_value(f);
        }
        (*n_old)++;
    }
    qsort(*old, *n_old, sizeof **old, cmp_entry);
out:
    if (rc != MT_OK) {
        free(*old);
        *old = NULL;
        *n_old = 0;
    }
    json_decref(root);
    return rc;
}

/* Writes text to path through a temp file in the same directory and a rename. */
static int write_atomic(const char *path, const char *text, char *err, size_t errlen) {
    char tmp[1100];
    mt_fmt(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        mt_fmt(err, errlen, "%s: %s", tmp, strerror(errno));
        return MT_IO;
    }
    size_t len = strlen(text), done = 0;
    while (done < len) {
        ssize_t w = write(fd, text + done, len - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            mt_fmt(err, errlen, "%s: %s", tmp, strerror(errno));
            close(fd);
            unlink(tmp);
            return MT_IO;
        }
        done += (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0) {
        mt_fmt(err, errlen, "%s: %s", tmp, strerror(errno));
        unlink(tmp);
        return MT_IO;
    }
    if (rename(tmp, path) != 0) {
        mt_fmt(err, errlen, "rename %s: %s", path, strerror(errno));
        unlink(tmp);
        return MT_IO;
    }
    return MT_OK;
}

/* Dumps a JSON value the way the frameworks' files look: indent 4, keys in insertion
 * order, newline at the end. Caller frees. */
static char *dump(json_t *v) {
    char *body = json_dumps(v, JSON_PRESERVE_ORDER | JSON_INDENT(4));
    if (!body) return NULL;
    size_t n = strlen(body);
    char *text = realloc(body, n + 2);
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

/* The manifest record of one file. */
static json_t *manifest_record(const dbq_result_t *first, const entry_t *ents, size_t n_ents,
                               file_meta_t *meta) {
    json_t *rec = json_object();
    json_t *shape = json_object();
    json_t *sweeps = json_array(), *uuids = json_array(), *drivers = json_array();
    json_t *toolkits = json_array(), *hashes = json_array(), *entries = json_object();
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
        json_object_set_new(rec, "routing", json_pack("{s:s, s:s, s:s}", "kind", "captured", "sha256",
                                                      first->shape.routing, "source", first->routing_source));
    else
        json_object_set_new(rec, "routing", json_pack("{s:s}", "kind", "uniform"));
    for (size_t i = 0; i < n_ents; i++) {
        const dbq_result_t *r = ents[i].row;
        char key[16];
        snprintf(key, sizeof key, "%u", ents[i].bs);
        json_t *e = json_object();
        if (!r) {
            json_object_set_new(e, "kept_from_previous_file", json_true());
            json_object_set_new(entries, key, e);
            continue;
        }
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
    return rec;
}

/* Records the files in exports in one short write transaction. */
static int record(const exp_opts_t *o, const exp_report_t *rep, const file_meta_t *meta, char *err,
                  size_t errlen) {
    int rc = MT_OK;
    sqlite3 *db = NULL;
    sqlite3_stmt *st = NULL;
    bool in_tx = false;
    if (sqlite3_open_v2(o->db_path, &db, SQLITE_OPEN_READWRITE, NULL) != SQLITE_OK) {
        mt_fmt(err, errlen, "%s: %s", o->db_path, db ? sqlite3_errmsg(db) : "cannot open");
        rc = MT_IO;
        goto out;
    }
    sqlite3_busy_timeout(db, 5000);
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) goto fail;
    in_tx = true;
    if (sqlite3_prepare_v2(db,
                           "INSERT INTO exports (created, out_dir, path, sweep_ids, entries,"
                           " changed_entries, content_hash) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                           -1, &st, NULL) != SQLITE_OK)
        goto fail;
    for (size_t i = 0; i < rep->n_files; i++) {
        sqlite3_reset(st);
        sqlite3_bind_int64(st, 1, mt_wall_s());
        sqlite3_bind_text(st, 2, o->out_dir, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 3, rep->files[i].path, -1, SQLITE_STATIC);
        sqlite3_bind_text(st, 4, meta[i].sweep_ids, -1, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, rep->files[i].entries);
        sqlite3_bind_int64(st, 6, rep->files[i].changed);
        sqlite3_bind_text(st, 7, meta[i].hash, -1, SQLITE_STATIC);
        if (sqlite3_step(st) != SQLITE_DONE) goto fail;
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) goto fail;
    in_tx = false;
    goto out;
fail:
    mt_fmt(err, errlen, "files written, but recording them in %s failed: %s", o->db_path,
           sqlite3_errmsg(db));
    rc = sqlite3_errcode(db) == SQLITE_BUSY ? MT_BUSY : MT_ERR;
out:
    sqlite3_finalize(st);
    if (in_tx) sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
    sqlite3_close(db);
    return rc;
}

static int add_file(exp_report_t *rep, file_meta_t **meta, size_t *cap) {
    if (rep->n_files == *cap) {
        size_t nc = *cap ? *cap * 2 : 16;
        exp_file_t *f = realloc(rep->files, nc * sizeof *f);
        if (!f) return MT_NOMEM;
        rep->files = f;
        file_meta_t *m = realloc(*meta, nc * sizeof *m);
        if (!m) return MT_NOMEM;
        *meta = m;
        *cap = nc;
    }
    memset(&rep->files[rep->n_files], 0, sizeof rep->files[0]);
    memset(&(*meta)[rep->n_files], 0, sizeof (*meta)[0]);
    rep->n_files++;
    return MT_OK;
}

/* Writes one config file OUT/relpath (at dirpath/name) holding ents[0, n) (sorted by
 * batch size) merged with the entries of the file it replaces, kept for batch sizes
 * ents lacks. tv, when not NULL, is written first as "triton_version" (vLLM's files).
 * Fills f and meta; *merged (caller frees) gets the entries as written. */
static int write_config(const exp_opts_t *o, const char *dirpath, const char *name, const char *relpath,
                        const entry_t *new_ents, size_t n, const char *tv, exp_file_t *f,
                        file_meta_t *meta, entry_t **merged, size_t *n_merged, char *err, size_t errlen) {
    int rc = MT_OK;
    entry_t *old = NULL, *ents = NULL;
    size_t n_old = 0, n_ents = 0;
    json_t *obj = NULL;
    char *text = NULL;
    char path[1024], old_tv[64];
    *merged = NULL;
    *n_merged = 0;
    mt_fmt(f->path, sizeof f->path, "%s", relpath);
    mt_fmt(path, sizeof path, "%s/%s", dirpath, name);
    rc = read_old(path, &old, &n_old, old_tv, sizeof old_tv, err, errlen);
    bool existed = rc == MT_OK;
    if (rc != MT_OK && rc != MT_NOTFOUND) goto out;
    rc = MT_OK;
    ents = calloc(n + n_old + 1, sizeof *ents);
    if (!ents) {
        rc = MT_NOMEM;
        goto out;
    }
    /* Merge: both lists are sorted by batch size. */
    size_t i = 0, j = 0;
    while (i < n || j < n_old) {
        if (j == n_old || (i < n && new_ents[i].bs <= old[j].bs)) {
            entry_t *e = &ents[n_ents++];
            *e = new_ents[i];
            bool had = j < n_old && old[j].bs == e->bs;
            if (!had || !cfg_eq(&old[j].cfg, &e->cfg)) {
                f->changed++;
                if (existed && o->changes) {
                    char a[64] = "(none)", b[64];
                    if (had) cfg_text(&old[j].cfg, a, sizeof a);
                    cfg_text(&e->cfg, b, sizeof b);
                    fprintf(o->changes, "%s: batch size %u: %s -> %s\n", f->path, e->bs, a, b);
                }
            }
            if (had) j++;
            i++;
        } else {
            ents[n_ents++] = old[j++];  /* kept: the store has nothing for this batch size */
        }
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
        json_object_set_new(obj, key, cfg_json(&ents[k].cfg));
    }
    text = dump(obj);
    if (!text) {
        rc = MT_NOMEM;
        goto out;
    }
    mt_fmt(meta->hash, sizeof meta->hash, "%016llx",
           (unsigned long long)mt_fnv1a(MT_FNV_INIT, text, strlen(text)));
    /* A file that lacked its triton_version is rewritten even when no entry changed. */
    bool same_tv = !tv || strcmp(tv, old_tv) == 0;
    if (existed && f->changed == 0 && same_tv) {
        f->state = EXP_UNCHANGED;
    } else {
        f->state = existed ? EXP_CHANGED : EXP_NEW;
        rc = write_atomic(path, text, err, errlen);
        if (rc != MT_OK) goto out;
    }
    *merged = ents;
    *n_merged = n_ents;
    ents = NULL;
out:
    free(text);
    json_decref(obj);
    free(ents);
    free(old);
    return rc;
}

/* Exports the rows [0, n) of one file into dirpath; updates manifest. */
static int export_file(const exp_opts_t *o, const char *dirpath, const dbq_result_t *rows, size_t n,
                       json_t *manifest, exp_file_t *f, file_meta_t *meta, char *err, size_t errlen) {
    int rc = MT_OK;
    entry_t *ents = NULL, *merged = NULL;
    size_t n_merged = 0;
    char name[400], rel[512];
    file_name(&rows[0], name, sizeof name);
    mt_fmt(rel, sizeof rel, "%s/%s", rows[0].export_dir, name);
    f->simulated = strcmp(rows[0].backend, "sim") == 0;
    ents = calloc(n + 1, sizeof *ents);
    if (!ents) return MT_NOMEM;
    for (size_t i = 0; i < n; i++) ents[i] = (entry_t){rows[i].batch_size, rows[i].config, &rows[i]};
    rc = write_config(o, dirpath, name, rel, ents, n, NULL, f, meta, &merged, &n_merged, err, errlen);
    if (rc != MT_OK) goto out;
    meta->shape_id = rows[0].shape_id;
    snprintf(meta->dir, sizeof meta->dir, "%s", rows[0].export_dir);
    json_object_set_new(manifest, name, manifest_record(&rows[0], merged, n_merged, meta));
out:
    free(merged);
    free(ents);
    return rc;
}

static int write_manifest(const char *dirpath, json_t *manifest, char *err, size_t errlen) {
    char path[1024];
    mt_fmt(path, sizeof path, "%s/manifest.json", dirpath);
    char *text = dump(manifest);
    if (!text) return MT_NOMEM;
    int rc = write_atomic(path, text, err, errlen);
    free(text);
    return rc;
}

/* ---- engine layouts (export.h "With an engine") */

int exp_engine_parse(const char *name, exp_engine_t *engine) {
    if (name && strcmp(name, "sglang") == 0) *engine = EXP_ENGINE_SGLANG;
    else if (name && strcmp(name, "vllm") == 0) *engine = EXP_ENGINE_VLLM;
    else return MT_INVAL;
    return MT_OK;
}

const char *exp_engine_name(exp_engine_t e) {
    return e == EXP_ENGINE_SGLANG ? "sglang" : e == EXP_ENGINE_VLLM ? "vllm" : "";
}

/* vLLM writes any device whose name has the token H200 as NVIDIA_H200. */
static bool has_token(const char *s, const char *tok) {
    size_t n = strlen(tok);
    for (const char *p = s; (p = strstr(p, tok)) != NULL; p += n) {
        bool start = p == s || p[-1] == ' ' || p[-1] == '_';
        bool end = p[n] == '\0' || p[n] == ' ' || p[n] == '_';
        if (start && end) return true;
    }
    return false;
}

void exp_engine_file_name(exp_engine_t engine, const char *device_name, const krn_shape_t *sh, char *buf,
                          size_t len) {
    char dev[128];
    if (engine == EXP_ENGINE_VLLM && has_token(device_name, "H200")) snprintf(dev, sizeof dev, "NVIDIA_H200");
    else snprintf(dev, sizeof dev, "%s", device_name);
    for (char *p = dev; *p; p++) {
        if (*p == ' ' || *p == '/' || *p == '\\') *p = '_';
    }
    int n = snprintf(buf, len, "E=%u,N=%u,device_name=%s", sh->e, sh->n, dev);
    if (n > 0 && (size_t)n < len && strcmp(sh->dtype, "bf16") != 0)
        n += snprintf(buf + n, len - (size_t)n, ",dtype=%s", sh->dtype);
    if (n > 0 && (size_t)n < len && sh->block_n)
        n += snprintf(buf + n, len - (size_t)n, engine == EXP_ENGINE_VLLM ? ",block_shape=[%u,%u]"
                                                                          : ",block_shape=[%u, %u]",
                      sh->block_n, sh->block_k);
    if (n > 0 && (size_t)n < len) snprintf(buf + n, len - (size_t)n, ".json");
}

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
    char *versions;         /* owned; the rows' versions point here */
    uint64_t shape_id;
    uint32_t bs;
    dbq_result_t best;
    split_t split[MAX_SPLIT_BM];
    size_t n_split;
    const split_t *pair;    /* the chosen pair, set when the file is split */
} cell_t;

typedef struct {
    cell_t *cells;
    size_t n, cap;
    size_t last;            /* cell of the previous row: rows come grouped */
    char other_backend[16]; /* first non-triton row seen */
    uint64_t other_sweep;
    int rc_detail;          /* MT_INVAL when a row had too many BLOCK_SIZE_M values */
    exp_engine_t engine;    /* rows of configs this engine cannot run are not its */
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

static int reduce_row(void *ctx, const dbq_result_t *r) {
    eng_t *g = ctx;
    if (strcmp(r->backend, "triton") != 0) {
        if (!g->other_backend[0]) {
            snprintf(g->other_backend, sizeof g->other_backend, "%s", r->backend);
            g->other_sweep = r->sweep_id;
        }
        return 0;
    }
    if (r->median_us <= 0) return 0;
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
        if (g->n == g->cap) {
            size_t cap = g->cap ? g->cap * 2 : 64;
            cell_t *grown = realloc(g->cells, cap * sizeof *grown);
            if (!grown) return MT_NOMEM;
            g->cells = grown;
            g->cap = cap;
        }
        c = &g->cells[g->n];
        memset(c, 0, sizeof *c);
        c->versions = strdup(r->versions);
        if (!c->versions) return MT_NOMEM;
        c->shape_id = r->shape_id;
        c->bs = r->batch_size;
        keep_row(&c->best, r, c->versions);
        g->last = g->n++;
    } else if (row_better(r, r->median_us, &c->best, c->best.median_us)) {
        keep_row(&c->best, r, c->versions);
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

/* The value of key in a versions string ("kernel=sglang triton=3.6.0 ..."), or "". */
static void version_of(const char *versions, const char *key, char *buf, size_t len) {
    size_t n = strlen(key);
    buf[0] = '\0';
    for (const char *p = versions; p && *p;) {
        while (*p == ' ') p++;
        const char *end = strchr(p, ' ');
        size_t tl = end ? (size_t)(end - p) : strlen(p);
        if (tl > n && strncmp(p, key, n) == 0 && p[n] == '=') {
            snprintf(buf, len, "%.*s", (int)(tl - n - 1), p + n + 1);
            return;
        }
        p = end;
    }
}

/* Triton's version: from versions, else from the compiler "triton_3_6_0". */
static void triton_version(const cell_t *c, char *buf, size_t len) {
    version_of(c->versions, "triton", buf, len);
    if (buf[0] || strncmp(c->best.compiler, "triton_", 7) != 0) return;
    snprintf(buf, len, "%s", c->best.compiler + 7);
    for (char *p = buf; *p; p++) {
        if (*p == '_') *p = '.';
    }
}

/* One file to write: cells [first, first + n) of one group. */
typedef struct {
    size_t first, n;
    char dir[1024];         /* folder of the file and its manifest */
    char name[400];         /* file name, without _down */
    char rel[512];          /* path relative to OUT */
    char sweeps[128];       /* the sweeps its rows came from, for messages */
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
        int w = snprintf(gr->sweeps + used, sizeof gr->sweeps - used, "%s%llu", used ? "," : "",
                         (unsigned long long)id);
        if (w < 0 || (size_t)w >= sizeof gr->sweeps - used) break;
        used += (size_t)w;
    }
}

static void describe(const cell_t *c, const group_t *gr, char *buf, size_t len) {
    mt_fmt(buf, len, "sweep%s %s (%s, kernel_hash %s, versions '%s')", strchr(gr->sweeps, ',') ? "s" : "",
           gr->sweeps, c->best.compiler, c->best.kernel_hash[0] ? c->best.kernel_hash : "none", c->versions);
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

/* A manifest record found beside the file must come from the same versions. */
static int check_manifest(const char *out_dir, const group_t *gr, const cell_t *c, char *err, size_t errlen) {
    char mpath[1100];
    mt_fmt(mpath, sizeof mpath, "%s/manifest.json", gr->dir);
    if (access(mpath, F_OK) != 0) return MT_OK;
    json_t *man = json_load_file(mpath, 0, NULL);
    json_t *rec = json_object_get(man, gr->name);
    const char *v = json_string_value(json_object_get(rec, "versions"));
    json_t *hashes = json_object_get(rec, "kernel_hashes");
    const char *h = json_string_value(json_array_get(hashes, 0));
    int rc = MT_OK;
    if (rec && ((v && strcmp(v, c->versions) != 0) || (h && strcmp(h, c->best.kernel_hash) != 0))) {
        mt_fmt(err, errlen, "%s/%s was exported from results with versions '%s' (kernel_hash %s); these are "
               "'%s' (kernel_hash %s), and one file never mixes them: export into another --out or move "
               "the file away", out_dir, gr->rel, v ? v : "?", h ? h : "?", c->versions,
               c->best.kernel_hash[0] ? c->best.kernel_hash : "none");
        rc = MT_INVAL;
    }
    json_decref(man);
    return rc;
}

/* Adds the engine's fields to a manifest record; for a split file also the per-entry
 * comparison of the whole-layer best with the pair. */
static void engine_record(json_t *rec, const exp_opts_t *o, const eng_t *g, const group_t *gr, const char *tv,
                          bool down_file) {
    const cell_t *c0 = &g->cells[gr->first];
    char kernel[32], engine[64];
    version_of(c0->versions, "kernel", kernel, sizeof kernel);
    version_of(c0->versions, "engine", engine, sizeof engine);
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
        json_object_set_new(rec, "entry_rule", json_string(
            "down config of the pair (up, down) with the lowest up_us + down_us whose BLOCK_SIZE_M agree"));
    } else {
        json_object_set_new(rec, "role", json_string(gr->split ? "up" : "whole"));
        json_object_set_new(rec, "down_file", gr->split ? json_string(down) : json_null());
        json_object_set_new(rec, "entry_rule", json_string(gr->split
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

static json_t *load_manifest(const char *dir) {
    char mpath[1100];
    mt_fmt(mpath, sizeof mpath, "%s/manifest.json", dir);
    json_t *m = access(mpath, F_OK) == 0 ? json_load_file(mpath, JSON_PRESERVE_ORDER, NULL) : NULL;
    if (!json_is_object(m)) {
        json_decref(m);
        m = json_object();  /* an unreadable manifest is rebuilt */
    }
    return m;
}

/* Writes a group's file(s) and adds their manifest records. */
static int engine_group(const exp_opts_t *o, const eng_t *g, group_t *gr, json_t *manifest, exp_report_t *rep,
                        file_meta_t **meta, size_t *cap, char *err, size_t errlen) {
    int rc = MT_OK;
    entry_t *ents = NULL, *merged = NULL;
    size_t n_merged = 0;
    const cell_t *c0 = &g->cells[gr->first];
    char tv[64];
    triton_version(c0, tv, sizeof tv);
    ents = calloc(gr->n + 1, sizeof *ents);
    if (!ents) return MT_NOMEM;
    for (int pass = 0; pass < (gr->split ? 2 : 1); pass++) {
        bool down = pass == 1;
        for (size_t i = 0; i < gr->n; i++) {
            const cell_t *c = &g->cells[gr->first + i];
            const dbq_result_t *r = !gr->split ? &c->best : down ? &c->pair->down : &c->pair->up;
            ents[i] = (entry_t){c->bs, r->config, r};
        }
        char name[420], rel[540];
        if (down) mt_fmt(name, sizeof name, "%.*s_down.json", (int)(strlen(gr->name) - 5), gr->name);
        else mt_fmt(name, sizeof name, "%s", gr->name);
        if (o->engine == EXP_ENGINE_SGLANG) mt_fmt(rel, sizeof rel, "configs/%s/%s", c0->best.compiler, name);
        else mt_fmt(rel, sizeof rel, "%s", name);
        rc = add_file(rep, meta, cap);
        if (rc != MT_OK) goto out;
        exp_file_t *f = &rep->files[rep->n_files - 1];
        file_meta_t *m = &(*meta)[rep->n_files - 1];
        rc = write_config(o, gr->dir, name, rel, ents, gr->n, o->engine == EXP_ENGINE_VLLM ? tv : NULL, f, m,
                          &merged, &n_merged, err, errlen);
        if (rc != MT_OK) goto out;
        m->shape_id = c0->shape_id;
        snprintf(m->dir, sizeof m->dir, "%s", c0->best.compiler);
        json_t *rec = manifest_record(&c0->best, merged, n_merged, m);
        engine_record(rec, o, g, gr, tv, down);
        json_object_set_new(manifest, name, rec);
        free(merged);
        merged = NULL;
    }
out:
    free(merged);
    free(ents);
    return rc;
}

static int engine_run(const exp_opts_t *o, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    dbq_t *q = NULL;
    eng_t g;
    group_t *groups = NULL;
    size_t n_groups = 0;
    file_meta_t *meta = NULL;
    size_t cap = 0;
    json_t *manifest = NULL;
    char mdir[1024] = "";
    memset(&g, 0, sizeof g);
    g.engine = o->engine;
    rc = dbq_open(o->db_path, &q, err, errlen);
    if (rc != MT_OK) goto out;
    dbq_filter_t f;
    memset(&f, 0, sizeof f);
    f.sweep_id = o->sweep_id;
    snprintf(f.status, sizeof f.status, "ok");
    rc = dbq_results(q, &f, reduce_row, &g, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (g.rc_detail == MT_INVAL)
        mt_fmt(err, errlen, "more than %d BLOCK_SIZE_M values for one batch size", MAX_SPLIT_BM);
    if (rc != MT_OK) goto out;
    dbq_close(&q);
    if (g.other_backend[0]) {
        bool sim = strcmp(g.other_backend, "sim") == 0;
        mt_fmt(err, errlen, "sweep %llu measured with the %s backend: %s; --engine exports triton results "
               "only (export it without --engine%s)", (unsigned long long)g.other_sweep, g.other_backend,
               sim ? "its numbers are simulated, never a measurement"
               : strcmp(g.other_backend, "cuda") == 0 ? "its configs are for moetune's CUDA kernel, which no engine runs"
               : "its configs are not for an engine's Triton kernel",
               o->sweep_id ? "" : ", or pick a triton sweep with --sweep N");
        rc = MT_INVAL;
        goto out;
    }
    if (g.n == 0) {
        if (o->sweep_id) mt_fmt(err, errlen, "sweep %llu has no ok results to export", (unsigned long long)o->sweep_id);
        else mt_fmt(err, errlen, "the database has no ok results to export");
        rc = MT_NOTFOUND;
        goto out;
    }
    qsort(g.cells, g.n, sizeof *g.cells, cmp_cell);
    groups = calloc(g.n, sizeof *groups);
    if (!groups) {
        rc = MT_NOMEM;
        goto out;
    }
    /* Plan every file first: nothing is written when one would be refused. */
    for (size_t i = 0; i < g.n;) {
        const cell_t *c = &g.cells[i];
        size_t j = i + 1;
        while (j < g.n && same_group(&g.cells[j].best, g.cells[j].versions, &c->best, c->versions)) j++;
        if (!safe_component(c->best.compiler)) {
            mt_fmt(err, errlen, "compiler directory '%s' in the database is not a plain name", c->best.compiler);
            rc = MT_INVAL;
            goto out;
        }
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
            const cell_t *other = &g.cells[groups[k].first];
            char a[400], b[400];
            describe(other, &groups[k], a, sizeof a);
            describe(c, gr, b, sizeof b);
            if (other->shape_id != c->shape_id)
                mt_fmt(err, errlen, "two shapes with E=%u,N=%u but different K, topk or routing would both be written "
                       "to %s: %s and %s; export one sweep at a time with --sweep N", c->best.shape.e,
                       c->best.shape.n, gr->rel, a, b);
            else
                mt_fmt(err, errlen, "results of different Triton builds, kernels or versions would be merged "
                       "into %s: %s and %s; export one sweep at a time with --sweep N", gr->rel, a, b);
            rc = MT_INVAL;
            goto out;
        }
        rc = check_manifest(o->out_dir, gr, c, err, errlen);
        if (rc != MT_OK) goto out;
        char tv[64], path[1500], old_tv[64];
        triton_version(c, tv, sizeof tv);
        entry_t *old = NULL;
        size_t n_old = 0;
        mt_fmt(path, sizeof path, "%s/%s", gr->dir, gr->name);
        rc = read_old(path, &old, &n_old, old_tv, sizeof old_tv, err, errlen);
        free(old);
        if (rc != MT_OK && rc != MT_NOTFOUND) goto out;
        rc = MT_OK;
        if (o->engine == EXP_ENGINE_VLLM && old_tv[0] && strcmp(old_tv, tv) != 0) {
            mt_fmt(err, errlen, "%s/%s holds configs for Triton %s; these are for Triton %s, and one file never "
                   "mixes them: export into another --out or move the file away", o->out_dir, gr->rel, old_tv, tv);
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
        i = j;
    }
    for (size_t k = 0; k < n_groups; k++) {
        group_t *gr = &groups[k];
        if (!manifest || strcmp(mdir, gr->dir) != 0) {
            if (manifest) {
                rc = write_manifest(mdir, manifest, err, errlen);
                if (rc != MT_OK) goto out;
                json_decref(manifest);
            }
            rc = mt_mkdirs(gr->dir, err, errlen);
            if (rc != MT_OK) goto out;
            snprintf(mdir, sizeof mdir, "%s", gr->dir);
            manifest = load_manifest(mdir);
        }
        rc = engine_group(o, &g, gr, manifest, rep, &meta, &cap, err, errlen);
        if (rc != MT_OK) goto out;
    }
    if (manifest) {
        rc = write_manifest(mdir, manifest, err, errlen);
        if (rc != MT_OK) goto out;
    }
    rc = record(o, rep, meta, err, errlen);
out:
    json_decref(manifest);
    free(meta);
    free(groups);
    for (size_t i = 0; i < g.n; i++) free(g.cells[i].versions);
    free(g.cells);
    dbq_close(&q);
    return rc;
}

int exp_run(const exp_opts_t *o, exp_report_t *rep, char *err, size_t errlen) {
    int rc = MT_OK;
    dbq_t *q = NULL;
    rowvec_t v = {0};
    file_meta_t *meta = NULL;
    size_t cap = 0;
    json_t *manifest = NULL;
    memset(rep, 0, sizeof *rep);
    if (o->engine != EXP_ENGINE_NONE) return engine_run(o, rep, err, errlen);
    rc = dbq_open(o->db_path, &q, err, errlen);
    if (rc != MT_OK) goto out;
    rc = dbq_export_best(q, o->sweep_id, collect, &v, err, errlen);
    if (rc == MT_NOMEM) mt_fmt(err, errlen, "out of memory");
    if (rc != MT_OK) goto out;
    dbq_close(&q);
    if (v.n == 0) {
        if (o->sweep_id) mt_fmt(err, errlen, "sweep %llu has no ok results to export", (unsigned long long)o->sweep_id);
        else mt_fmt(err, errlen, "the database has no ok results to export");
        rc = MT_NOTFOUND;
        goto out;
    }
    char dirpath[1024] = "";
    for (size_t i = 0; i < v.n;) {
        const dbq_result_t *r = &v.rows[i];
        size_t j = i + 1;
        while (j < v.n && v.rows[j].shape_id == r->shape_id &&
               strcmp(v.rows[j].export_dir, r->export_dir) == 0 &&
               strcmp(v.rows[j].device_name, r->device_name) == 0)
            j++;
        if (!safe_component(r->export_dir)) {
            mt_fmt(err, errlen, "compiler directory '%s' in the database is not a plain name", r->export_dir);
            rc = MT_INVAL;
            goto out;
        }
        if (!manifest) {
            mt_fmt(dirpath, sizeof dirpath, "%s/%s", o->out_dir, r->export_dir);
            rc = mt_mkdirs(dirpath, err, errlen);
            if (rc != MT_OK) goto out;
            char mpath[1100];
            mt_fmt(mpath, sizeof mpath, "%s/manifest.json", dirpath);
            manifest = access(mpath, F_OK) == 0 ? json_load_file(mpath, JSON_PRESERVE_ORDER, NULL) : NULL;
            if (!json_is_object(manifest)) {
                json_decref(manifest);
                manifest = json_object();  /* an unreadable manifest is rebuilt */
            }
        }
        rc = add_file(rep, &meta, &cap);
        if (rc != MT_OK) goto out;
        exp_file_t *f = &rep->files[rep->n_files - 1];
        file_meta_t *m = &meta[rep->n_files - 1];
        char name[400];
        file_name(r, name, sizeof name);
        for (size_t k = 0; k + 1 < rep->n_files; k++) {
            char other[512];
            mt_fmt(other, sizeof other, "%s/%s", r->export_dir, name);
            if (strcmp(rep->files[k].path, other) == 0) {
                mt_fmt(err, errlen, "two shapes with E=%u,N=%u but different K, topk or routing would both be "
                       "written to %s; export one sweep at a time with --sweep", r->shape.e, r->shape.n, other);
                rc = MT_INVAL;
                goto out;
            }
        }
        rc = export_file(o, dirpath, r, j - i, manifest, f, m, err, errlen);
        if (rc != MT_OK) goto out;
        if (j == v.n || strcmp(v.rows[j].export_dir, r->export_dir) != 0) {
            rc = write_manifest(dirpath, manifest, err, errlen);
            if (rc != MT_OK) goto out;
            json_decref(manifest);
            manifest = NULL;
        }
        i = j;
    }
    rc = record(o, rep, meta, err, errlen);
out:
    json_decref(manifest);
    free(meta);
    free(v.rows);
    dbq_close(&q);
    return rc;
}
