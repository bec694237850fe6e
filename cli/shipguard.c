/* shipguard.c - the ship guard's incumbents and export rule. See shipguard.h. */
#include "shipguard.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "convert.h"
#include "lookup.h"
#include "mt.h"

struct cli_guard {
    char *paths[CLI_GUARD_MAX_BASELINES];
    size_t n_paths;
    Moetune__Incumbent *inc; /* the entries, and pointers to them for the spec */
    Moetune__Incumbent **ptrs;
    Moetune__Incumbent **warm_ptrs; /* the entries that are known picks only (SweepSpec.warm_files) */
    Moetune__Config *cfgs;
    char **sources; /* per entry, its file (shared by the entries of one file: freed once, by owner) */
    bool *owner;
    bool *warm; /* per entry: a known pick of the warm start only, no incumbent */
    size_t n, cap;
};

cli_guard_t *cli_guard_new(void) { return mt_calloc(1, sizeof(cli_guard_t)); }

void cli_guard_destroy(cli_guard_t **gp) {
    if (!gp || !*gp) return;
    cli_guard_t *g = *gp;
    for (size_t i = 0; i < g->n_paths; i++) free(g->paths[i]);
    for (size_t i = 0; i < g->n; i++)
        if (g->owner[i]) free(g->sources[i]);
    free(g->inc);
    free(g->ptrs);
    free(g->warm_ptrs);
    free(g->warm);
    free(g->cfgs);
    free(g->sources);
    free(g->owner);
    free(g);
    *gp = NULL;
}

mt_status_t cli_guard_add_baseline(cli_guard_t *g, const char *path, char *err, size_t errlen) {
    if (g->n_paths == CLI_GUARD_MAX_BASELINES) {
        mt_fmt(err, errlen, "--baseline: given more than %d times", CLI_GUARD_MAX_BASELINES);
        return MT_INVAL;
    }
    if (!path || !*path) {
        mt_fmt(err, errlen, "--baseline: an empty path");
        return MT_INVAL;
    }
    g->paths[g->n_paths] = mt_strdup(path);
    if (!g->paths[g->n_paths]) return MT_NOMEM;
    g->n_paths++;
    return MT_OK;
}

/* ---- file names */

/* What a config file's name says: E, N, dtype and block shape ("bf16" when no dtype). */
typedef struct {
    uint32_t e, n, block_n, block_k;
    char dtype[16], device[128];
} fname_t;

/* Parses an engine's file name ("E=128,N=768,device_name=NVIDIA_H200[,dtype=..][,block_shape=[n, k]].json");
 * false for anything else (a `_down` file included). */
static bool parse_name(const char *name, fname_t *f) {
    memset(f, 0, sizeof *f);
    snprintf(f->dtype, sizeof f->dtype, "bf16");
    int used = 0;
    if (sscanf(name, "E=%u,N=%u,device_name=%n", &f->e, &f->n, &used) != 2 || !used) return false;
    const char *p = name + used, *end = strstr(p, ".json");
    if (!end || end[5] != '\0' || (end - name >= 5 && strncmp(end - 5, "_down", 5) == 0)) return false;
    const char *comma = strchr(p, ',');
    const char *dev_end = comma && comma < end ? comma : end;
    snprintf(f->device, sizeof f->device, "%.*s", (int)(dev_end - p), p);
    p = dev_end;
    while (p < end) {
        if (strncmp(p, ",dtype=", 7) == 0) {
            p += 7;
            size_t k = strcspn(p, ",.");
            snprintf(f->dtype, sizeof f->dtype, "%.*s", (int)k, p);
            p += k;
        } else if (sscanf(p, ",block_shape=[%u,%u]%n", &f->block_n, &f->block_k, &used) == 2 ||
                   sscanf(p, ",block_shape=[%u, %u]%n", &f->block_n, &f->block_k, &used) == 2) {
            p += used;
        } else if (strncmp(p, ",per_channel_quant=True", 23) == 0) {
            p += 23;
        } else {
            return false;
        }
    }
    return true;
}

static bool name_fits(const fname_t *f, const krn_shape_t *sh) {
    return f->e == sh->e && f->n == sh->n && strcmp(f->dtype, sh->dtype) == 0 && f->block_n == sh->block_n &&
           f->block_k == sh->block_k;
}

static bool is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* In folder dir, the file for shape: of device when given, else of the one device there.
 * MT_OK with it in path, MT_NOTFOUND, or MT_INVAL (several devices) with the reason. */
static int find_in(const char *dir, const char *device, const krn_shape_t *sh, char *path, size_t len, char *err,
                   size_t errlen) {
    char want[160] = "", found[2][256];
    size_t n_found = 0;
    if (device) {
        snprintf(want, sizeof want, "%s", device);
        for (char *p = want; *p; p++)
            if (*p == ' ' || *p == '/' || *p == '\\') *p = '_';
    }
    DIR *d = opendir(dir);
    if (!d) return MT_NOTFOUND;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        fname_t f;
        if (!parse_name(de->d_name, &f) || !name_fits(&f, sh)) continue;
        if (device && strcmp(f.device, want) != 0) continue;
        if (n_found < 2) snprintf(found[n_found], sizeof found[n_found], "%s", de->d_name);
        n_found++;
    }
    closedir(d);
    if (n_found == 0) return MT_NOTFOUND;
    if (n_found > 1) {
        mt_fmt(err, errlen, "%s holds files of %zu devices for this shape (%s, %s, ...): name the device", dir, n_found,
               found[0], found[1]);
        return MT_INVAL;
    }
    mt_fmt(path, len, "%s/%s", dir, found[0]);
    return MT_OK;
}

/* "triton_3_6_0" -> 3006000; 0 when it is no such folder name. */
static long triton_rank(const char *name) {
    unsigned a = 0, b = 0, c = 0;
    int used = 0;
    if (sscanf(name, "triton_%u_%u_%u%n", &a, &b, &c, &used) != 3 || name[used] != '\0') return 0;
    return (long)a * 1000000 + (long)b * 1000 + (long)c;
}

/* Calls fn(folder, ctx) on each folder of an engine's config folder dir (its configs/ when it
 * has one) in the order the engine searches them, until fn returns true: vLLM's flat folder;
 * SGLang's running Triton's folder (triton, when given), then its triton_* folders, newest first. */
