/* shipguard.c - the ship guard's incumbents and export rule. See shipguard.h. */
#include "shipguard.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
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
    Moetune__Config *cfgs;
    char **sources; /* per entry, its file (shared by the entries of one file: freed once, by owner) */
    bool *owner;
    size_t n, cap;
};

cli_guard_t *cli_guard_new(void) { return calloc(1, sizeof(cli_guard_t)); }

void cli_guard_destroy(cli_guard_t **gp) {
    if (!gp || !*gp) return;
    cli_guard_t *g = *gp;
    for (size_t i = 0; i < g->n_paths; i++) free(g->paths[i]);
    for (size_t i = 0; i < g->n; i++)
        if (g->owner[i]) free(g->sources[i]);
    free(g->inc);
    free(g->ptrs);
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

mt_status_t cli_guard_bundled_find(const char *dir, exp_engine_t engine, const char *triton, const char *device,
                                   const krn_shape_t *sh, char *path, size_t len, char *err, size_t errlen) {
    char base[PATH_MAX], sub[PATH_MAX];
    mt_fmt(base, sizeof base, "%s/configs", dir);
    if (!is_dir(base)) mt_fmt(base, sizeof base, "%s", dir);
    if (engine == EXP_ENGINE_VLLM) return find_in(base, device, sh, path, len, err, errlen);
    if (triton && *triton) { /* the running Triton's folder first */
        char v[64];
        snprintf(v, sizeof v, "%s", triton);
        for (char *p = v; *p; p++)
            if (*p == '.') *p = '_';
        mt_fmt(sub, sizeof sub, "%s/triton_%s", base, v);
        int rc = find_in(sub, device, sh, path, len, err, errlen);
        if (rc != MT_NOTFOUND) return rc;
    }
    /* SGLang's fallback: the newest other triton_* folder that has the file */
    DIR *d = opendir(base);
    if (!d) return MT_NOTFOUND;
    long best = 0;
    char best_name[256] = "";
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long r = triton_rank(de->d_name);
        char cand[PATH_MAX], p[PATH_MAX], why[300];
        if (!r || r <= best) continue;
        mt_fmt(cand, sizeof cand, "%s/%s", base, de->d_name);
        if (find_in(cand, device, sh, p, sizeof p, why, sizeof why) == MT_NOTFOUND) continue;
        best = r;
        snprintf(best_name, sizeof best_name, "%s", de->d_name);
    }
    closedir(d);
    if (!best) return MT_NOTFOUND;
    mt_fmt(sub, sizeof sub, "%s/%s", base, best_name);
    return find_in(sub, device, sh, path, len, err, errlen);
}

/* ---- incumbents into the spec */

/* Appends every entry of the config file at file for shape index si, engine ("" = any). */
static int add_file(cli_guard_t *g, const char *file, uint32_t si, const char *engine, char *err, size_t errlen) {
    moetune_lookup_t *t = NULL;
    char why[300];
    if (moetune_lookup_load(file, &t, why, sizeof why) != MOETUNE_LOOKUP_OK) {
        mt_fmt(err, errlen, "--baseline %s: %s", file, why);
        return MT_INVAL;
    }
    size_t n = moetune_lookup_count(t);
    int rc = MT_OK;
    char *src = mt_strdup(file);
    if (!src) rc = MT_NOMEM;
    for (size_t i = 0; !rc && i < n; i++) {
        if (g->n == g->cap) {
            size_t cap = g->cap ? g->cap * 2 : 32;
            void *a = realloc(g->inc, cap * sizeof *g->inc);
            if (a) g->inc = a;
            void *b = realloc(g->cfgs, cap * sizeof *g->cfgs);
            if (b) g->cfgs = b;
            void *c = realloc(g->sources, cap * sizeof *g->sources);
            if (c) g->sources = c;
            void *o = realloc(g->owner, cap * sizeof *g->owner);
            if (o) g->owner = o;
            if (!a || !b || !c || !o) {
                rc = MT_NOMEM;
                break;
            }
            g->cap = cap;
        }
        uint32_t key = moetune_lookup_key(t, i);
        moetune_lookup_config_t lc;
        moetune_lookup_get(t, key, &lc, NULL);
        krn_config_t kc = {(uint32_t)lc.block_m,   (uint32_t)lc.block_n,   (uint32_t)lc.block_k,
                           (uint32_t)lc.group_m,   (uint32_t)lc.num_warps, (uint32_t)lc.num_stages};
        moetune__config__init(&g->cfgs[g->n]);
        wire_config_to_msg(&kc, &g->cfgs[g->n]);
        moetune__incumbent__init(&g->inc[g->n]);
        g->sources[g->n] = src;
        g->owner[g->n] = i == 0;
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
            if (!rc) rc = add_file(g, path, si, "", err, errlen);
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
                int frc = cli_guard_bundled_find(path, k_eng[e].e, NULL, device, &shapes[i], file, sizeof file, err,
                                                 errlen);
                if (frc == MT_NOTFOUND) continue;
                rc = frc ? frc : add_file(g, file, (uint32_t)i, k_eng[e].name, err, errlen);
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
    if (rc || !g->n) return rc;
    free(g->ptrs);
    g->ptrs = calloc(g->n, sizeof *g->ptrs);
    if (!g->ptrs) return MT_NOMEM;
    for (size_t i = 0; i < g->n; i++) {
        g->inc[i].config = &g->cfgs[i];
        g->inc[i].source = g->sources[i];
        g->ptrs[i] = &g->inc[i];
    }
    spec->n_incumbents = g->n;
    spec->incumbents = g->ptrs;
    return MT_OK;
}