static void each_folder(const char *dir, exp_engine_t engine, const char *triton,
                        bool (*fn)(const char *folder, void *ctx), void *ctx) {
    char base[PATH_MAX], sub[PATH_MAX];
    mt_fmt(base, sizeof base, "%s/configs", dir);
    if (!is_dir(base)) mt_fmt(base, sizeof base, "%s", dir);
    if (engine == EXP_ENGINE_VLLM) {
        fn(base, ctx);
        return;
    }
    if (triton && *triton) {
        char v[64];
        snprintf(v, sizeof v, "%s", triton);
        for (char *p = v; *p; p++)
            if (*p == '.') *p = '_';
        mt_fmt(sub, sizeof sub, "%s/triton_%s", base, v);
        if (fn(sub, ctx)) return;
    }
    for (long done = LONG_MAX;;) { /* SGLang's fallback: the triton_* folders, newest first */
        long next = 0;
        char name[256] = "";
        DIR *d = opendir(base);
        struct dirent *de;
        while (d && (de = readdir(d)) != NULL) {
            long r = triton_rank(de->d_name);
            if (r > next && r < done) next = r, snprintf(name, sizeof name, "%s", de->d_name);
        }
        if (d) closedir(d);
        if (!next) return;
        done = next;
        mt_fmt(sub, sizeof sub, "%s/%s", base, name);
        if (fn(sub, ctx)) return;
    }
}

typedef struct {
    const char *device;
    const krn_shape_t *sh;
    char *path, *err;
    size_t len, errlen;
    int rc;
} find_t;

/* find_in over one folder; true (stop) unless it holds no file for the shape. */
static bool find_folder(const char *folder, void *ctx) {
    find_t *f = ctx;
    f->rc = find_in(folder, f->device, f->sh, f->path, f->len, f->err, f->errlen);
    return f->rc != MT_NOTFOUND;
}

mt_status_t cli_guard_bundled_find(const char *dir, exp_engine_t engine, const char *triton, const char *device,
                                   const krn_shape_t *sh, char *path, size_t len, char *err, size_t errlen) {
    find_t f = {.device = device, .sh = sh, .path = path, .err = err, .len = len, .errlen = errlen, .rc = MT_NOTFOUND};
    each_folder(dir, engine, triton, find_folder, &f);
    return f.rc;
}

/* ---- incumbents into the spec */

/* Appends every entry of the config file at file for shape index si, engine ("" = any); an
 * error names the file after what (the option it came from, or ""). */
static int add_file(cli_guard_t *g, const char *what, const char *file, uint32_t si, const char *engine, bool warm,
                    char *err, size_t errlen) {
    moetune_lookup_t *t = NULL;
    char why[300];
    if (moetune_lookup_load(file, &t, why, sizeof why) != MOETUNE_LOOKUP_OK) {
        mt_fmt(err, errlen, "%s%s: %s", what, file, why);
        return MT_INVAL;
    }
    size_t n = moetune_lookup_count(t);
    int rc = MT_OK;
    char *src = mt_strdup(file);
    if (!src) rc = MT_NOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        if (g->n == g->cap) {
            size_t cap = g->cap ? g->cap * 2 : 32;
            void *a = mt_realloc(g->inc, cap * sizeof *g->inc);
            if (a) g->inc = a;
            void *b = mt_realloc(g->cfgs, cap * sizeof *g->cfgs);
            if (b) g->cfgs = b;
            void *c = mt_realloc(g->sources, cap * sizeof *g->sources);
            if (c) g->sources = c;
            void *o = mt_realloc(g->owner, cap * sizeof *g->owner);
            if (o) g->owner = o;
            void *w = mt_realloc(g->warm, cap * sizeof *g->warm);
            if (w) g->warm = w;
            if (!a || !b || !c || !o || !w) {
                rc = MT_NOMEM;
                break;
            }
            g->cap = cap;
        }
        uint32_t key = moetune_lookup_key(t, i);
        moetune_lookup_config_t lc;
        moetune_lookup_get(t, key, &lc, NULL);
        krn_config_t kc = {(uint32_t)lc.block_m, (uint32_t)lc.block_n,   (uint32_t)lc.block_k,
                           (uint32_t)lc.group_m, (uint32_t)lc.num_warps, (uint32_t)lc.num_stages};
        moetune__config__init(&g->cfgs[g->n]);
        wire_config_to_msg(&kc, &g->cfgs[g->n]);
        moetune__incumbent__init(&g->inc[g->n]);
        g->sources[g->n] = src;
        g->owner[g->n] = i == 0;
        g->warm[g->n] = warm;
        g->inc[g->n].shape = si;
        g->inc[g->n].key = key;
        g->inc[g->n].engine = (char *)engine;
        g->n++;
    }
    if (!n) free(src);
    moetune_lookup_free(&t);
    return rc;
}

/* The shapes a --baseline FILE is for: the one its name names, or the only one. */
static int file_shape(const char *file, const krn_shape_t *shapes, size_t n, uint32_t *si, char *err, size_t errlen) {
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    fname_t f;
    if (parse_name(base, &f)) {
        for (size_t i = 0; i < n; i++)
            if (name_fits(&f, &shapes[i])) {
                *si = (uint32_t)i;
                return MT_OK;
            }
        mt_fmt(err, errlen, "--baseline %s: its name is for E=%u,N=%u (%s), none of the sweep's shapes", file, f.e, f.n,
               f.dtype);
        return MT_INVAL;
    }
    if (n == 1) {
        *si = 0;
        return MT_OK;
    }
    mt_fmt(err, errlen,
           "--baseline %s: its name does not say its shape (E=..,N=..,device_name=...json) and the sweep has %zu", file,
           n);
    return MT_INVAL;
}

/* Points spec's incumbents and warm_files at g's entries (none: spec keeps its own). */
static int publish(cli_guard_t *g, Moetune__SweepSpec *spec) {
    if (!g->n) return MT_OK;
    free(g->ptrs);
    free(g->warm_ptrs);
    g->ptrs = mt_calloc(g->n, sizeof *g->ptrs);
    g->warm_ptrs = mt_calloc(g->n, sizeof *g->warm_ptrs);
    if (!g->ptrs || !g->warm_ptrs) return MT_NOMEM;
    size_t n_inc = 0, n_warm = 0;
    for (size_t i = 0; i < g->n; i++) {
        g->inc[i].config = &g->cfgs[i];
        g->inc[i].source = g->sources[i];
        if (g->warm[i])
            g->warm_ptrs[n_warm++] = &g->inc[i];
        else
            g->ptrs[n_inc++] = &g->inc[i];
    }
    if (n_inc) {
        spec->n_incumbents = n_inc;
        spec->incumbents = g->ptrs;
    }
    spec->n_warm_files = n_warm;
    spec->warm_files = n_warm ? g->warm_ptrs : NULL;
    return MT_OK;
}

mt_status_t cli_guard_resolve(cli_guard_t *g, Moetune__SweepSpec *spec, const krn_shape_t *shapes, size_t n,
                              const char *device, char *err, size_t errlen) {
    int rc = MT_OK;
    static const struct {
        exp_engine_t e;
        const char *name;
    } k_eng[] = {{EXP_ENGINE_SGLANG, "sglang"}, {EXP_ENGINE_VLLM, "vllm"}};
    for (size_t p = 0; !rc && p < g->n_paths; p++) {
        const char *path = g->paths[p];
        if (is_file(path)) {
            uint32_t si = 0;
            rc = file_shape(path, shapes, n, &si, err, errlen);
            if (!rc) rc = add_file(g, "--baseline ", path, si, "", false, err, errlen);
            continue;
        }
        if (!is_dir(path)) {
            mt_fmt(err, errlen, "--baseline %s: %s", path, strerror(errno ? errno : ENOENT));
            return MT_INVAL;
        }
        size_t found = 0;
        for (size_t i = 0; !rc && i < n; i++) {
            for (size_t e = 0; !rc && e < sizeof k_eng / sizeof *k_eng; e++) {
                char file[PATH_MAX];
                int frc =
                    cli_guard_bundled_find(path, k_eng[e].e, NULL, device, &shapes[i], file, sizeof file, err, errlen);
                if (frc == MT_NOTFOUND) continue;
                rc = frc ? frc : add_file(g, "--baseline ", file, (uint32_t)i, k_eng[e].name, false, err, errlen);
                found++;
                break; /* a folder is one engine's: SGLang's Triton folders before vLLM's flat one */
            }
        }
        if (!rc && !found) {
            mt_fmt(err, errlen, "--baseline %s: no config file there for any of the sweep's shapes%s%s", path,
                   device ? " on " : "", device ? device : "");
            rc = MT_INVAL;
        }
    }
    return rc ? rc : publish(g, spec);
}

/* The Triton version of the SGLang folder file lies in ("3.4.0" of .../triton_3_4_0/name; "": none). */
static void folder_version(const char *file, char *ver, size_t len) {
    char dir[256];
    mt_triton_dir(file, dir, sizeof dir);
    mt_fmt(ver, len, "%s", dir[0] ? dir + 7 : "");
    for (char *p = ver; *p; p++)
        if (*p == '_') *p = '.';
}

/* How far file name f lies from shape sh for the warm start: 0 for sh itself (any device), then
 * the nearest N of the same E, then of another E; -1 for another dtype or block shape. */
static double warm_distance(const fname_t *f, const krn_shape_t *sh) {
    if (strcmp(f->dtype, sh->dtype) != 0 || f->block_n != sh->block_n || f->block_k != sh->block_k || !f->n || !sh->n)
        return -1;
    double d = fabs(log((double)f->n / sh->n)) + (f->e == sh->e ? 0 : 1000 + fabs(log((double)f->e / sh->e)));
    return f->e == sh->e && f->n == sh->n ? 0 : 1 + d;
}

typedef struct {
    const krn_shape_t *sh;
    double best; /* -1: none yet */
    char *path;
    size_t len;
} near_t;

/* In folder, the file nearest x->sh (warm_distance; of equal ones the first name) into x->path
 * when it is nearer than x->best, so an earlier folder wins a tie; never stops the walk. */
static bool warm_scan(const char *folder, void *ctx) {
    near_t *x = ctx;
    DIR *d = opendir(folder);
    if (!d) return false;
    char name[256] = "";
    double here = -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        fname_t f;
        double dist = parse_name(de->d_name, &f) ? warm_distance(&f, x->sh) : -1;
        if (dist < 0 || (here >= 0 && (dist > here || (dist == here && strcmp(de->d_name, name) > 0)))) continue;
        here = dist;
        snprintf(name, sizeof name, "%s", de->d_name);
    }
    closedir(d);
    if (here < 0 || (x->best >= 0 && here >= x->best)) return false;
    x->best = here;
    mt_fmt(x->path, x->len, "%s/%s", folder, name);
    return false;
}

/* For the warm start where e's engine ships no file for sh on its GPU: the file of its folder for
 * sh on another GPU, else for the nearest shape (same dtype and block shape), over its folders in
 * the order the engine searches them (each_folder). MT_OK with it in path, or MT_NOTFOUND. */
static int warm_find(const cli_guard_engine_t *e, const krn_shape_t *sh, char *path, size_t len) {
    near_t x = {.sh = sh, .best = -1, .path = path, .len = len};
    each_folder(e->dir, e->engine, e->triton, warm_scan, &x);
    return x.best < 0 ? MT_NOTFOUND : MT_OK;
}

/* The line for the file e's engine loads for shape sh: its own, or the fallback. */
static void say_file(FILE *say, const char *sh, const char *file, const cli_guard_engine_t *e) {
    char ver[64];
    folder_version(file, ver, sizeof ver);
    const char *triton = e->triton ? e->triton : "";
    if (e->engine == EXP_ENGINE_VLLM)
        fprintf(say, "incumbent for %s: %s, the file %s ships\n", sh, file, e->who);
    else if (strcmp(ver, triton) == 0)
        fprintf(say, "incumbent for %s: %s, the file %s ships for Triton %s\n", sh, file, e->who, triton);
    else if (*triton)
        fprintf(say,
                "incumbent for %s: %s, another Triton version's file (%s), which %s falls back to: it ships none for "
                "Triton %s\n",
                sh, file, ver, e->who, triton);
    else
        fprintf(say, "incumbent for %s: %s, the file %s ships for Triton %s (no Triton where it runs)\n", sh, file,
                e->who, ver);
}

mt_status_t cli_guard_engine_folder(cli_guard_t *g, Moetune__SweepSpec *spec, const krn_shape_t *shapes, size_t n,
                                    const cli_guard_engine_t *e, FILE *say) {
    int rc = MT_OK;
    if (!e->dir || !*e->dir) {
        fprintf(say, "incumbent: none: %s; only the engine's default guards the sweep\n", e->why ? e->why : "");
        return MT_OK;
    }
    for (size_t i = 0; rc != MT_NOMEM && i < n; i++) {
        char file[PATH_MAX], why[PATH_MAX + 300], sh[200];
        krn_shape_format(&shapes[i], sh, sizeof sh);
        rc = cli_guard_bundled_find(e->dir, e->engine, e->triton, e->device, &shapes[i], file, sizeof file, why,
                                    sizeof why);
        if (rc == MT_NOTFOUND)
            mt_fmt(why, sizeof why, "%s ships no file for %s and this shape", e->who,
                   e->device ? e->device : "this GPU");
        if (rc == MT_OK) rc = add_file(g, "", file, (uint32_t)i, exp_engine_name(e->engine), false, why, sizeof why);
        if (rc == MT_OK)
            say_file(say, sh, file, e);
        else if (rc != MT_NOMEM)
            fprintf(say, "incumbent for %s: none: %s; only the engine's default guards it\n", sh, why);
        if (rc == MT_NOTFOUND && warm_find(e, &shapes[i], file, sizeof file) == MT_OK) {
            rc = add_file(g, "", file, (uint32_t)i, exp_engine_name(e->engine), true, why, sizeof why);
            if (rc == MT_OK) fprintf(say, "warm start for %s: %s goes first (no incumbent)\n", sh, file);
        }
    }
    return rc == MT_NOMEM ? rc : publish(g, spec);
}

bool cli_guard_same_incumbents(const Moetune__SweepSpec *a, const Moetune__SweepSpec *b) {
    if (a->n_incumbents != b->n_incumbents) return false;
    for (size_t i = 0; i < a->n_incumbents; i++) {
        const Moetune__Incumbent *x = a->incumbents[i], *y = b->incumbents[i];
        krn_config_t cx, cy;
        memset(&cx, 0, sizeof cx), memset(&cy, 0, sizeof cy);
        if (x->config) wire_config_from_msg(x->config, &cx);
        if (y->config) wire_config_from_msg(y->config, &cy);
        if (x->shape != y->shape || x->key != y->key || memcmp(&cx, &cy, sizeof cx) != 0 ||
            strcmp(x->engine ? x->engine : "", y->engine ? y->engine : "") != 0)
            return false;
    }
    return true;
}

/* ---- export's rule */

/* What the rule decided for one best row. */
typedef struct {
    uint64_t sweep_id, shape_id;
    uint32_t bs;
    char device[128];
    const char *shipped; /* "pick", "default", "incumbent" */
    bool fastest;        /* the guard's config is the fastest row itself */
    size_t near, other;  /* between two keys: the entry the engine takes there, the other neighbour's */
    bool dropped;        /* between two keys, and the nearest entry holds: no key added */
    bool unmeasured;     /* between two keys, and the config the file ships at the nearest key was not measured */
    uint64_t ship_cfg;   /* the config shipped (at a key: what the engine takes between it and its neighbours) */
    double pair_sum;     /* a split file: the pair's up + down the guard's whole layer was held against */
    double layer_sum;    /* ... and the guard's config's own up + down (0: not compared) */
    size_t def, inc;     /* indexes into rows; SIZE_MAX: none */
    dbq_result_t best;   /* the pick it was asked about */
} decision_t;

/* One guard role's figures over a file: its speed-up range and the batch sizes where its config shipped. */
typedef struct {
    double lo, hi;
    size_t n;
    json_t *kept;
} tally_t;

/* A config measured only because of the guard (a guard row with searched = 0, any engine's);
 * sorted once loaded (cmp_only). */
typedef struct {
    uint64_t sweep_id, shape_id, config_id;
} only_t;

struct shipguard {
    dbq_guard_t *rows;
    size_t n, cap;
    only_t *only;
    size_t n_only, cap_only;
    const char *engine;
    decision_t *dec;
    size_t n_dec, cap_dec;
    /* the file being summarised */
    tally_t def, inc; /* the speed-ups over the default and the incumbent */
    size_t n_added;
    uint64_t cur_sweep, cur_shape; /* the file being summarised */
    char cur_device[128];
    char inc_name[256];
};

/* Whether a guard row of engine (as stored: "vllm-2026" is one of vLLM's) is for want. */
static bool engine_is(const char *engine, const char *want) {
    size_t n = strlen(want);
    return strncmp(engine, want, n) == 0 && (engine[n] == '\0' || engine[n] == '-');
}

static mt_status_t keep_guard(void *ctx, const dbq_guard_t *row) {
    shipguard_t *g = ctx;
    if (!row->searched) {
        if (mt_grow((void **)&g->only, &g->cap_only, g->n_only + 1, sizeof *g->only, 32) != MT_OK) return MT_NOMEM;
        g->only[g->n_only++] = (only_t){row->row.sweep_id, row->row.shape_id, row->row.config_id};
    }
    if (g->engine && row->engine[0] && !engine_is(row->engine, g->engine)) return MT_OK; /* "": every engine's */
    if (mt_grow((void **)&g->rows, &g->cap, g->n + 1, sizeof *g->rows, 32) != MT_OK) return MT_NOMEM;
    g->rows[g->n] = *row;
    g->rows[g->n++].row.versions = ""; /* points into the statement */
    return MT_OK;
}

static void tally_reset(tally_t *t) {
    t->lo = INFINITY, t->hi = 0, t->n = 0;
    json_decref(t->kept);
    t->kept = json_array();
}

static void file_reset(shipguard_t *g) {
    tally_reset(&g->def);
    tally_reset(&g->inc);
    g->n_added = 0;
    g->cur_sweep = g->cur_shape = 0;
    g->cur_device[0] = '\0';
    g->inc_name[0] = '\0';
}

static int cmp_only(const void *a, const void *b) {
    const only_t *x = a, *y = b;
    if (x->sweep_id != y->sweep_id) return x->sweep_id < y->sweep_id ? -1 : 1;
    if (x->shape_id != y->shape_id) return x->shape_id < y->shape_id ? -1 : 1;
    return (x->config_id > y->config_id) - (x->config_id < y->config_id);
}

/* The guard rows of sel for engine ("sglang", "vllm"; NULL: every engine's) into a new *out. */
static int load(dbq_t *q, const dbq_select_t *sel, const char *engine, shipguard_t **out, char *err, size_t errlen) {
    shipguard_t *g = mt_calloc(1, sizeof *g);
    *out = NULL;
    if (!g) return MT_NOMEM;
    g->engine = engine;
    file_reset(g);
    int rc = dbq_guard_rows(q, sel, keep_guard, g, err, errlen);
    if (rc != MT_OK) {
        shipguard_free(&g);
        return rc;
    }
    if (g->n_only) qsort(g->only, g->n_only, sizeof *g->only, cmp_only); /* shipguard_candidate's bsearch */
    *out = g;
    return MT_OK;
}

mt_status_t shipguard_load(dbq_t *q, const dbq_select_t *sel, exp_engine_t engine, shipguard_t **out, char *err,
                           size_t errlen) {
    return load(q, sel, engine == EXP_ENGINE_VLLM ? "vllm" : "sglang", out, err, errlen);
}

mt_status_t shipguard_load_all(dbq_t *q, const dbq_select_t *sel, shipguard_t **out, char *err, size_t errlen) {
    return load(q, sel, NULL, out, err, errlen);
}

void shipguard_free(shipguard_t **gp) {
    if (!gp || !*gp) return;
    shipguard_t *g = *gp;
    free(g->rows);
    free(g->only);
    free(g->dec);
    json_decref(g->def.kept);
    json_decref(g->inc.kept);
    free(g);
    *gp = NULL;
}

/* The guard row of role for best's cell, or SIZE_MAX: of several (vLLM's two defaults), the one
 * measured fastest on best's device, else the first. */
static size_t find_role(const shipguard_t *g, const dbq_result_t *best, const char *role) {
    size_t found = SIZE_MAX;
    for (size_t i = 0; i < g->n; i++) {
        const dbq_guard_t *r = &g->rows[i];
        if (r->row.sweep_id != best->sweep_id || r->row.shape_id != best->shape_id ||
            r->row.batch_size != best->batch_size || strcmp(r->role, role) != 0)
            continue;
        bool here = r->measured && strcmp(r->row.device_name, best->device_name) == 0;
        const dbq_guard_t *f = found == SIZE_MAX ? NULL : &g->rows[found];
        bool f_here = f && f->measured && strcmp(f->row.device_name, best->device_name) == 0;
        if (!f || (here && (!f_here || r->row.median_us < f->row.median_us))) found = i;
    }
    return found;
}

/* Whether guard row i was measured on best's device and the pick does not beat it by more
 * than the noise: a file must earn its place. */
static bool holds(const shipguard_t *g, size_t i, const dbq_result_t *best) {
    if (i == SIZE_MAX || !g->rows[i].measured) return false;
    const dbq_result_t *r = &g->rows[i].row;
    if (strcmp(r->device_name, best->device_name) != 0 || strcmp(r->export_dir, best->export_dir) != 0) return false;
    return r->median_us <= best->median_us ||
           exp_margin_sd(best->median_us, best->stddev_us, r->median_us, r->stddev_us) < EXP_NEAR_TIE_SD;
}

/* The key a "nearest"/"other" row names ("key 64's pick"); 0 when none. */
static uint32_t key_of(const dbq_guard_t *r) {
    unsigned k = 0;
    return sscanf(r->source, "key %u", &k) == 1 ? (uint32_t)k : 0;
}

bool shipguard_candidate(const shipguard_t *g, const dbq_result_t *r) {
    only_t key = {r->sweep_id, r->shape_id, r->config_id};
    if (!g || !g->n_only || !bsearch(&key, g->only, g->n_only, sizeof *g->only, cmp_only)) return true;
    for (size_t i = 0; i < g->n; i++) { /* the guard's own config of this batch size competes as such */
        const dbq_guard_t *x = &g->rows[i];
        if (x->row.sweep_id == r->sweep_id && x->row.shape_id == r->shape_id && x->row.config_id == r->config_id &&
            x->row.batch_size == r->batch_size && (!strcmp(x->role, "default") || !strcmp(x->role, "incumbent")))
            return true;
    }
    return false;
}

/* A "nearest" row of (sweep, shape) at m, or SIZE_MAX: m lies between two keys. */
static size_t nearest_at(const shipguard_t *g, uint64_t sweep, uint64_t shape, uint32_t m) {
    for (size_t i = 0; i < g->n; i++) {
        const dbq_guard_t *r = &g->rows[i];
        if (r->row.sweep_id == sweep && r->row.shape_id == shape && r->row.batch_size == m &&
            strcmp(r->role, "nearest") == 0)
            return i;
    }
    return SIZE_MAX;
}

size_t shipguard_depth(const shipguard_t *g, const dbq_result_t *r) {
    size_t depth = 0;
    size_t i = g ? nearest_at(g, r->sweep_id, r->shape_id, r->batch_size) : SIZE_MAX;
    while (i != SIZE_MAX && depth < SHIPGUARD_DEPTHS - 1) {
        depth++; /* the key whose entry the engine takes there may itself lie between two keys */
        i = nearest_at(g, r->sweep_id, r->shape_id, key_of(&g->rows[i]));
    }
    return depth;
}

/* The decision that made k a key of best's file (sweep, shape, device); NULL when none did. */
static const decision_t *decided_at(const shipguard_t *g, const dbq_result_t *best, uint32_t k) {
    for (size_t i = 0; i < g->n_dec; i++) {
        const decision_t *d = &g->dec[i];
        if (d->sweep_id == best->sweep_id && d->shape_id == best->shape_id && d->bs == k && !d->dropped &&
            strcmp(d->device, best->device_name) == 0)
            return d;
    }
    return NULL;
}

/* Between two keys: of the "nearest" rows at best's cell, the one holding the config the file
 * ships at their key (the literal entry the engine runs there, decided before: shipguard_depth), else
 * that key's pick where the key had no guard decision; SIZE_MAX when it was not measured here. */
static size_t literal_row(const shipguard_t *g, const dbq_result_t *best) {
    size_t any = find_role(g, best, "nearest");
    const decision_t *d = decided_at(g, best, key_of(&g->rows[any]));
    for (size_t i = 0; i < g->n; i++) {
        const dbq_guard_t *r = &g->rows[i];
        if (r->row.sweep_id != best->sweep_id || r->row.shape_id != best->shape_id ||
            r->row.batch_size != best->batch_size || strcmp(r->role, "nearest") != 0)
            continue;
        bool is = d ? r->row.config_id == d->ship_cfg : strcmp(r->engine, "") == 0; /* "": the key's pick */
        if (is) return r->measured && strcmp(r->row.device_name, best->device_name) == 0 ? i : SIZE_MAX;
    }
    return SIZE_MAX;
}

/* The rule's choice among best and the default's and incumbent's rows of d, into d. */
static const dbq_result_t *choose(shipguard_t *g, decision_t *d, const dbq_result_t *best) {
    const dbq_result_t *ship = best;
    size_t def = d->def, inc = d->inc;
    d->shipped = "pick";
    if (inc != SIZE_MAX && g->rows[inc].row.config_id == best->config_id) {
        d->shipped = "incumbent"; /* the fastest measured here is the incumbent's config itself */
        d->fastest = true;
    } else if (def != SIZE_MAX && g->rows[def].row.config_id == best->config_id) {
        d->shipped = "default";
        d->fastest = true;
    } else if (holds(g, inc, best)) {
        ship = &g->rows[inc].row;
        d->shipped = "incumbent";
    } else if (holds(g, def, best)) {
        ship = &g->rows[def].row;
        d->shipped = "default";
    }
    d->ship_cfg = ship->config_id;
    return ship;
}

const dbq_result_t *shipguard_ship(shipguard_t *g, const dbq_result_t *best) {
    if (!g || !g->n) return best;
    size_t def = find_role(g, best, "default"), inc = find_role(g, best, "incumbent");
    size_t near = find_role(g, best, "nearest"), other = find_role(g, best, "other");
    if (def == SIZE_MAX && inc == SIZE_MAX && near == SIZE_MAX) return best;
    bool between = near != SIZE_MAX;
    if (between) near = literal_row(g, best);
    if (mt_grow((void **)&g->dec, &g->cap_dec, g->n_dec + 1, sizeof *g->dec, 32) != MT_OK) return best;
    decision_t *d = &g->dec[g->n_dec++];
    memset(d, 0, sizeof *d);
    d->sweep_id = best->sweep_id, d->shape_id = best->shape_id, d->bs = best->batch_size;
    snprintf(d->device, sizeof d->device, "%s", best->device_name);
    d->def = def, d->inc = inc, d->near = near, d->other = other, d->best = *best;
    d->best.versions = "";
    if (between && near == SIZE_MAX) { /* between two keys, the engine's entry not measured here */
        d->unmeasured = d->dropped = true;
        return NULL;
    }
    if (near != SIZE_MAX) { /* between two keys: a key is added only where the engine's entry loses */
        const dbq_guard_t *n = &g->rows[near];
        if (n->row.config_id == best->config_id ||
            exp_margin_sd(best->median_us, best->stddev_us, n->row.median_us, n->row.stddev_us) < EXP_NEAR_TIE_SD) {
            d->dropped = true;
            return NULL;
        }
    }
    return choose(g, d, best);
}

mt_status_t shipguard_ship_each(shipguard_t *g, const void *rows, size_t n, size_t stride,
                                void (*done)(void *ctx, size_t k, const dbq_result_t *ship), void *ctx) {
    unsigned char *depth = mt_calloc(n + 1, sizeof *depth);
    if (!depth) return MT_NOMEM;
    for (size_t k = 0; k < n; k++)
        depth[k] = (unsigned char)shipguard_depth(g, (const dbq_result_t *)((const char *)rows + k * stride));
    for (unsigned char at = 0; at < SHIPGUARD_DEPTHS; at++)
        for (size_t k = 0; k < n; k++) {
            if (depth[k] != at) continue;
            const dbq_result_t *r = (const dbq_result_t *)((const char *)rows + k * stride);
            done(ctx, k, shipguard_ship(g, r));
        }
    free(depth);
    return MT_OK;
}

const char *shipguard_role(const shipguard_t *g, const dbq_result_t *r) {
    for (size_t i = 0; g && i < g->n; i++) {
        const dbq_result_t *x = &g->rows[i].row;
        if (x->sweep_id == r->sweep_id && x->shape_id == r->shape_id && x->batch_size == r->batch_size &&
            x->config_id == r->config_id)
            return g->rows[i].role;
    }
    return NULL;
}

static decision_t *decision_find(shipguard_t *g, const dbq_result_t *r);

const dbq_result_t *shipguard_layer(shipguard_t *g, const dbq_result_t *best, double pair_sum) {
    decision_t *d = g ? decision_find(g, best) : NULL;
    if (!d || !(pair_sum > 0)) return NULL;
    const size_t order[2] = {d->inc, d->def}; /* the incumbent wins a tie */
    for (size_t k = 0; k < 2; k++) {
        if (order[k] == SIZE_MAX) continue;
        const dbq_guard_t *r = &g->rows[order[k]];
        bool here = r->measured && strcmp(r->row.device_name, best->device_name) == 0;
        double sum = r->row.up_us + r->row.down_us,
               noise = r->row.median_us > 0 ? r->row.stddev_us / r->row.median_us : 0;
        if (!here || !(r->row.up_us > 0) || !(r->row.down_us > 0) || sum > pair_sum * (1.0 + noise)) continue;
        d->shipped = r->role;
        d->fastest = false;
        d->ship_cfg = r->row.config_id;
        d->pair_sum = pair_sum;
        d->layer_sum = sum;
        return &r->row;
    }
    return NULL;
}

static decision_t *decision_find(shipguard_t *g, const dbq_result_t *r) {
    for (size_t i = g->n_dec; i-- > 0;) {
        decision_t *d = &g->dec[i];
        if (d->sweep_id == r->sweep_id && d->shape_id == r->shape_id && d->bs == r->batch_size &&
            strcmp(d->device, r->device_name) == 0)
            return d;
    }
    return NULL;
}

static const decision_t *decision_of(const shipguard_t *g, const dbq_result_t *r) {
    return g ? decision_find((shipguard_t *)g, r) : NULL;
}

/* The speed-up of shipped over other (other / shipped) and its deviation. */
static void speedup(const dbq_result_t *shipped, const dbq_result_t *other, double *x, double *sd) {
    *x = other->median_us / shipped->median_us;
    double a = other->stddev_us / other->median_us, b = shipped->stddev_us / shipped->median_us;
    *sd = other->config_id == shipped->config_id ? 0.0 : *x * sqrt(a * a + b * b); /* one row: exactly 1 */
}

/* The manifest's object for guard row i beside the shipped row; its speed-up into *x (0: not measured here). */
static json_t *guard_json(const shipguard_t *g, size_t i, const dbq_result_t *shipped, double *x) {
    const dbq_guard_t *r = &g->rows[i];
    char cfg[KRN_CONFIG_TEXT_LEN];
    krn_config_format(&r->row.config, cfg, sizeof cfg);
    json_t *o = json_pack("{s:s, s:I, s:s, s:b}", "config", cfg, "config_id", (json_int_t)r->row.config_id,
                          strcmp(r->role, "default") == 0 ? "rule" : "source", r->source, "searched", r->searched);
    *x = 0;
    bool here = r->measured && strcmp(r->row.device_name, shipped->device_name) == 0;
    json_object_set_new(o, "measured", json_boolean(here));
    if (!here) return o;
    double sd = 0;
    speedup(shipped, &r->row, x, &sd);
    json_object_set_new(o, "median_us", json_real(r->row.median_us));
    json_object_set_new(o, "stddev_us", json_real(r->row.stddev_us));
    json_object_set_new(o, "speedup", json_real(*x));
    json_object_set_new(o, "speedup_sd", json_real(sd));
    return o;
}

/* Adds the guard row of role (d's default or incumbent) to the entry o and its figures to t. */
static void tally_side(shipguard_t *g, tally_t *t, const char *role, const decision_t *d, const dbq_result_t *shipped,
                       json_t *o) {
    double x = 0;
    json_object_set_new(o, role, guard_json(g, strcmp(role, "default") == 0 ? d->def : d->inc, shipped, &x));
    if (x > 0) {
        t->lo = fmin(t->lo, x), t->hi = fmax(t->hi, x);
        t->n++;
    }
    if (strcmp(d->shipped, role) == 0) json_array_append_new(t->kept, json_integer(d->bs));
}

/* The incumbent as a person names it, from a guard row's source ("…/triton_3_5_1/E=..json, key 64"):
 * by its Triton folder ("triton_3_5_1's file"), else by its file name. */
static void incumbent_name(const char *source, char *name, size_t len) {
    char src[256], dir[256];
    snprintf(src, sizeof src, "%s", source);
    char *key = strstr(src, ", key ");
    if (key) *key = '\0';
    const char *base = strrchr(src, '/');
    if (mt_triton_dir(src, dir, sizeof dir))
        mt_fmt(name, len, "%s's file", dir);
    else
        mt_fmt(name, len, "%s", base ? base + 1 : src);
}

void shipguard_entry(shipguard_t *g, const dbq_result_t *shipped, json_t *e) {
    const decision_t *d = decision_of(g, shipped);
    if (!d || !e) return;
    json_t *o = json_object();
    const char *why = "the pick beats the engine's default and the incumbent by more than the noise";
    if (d->fastest)
        why = strcmp(d->shipped, "default") == 0 ? "the engine's default is the fastest config measured here"
                                                 : "the incumbent's config is the fastest config measured here";
    else if (strcmp(d->shipped, "incumbent") == 0)
        why = "the incumbent's config: the pick does not beat it by more than the noise";
    else if (strcmp(d->shipped, "default") == 0)
        why = "the engine's default: the pick does not beat it by more than the noise";
    if (d->layer_sum > 0)
        why = strcmp(d->shipped, "incumbent") == 0 ? "the incumbent's config for both GEMMs: its up + down does not "
                                                     "lose to the split pair's beyond the noise"
                                                   : "the engine's default for both GEMMs: its up + down does not lose "
                                                     "to the split pair's beyond the noise";
    json_object_set_new(o, "shipped", json_string(d->shipped));
    json_object_set_new(o, "why", json_string(why));
    if (d->layer_sum > 0)
        json_object_set_new(o, "whole_layer",
                            json_pack("{s:f, s:f}", "guard_up_down_us", d->layer_sum, "pair_up_down_us", d->pair_sum));
    if (!g->cur_sweep) {
        g->cur_sweep = d->sweep_id, g->cur_shape = d->shape_id;
        snprintf(g->cur_device, sizeof g->cur_device, "%s", d->device);
    }
    if (d->near != SIZE_MAX) { /* a key added between two keys */
        const dbq_guard_t *n = &g->rows[d->near];
        uint32_t k = key_of(n), other = d->other != SIZE_MAX ? key_of(&g->rows[d->other]) : 0;
        double x = 0, sd = 0;
        speedup(shipped, &n->row, &x, &sd);
        char cfg[KRN_CONFIG_TEXT_LEN], text[300];
        krn_config_format(&n->row.config, cfg, sizeof cfg);
        mt_fmt(text, sizeof text,
               "between keys %u and %u the engine takes key %u's entry (%s), %.2fx slower here than this one, "
               "beyond the noise",
               k < other ? k : other, k < other ? other : k, k, cfg, x);
        json_object_set_new(o, "added",
                            json_pack("{s:I, s:s, s:s, s:I, s:f, s:f, s:f}", "nearest_key", (json_int_t)k, "why", text,
                                      "nearest_config", cfg, "nearest_config_id", (json_int_t)n->row.config_id,
                                      "nearest_median_us", n->row.median_us, "speedup", x, "speedup_sd", sd));
        g->n_added++;
    }
    if (strcmp(d->shipped, "pick") != 0 && !d->fastest) {
        json_t *p = json_pack("{s:I, s:f, s:f}", "config_id", (json_int_t)d->best.config_id, "median_us",
                              d->best.median_us, "stddev_us", d->best.stddev_us);
        json_object_set_new(o, "searched_pick", p);
    }
    if (d->def != SIZE_MAX) tally_side(g, &g->def, "default", d, shipped, o);
    if (d->inc != SIZE_MAX) {
        tally_side(g, &g->inc, "incumbent", d, shipped, o);
        incumbent_name(g->rows[d->inc].source, g->inc_name, sizeof g->inc_name);
    }
    json_object_set_new(e, "guard", o);
}

void shipguard_line(const json_t *guard, char *line, size_t len) {
    if (len) line[0] = '\0';
    if (!guard || !len) return;
    const json_t *def = json_object_get(guard, "speedup_over_default");
    const json_t *inc = json_object_get(guard, "speedup_over_incumbent");
    const char *inc_name = json_string_value(json_object_get(guard, "incumbent_file"));
    size_t kept_def = json_array_size(json_object_get(guard, "default_shipped_at"));
    size_t kept_inc = json_array_size(json_object_get(guard, "incumbent_shipped_at"));
    size_t added = json_array_size(json_object_get(guard, "keys_added"));
    size_t used = 0;
    if (json_array_size(def) == 2)
        used += (size_t)snprintf(line + used, len - used, "%.2fx-%.2fx faster than the engine's default",
                                 json_number_value(json_array_get(def, 0)), json_number_value(json_array_get(def, 1)));
    if (json_array_size(inc) == 2 && used < len)
        used += (size_t)snprintf(line + used, len - used, "%s%.2fx-%.2fx faster than %s", used ? ", " : "",
                                 json_number_value(json_array_get(inc, 0)), json_number_value(json_array_get(inc, 1)),
                                 inc_name && *inc_name ? inc_name : "the incumbent file");
    if (kept_def && used < len)
        used += (size_t)snprintf(line + used, len - used, "%sthe default kept at %zu batch size%s", used ? "; " : "",
                                 kept_def, kept_def == 1 ? "" : "s");
    if (kept_inc && used < len)
        used += (size_t)snprintf(line + used, len - used, "%sthe incumbent kept at %zu batch size%s", used ? "; " : "",
                                 kept_inc, kept_inc == 1 ? "" : "s");
    if (used < len)
        snprintf(line + used, len - used, "%s%zu key%s added", used ? "; " : "", added, added == 1 ? "" : "s");
}

/* The written file's keys (ascending) and each one's config id, from a manifest's entries. */
typedef struct {
    uint32_t *key;
    uint64_t *cfg;
    size_t n;
} keys_t;

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static int file_keys(const json_t *entries, keys_t *k) {
    const char *name;
    json_t *e;
    size_t n = json_object_size(entries);
    k->n = 0;
    k->key = mt_calloc(n + 1, sizeof *k->key);
    k->cfg = mt_calloc(n + 1, sizeof *k->cfg);
    if (!k->key || !k->cfg) return MT_NOMEM;
    json_object_foreach((json_t *)entries, name, e) {
        unsigned long v = strtoul(name, NULL, 10);
        if (v && v <= UINT32_MAX) k->key[k->n++] = (uint32_t)v;
    }
    qsort(k->key, k->n, sizeof *k->key, cmp_u32);
    for (size_t i = 0; i < k->n; i++) {
        char text[16];
        snprintf(text, sizeof text, "%u", k->key[i]);
        k->cfg[i] = (uint64_t)json_integer_value(json_object_get(json_object_get(entries, text), "config_id"));
    }
    return MT_OK;
}

/* The config id of the file's entry the engine takes at m (the nearest key, the smaller on a tie). */
static uint64_t file_entry_at(const keys_t *k, uint32_t m) {
    size_t best = 0;
    for (size_t i = 1; i < k->n; i++) {
        uint32_t a = k->key[best], b = k->key[i];
        uint64_t da = a > m ? a - m : m - a, db = b > m ? b - m : m - b;
        if (db < da) best = i;
    }
    return k->n ? k->cfg[best] : 0;
}

/* Whether config cid was measured at m (a guard row of the file's sweep, shape and device). */
static bool measured_at(const shipguard_t *g, uint32_t m, uint64_t cid) {
    for (size_t i = 0; i < g->n; i++) {
        const dbq_guard_t *r = &g->rows[i];
        if (r->row.sweep_id == g->cur_sweep && r->row.shape_id == g->cur_shape && r->row.batch_size == m &&
            r->row.config_id == cid && r->measured && strcmp(r->row.device_name, g->cur_device) == 0)
            return true;
    }
    return false;
}

/* Into the file's guard object o: between_keys_checked (the points between keys where the entry
 * the written file has the engine run was measured beside the others), keys_added, and
 * between_keys_unchecked (the written file's switch points, where the engine's nearest entry
 * changes config, that were not measured: keys added or merged moved them). */
static void between_keys(const shipguard_t *g, const json_t *entries, json_t *o) {
    json_t *checked = json_array(), *added = json_array(), *unchecked = json_array();
    keys_t k = {0};
    bool ok = entries && file_keys(entries, &k) == MT_OK;
    uint64_t *seen = mt_calloc(g->n_dec + 1, sizeof *seen); /* batch size << 1 | added */
    size_t n_seen = 0;
    for (size_t i = 0; seen && i < g->n_dec; i++) {
        const decision_t *d = &g->dec[i];
        if (d->near == SIZE_MAX || d->sweep_id != g->cur_sweep || d->shape_id != g->cur_shape ||
            strcmp(d->device, g->cur_device) != 0)
            continue;
        if (!ok || measured_at(g, d->bs, file_entry_at(&k, d->bs))) seen[n_seen++] = (uint64_t)d->bs << 1 | !d->dropped;
    }
    if (seen) qsort(seen, n_seen, sizeof *seen, cmp_u64);
    for (size_t i = 0; i < n_seen; i++) {
        json_array_append_new(checked, json_integer((json_int_t)(seen[i] >> 1)));
        if (seen[i] & 1) json_array_append_new(added, json_integer((json_int_t)(seen[i] >> 1)));
    }
    free(seen);
    for (size_t i = 0; ok && i + 1 < k.n; i++) {
        uint32_t k1 = k.key[i], k2 = k.key[i + 1], mid = k1 + (k2 - k1) / 2;
        if (k.cfg[i] == k.cfg[i + 1]) continue; /* one config: the engine switches nothing */
        uint32_t pts[2] = {mid, mid + 1};
        for (size_t p = 0; p < 2; p++)
            if (pts[p] > k1 && pts[p] < k2 && !measured_at(g, pts[p], file_entry_at(&k, pts[p])))
                json_array_append_new(unchecked, json_integer(pts[p]));
    }
    free(k.key);
    free(k.cfg);
    json_object_set_new(o, "between_keys_checked", checked);
    json_object_set_new(o, "keys_added", added);
    json_object_set_new(o, "between_keys_unchecked", unchecked);
}

void shipguard_file(shipguard_t *g, json_t *rec, char *line, size_t len) {
    if (len) line[0] = '\0';
    if (!g) return;
    if (g->def.n || g->inc.n || json_array_size(g->def.kept) || json_array_size(g->inc.kept)) {
        json_t *o = json_object();
        json_object_set_new(o, "rule",
                            json_string("per batch size, the pick ships only where it beats the engine's default and "
                                        "the incumbent by more than the noise (margin_sd at least 1); else the "
                                        "incumbent's config, else the default's"));
        if (g->def.n) json_object_set_new(o, "speedup_over_default", json_pack("[f, f]", g->def.lo, g->def.hi));
        if (g->inc.n) json_object_set_new(o, "speedup_over_incumbent", json_pack("[f, f]", g->inc.lo, g->inc.hi));
        if (g->inc.n && g->inc_name[0]) json_object_set_new(o, "incumbent_file", json_string(g->inc_name));
        json_object_set_new(o, "default_shipped_at", json_incref(g->def.kept));
        json_object_set_new(o, "incumbent_shipped_at", json_incref(g->inc.kept));
        between_keys(g, rec ? json_object_get(rec, "entries") : NULL, o);
        shipguard_line(o, line, len);
        if (rec)
            json_object_set_new(rec, "guard", o);
        else
            json_decref(o);
    }
    file_reset(g);
}

/* ---- what the rule did to a sweep */

typedef struct {
    shipguard_t *g;
    const dbq_hist_filter_t *only;
    const dbq_result_t *best; /* per cell, its pick */
    shipguard_counts_t *c;
    size_t n_dec; /* g's decisions before the cell being counted */
} count_t;

static bool row_matches(const dbq_hist_filter_t *f, const dbq_result_t *r) {
    const krn_shape_t *s = &r->shape;
    return !f || ((!f->e || f->e == s->e) && (!f->n || f->n == s->n) && (!f->k || f->k == s->k) &&
                  (!f->topk || f->topk == s->topk) && (!f->dtype[0] || strcmp(f->dtype, s->dtype) == 0) &&
                  (!f->batch_size || f->batch_size == r->batch_size) &&
                  (!f->device[0] || strcmp(f->device, r->device_name) == 0) &&
                  (!f->backend[0] || strcmp(f->backend, r->backend) == 0));
}

/* One cell's decision counted into x->c for the cells of x->only (all are decided: a key outside
 * the filter still decides what runs between the keys). */
static void count_cell(void *ctx, size_t k, const dbq_result_t *ship) {
    count_t *x = ctx;
    bool fresh = x->g->n_dec > x->n_dec; /* shipguard_ship decided it: a guard row is there */
    x->n_dec = x->g->n_dec;
    if (!ship || !fresh || !row_matches(x->only, &x->best[k])) return; /* no key, or no guard row */
    const decision_t *d = &x->g->dec[x->g->n_dec - 1];
    x->c->keys_added += d->near != SIZE_MAX;
    x->c->default_shipped += strcmp(d->shipped, "default") == 0;
    x->c->incumbent_shipped += strcmp(d->shipped, "incumbent") == 0;
}

/* Whether g holds a row for engine (one of every engine's counts). */
static bool has_engine(const shipguard_t *g, const char *engine) {
    for (size_t i = 0; i < g->n; i++)
        if (!g->rows[i].engine[0] || engine_is(g->rows[i].engine, engine)) return true;
    return false;
}

bool shipguard_count_engine(shipguard_t *g) {
    const char *engine = has_engine(g, "sglang") ? "sglang" : "vllm";
    size_t kept = 0;
    for (size_t i = 0; i < g->n; i++)
        if (!g->rows[i].engine[0] || engine_is(g->rows[i].engine, engine)) g->rows[kept++] = g->rows[i];
    g->n = kept;
    g->engine = engine;
    return g->n > 0;
}

mt_status_t shipguard_count_picks(shipguard_t *g, const dbq_result_t *best, size_t n, const dbq_hist_filter_t *only,
                                  shipguard_counts_t *c) {
    count_t x = {.g = g, .only = only, .best = best, .c = c, .n_dec = g->n_dec};
    c->guarded = true;
    return shipguard_ship_each(g, best, n, sizeof *best, count_cell, &x);
}

void shipguard_counts_text(const shipguard_counts_t *c, char *buf, size_t len) {
    if (!c->guarded) {
        snprintf(buf, len, "none (no default or incumbent measured)");
        return;
    }
    snprintf(buf, len, "%u key%s added, the default's config shipped at %u batch size%s, the incumbent's at %u",
             c->keys_added, c->keys_added == 1 ? "" : "s", c->default_shipped, c->default_shipped == 1 ? "" : "s",
             c->incumbent_shipped);
}

json_t *shipguard_counts_json(const shipguard_counts_t *c) {
    if (!c->guarded) return json_null();
    return json_pack("{s:I, s:I, s:I}", "keys_added", (json_int_t)c->keys_added, "default_shipped",
                     (json_int_t)c->default_shipped, "incumbent_shipped", (json_int_t)c->incumbent_shipped);
}
