/* test_export_engine.c - moetune export --engine sglang|vllm over prepared triton rows:
 * folders, names, _down files, refusals; and the engines' own lookup rules
 * (docs/engines.md) written out here, finding what was exported. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>
#include <sqlite3.h>

#include "export.h"
#include "mt.h"
#include "tmpdb.h"

#define V36 "kernel=sglang triton=3.6.0 torch=2.11.0 python=3.12.3 engine=sglang-0.5.4"
#define V36_TORCH210 "kernel=sglang triton=3.6.0 torch=2.10.0 python=3.12.3 engine=sglang-0.5.4"
#define V351 "kernel=sglang triton=3.5.1 torch=2.11.0 python=3.12.3 engine=sglang-0.5.4"

typedef tmpdir_t fixture_t;

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* Configs: id, BLOCK_SIZE_M, N, K, GROUP_SIZE_M, warps, stages. */
#define CONFIGS                                                                                                        \
    "INSERT INTO configs VALUES (1, 16, 64, 128, 1, 4, 3), (2, 32, 64, 64, 16, 4, 2),"                                 \
    " (3, 64, 128, 128, 16, 8, 4), (4, 16, 128, 64, 1, 4, 4), (5, 64, 64, 64, 1, 4, 3),"                               \
    " (6, 32, 128, 128, 16, 8, 3)"

/* Per config at one batch size: whole-layer median, up alone, down alone. The whole-layer
 * best is config 3 (BLOCK_SIZE_M 64); the best pair with agreeing BLOCK_SIZE_M is up 1 +
 * down 4 (BLOCK_SIZE_M 16: 20 + 10 = 30); BLOCK_SIZE_M 32 gives 25 + 6 = 31, 64 gives
 * 30 + 15 = 45. Up 1 + down 6 (20 + 6 = 26) would be lower, but their BLOCK_SIZE_M differ. */
static const struct {
    int cfg;
    double med, up, down;
} k_timing[] = {
    {1, 60, 20, 40}, {2, 65, 25, 25}, {3, 50, 30, 18}, {4, 70, 35, 10}, {5, 80, 40, 15}, {6, 75, 26, 6},
};

static void insert(sqlite3_stmt *st, int sweep, int shape, int cfg, int bs, double med, double up, double down,
                   int device, const char *backend, const char *compiler, const char *hash, const char *versions) {
    sqlite3_reset(st);
    sqlite3_bind_int(st, 1, sweep);
    sqlite3_bind_int(st, 2, shape);
    sqlite3_bind_int(st, 3, cfg);
    sqlite3_bind_int(st, 4, bs);
    sqlite3_bind_double(st, 5, med);
    sqlite3_bind_int(st, 6, device);
    sqlite3_bind_text(st, 7, backend, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 8, compiler, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 9, hash, -1, SQLITE_STATIC);
    if (versions)
        sqlite3_bind_text(st, 10, versions, -1, SQLITE_STATIC);
    else
        sqlite3_bind_null(st, 10);
    sqlite3_bind_double(st, 11, up);
    sqlite3_bind_double(st, 12, down);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
}

static const int k_sizes[] = {64, 1, 4096}; /* inserted out of order */

/* Sweep 1: Triton 3.6.0, shape 1 (bf16) on an H200 with up/down timings, shape 2 (fp8,
 * block 128x128) on an H200 NVL without. Sweep 3: shape 1 on Triton 3.5.1. Sweep 4:
 * shape 1 on Triton 3.6.0 with another torch. */
static int setup(void **state) {
    fixture_t *fx = tmpdir_new(sizeof *fx, "test_export_engine", "out");
    sqlite3 *db = tmpdb_schema(fx->db);
    tmpdb_exec(db, "INSERT INTO devices (id, name, uuid, driver_version, cuda_version) VALUES"
                   " (1, 'NVIDIA H200', 'GPU-1', '580.1', '13.0'), (2, 'NVIDIA H200 NVL', 'GPU-2', '580.1', '13.0');"
                   "INSERT INTO sweeps (id, name, spec, state, created) VALUES (1, 'a', x'', 'done', 1),"
                   " (2, 'cuda', x'', 'done', 1), (3, 'old', x'', 'done', 1), (4, 'torch', x'', 'done', 1);"
                   "INSERT INTO shapes (id, e, n, k, topk, dtype) VALUES (1, 128, 768, 2048, 8, 'bf16');"
                   "INSERT INTO shapes (id, e, n, k, topk, dtype, block_n, block_k) VALUES"
                   " (2, 256, 256, 7168, 8, 'fp8_w8a8', 128, 128);" CONFIGS);
    sqlite3_stmt *st = NULL;
    assert_int_equal(sqlite3_prepare_v2(db,
                                        "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status,"
                                        " median_us, min_us, stddev_us, samples, device_id, backend, compiler,"
                                        " kernel_hash, versions, up_us, down_us, created) VALUES (?1, ?2, ?3, ?4,"
                                        " 'ok', ?5, ?5 - 1, 0.1, 20, ?6, ?7, ?8, ?9, ?10, ?11, ?12, 1)",
                                        -1, &st, NULL),
                     SQLITE_OK);
    for (size_t i = 0; i < 3; i++) {
        int bs = k_sizes[i];
        double scale = bs == 4096 ? 10 : 1;
        for (size_t c = 0; c < 6; c++) {
            const double m = k_timing[c].med * scale, u = k_timing[c].up * scale, d = k_timing[c].down * scale;
            insert(st, 1, 1, k_timing[c].cfg, bs, m, u, d, 1, "triton", "triton_3_6_0", "aaaa", V36);
            /* fp8 on the NVL: whole layer only; config 5 wins */
            insert(st, 1, 2, k_timing[c].cfg, bs, k_timing[c].cfg == 5 ? 1 : m, 0, 0, 2, "triton", "triton_3_6_0",
                   "aaaa", V36);
            insert(st, 3, 1, k_timing[c].cfg, bs, k_timing[c].cfg == 2 ? 1 : m, 0, 0, 1, "triton", "triton_3_5_1",
                   "bbbb", V351);
            insert(st, 4, 1, k_timing[c].cfg, bs, m, 0, 0, 1, "triton", "triton_3_6_0", "aaaa", V36_TORCH210);
        }
    }
    sqlite3_finalize(st);
    sqlite3_close(db);
    *state = fx;
    return 0;
}

static int export_as(fixture_t *fx, exp_engine_t engine, uint64_t sweep, exp_report_t *rep, char *err, size_t len) {
    FILE *changes = fopen("/dev/null", "w");
    exp_opts_t o = {.db_path = fx->db, .out_dir = fx->out, .sweep_id = sweep, .changes = changes, .engine = engine};
    err[0] = '\0';
    int rc = exp_run(&o, rep, err, len);
    fclose(changes);
    return rc;
}

static void export_ok(fixture_t *fx, exp_engine_t engine, uint64_t sweep) {
    char err[1200];
    exp_report_t rep;
    int rc = export_as(fx, engine, sweep, &rep, err, sizeof err);
    exp_report_clear(&rep);
    if (rc != MT_OK) fail_msg("export: %s", err);
}

/* ---- the engines' lookup rules, written out from docs/engines.md */

typedef struct {
    unsigned e, n;
    const char *dtype; /* NULL for bf16 */
    unsigned block_n, block_k;
} eng_shape_t;

/* The device as both engines name it: its spaces as '_'. */
static void device_name(const char *device, char *dev, size_t len) {
    snprintf(dev, len, "%s", device);
    for (char *p = dev; *p; p++)
        if (*p == ' ') *p = '_';
}

/* What both engines write after the device: ",dtype=D" for a dtype, then ",block_shape=[N<sep>K]"
 * for block scales (sep: SGLang's ", ", vLLM's ","). */
static void name_extra(const eng_shape_t *s, const char *sep, char *extra, size_t len) {
    extra[0] = '\0';
    if (s->dtype) snprintf(extra, len, ",dtype=%s", s->dtype);
    if (s->block_n)
        snprintf(extra + strlen(extra), len - strlen(extra), ",block_shape=[%u%s%u]", s->block_n, sep, s->block_k);
}

/* SGLang's name: device spaces as '_', unnormalised; block_shape printed as a Python list. */
static void sglang_name(const char *device, const eng_shape_t *s, bool down, char *buf, size_t len) {
    char dev[128], extra[96];
    device_name(device, dev, sizeof dev);
    name_extra(s, ", ", extra, sizeof extra);
    snprintf(buf, len, "E=%u,N=%u,device_name=%s%s%s.json", s->e, s->n, dev, extra, down ? "_down" : "");
}

static int ver_cmp(const char *a, const char *b) {
    while (*a || *b) {
        long x = strtol(a, (char **)&a, 10), y = strtol(b, (char **)&b, 10);
        if (x != y) return x < y ? -1 : 1;
        if (*a == '_' || *a == '.') a++;
        if (*b == '_' || *b == '.') b++;
    }
    return 0;
}

/* SGLang: D/configs/triton_<X_Y_Z>/name for the running Triton; else the newest other
 * configs/triton_* folder holding it. Returns the folder's version, or false. */
static bool sglang_find(const char *d, const char *triton, const char *device, const eng_shape_t *s, bool down,
                        char *path, size_t len) {
    char name[256], ver[32];
    sglang_name(device, s, down, name, sizeof name);
    snprintf(ver, sizeof ver, "%s", triton);
    for (char *p = ver; *p; p++)
        if (*p == '.') *p = '_';
    snprintf(path, len, "%s/configs/triton_%s/%s", d, ver, name);
    if (is_file(path)) return true;
    char cdir[512], best[64] = "";
    snprintf(cdir, sizeof cdir, "%s/configs", d);
    DIR *dir = opendir(cdir);
    if (!dir) return false;
    struct dirent *de;
    while ((de = readdir(dir))) {
        if (strncmp(de->d_name, "triton_", 7) != 0 || strcmp(de->d_name + 7, ver) == 0) continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s/%s", cdir, de->d_name, name);
        if (is_file(p) && (!best[0] || ver_cmp(de->d_name + 7, best) > 0))
            snprintf(best, sizeof best, "%s", de->d_name + 7);
    }
    closedir(dir);
    if (!best[0]) return false;
    snprintf(path, len, "%s/configs/triton_%s/%s", d, best, name);
    return true;
}

/* vLLM: $VLLM_TUNED_CONFIG_FOLDER/name, flat; H200 devices are NVIDIA_H200; no space in block_shape. */
static bool vllm_find(const char *folder, const char *device, const eng_shape_t *s, char *path, size_t len) {
    char dev[128], extra[96];
    char tmp[128];
    snprintf(tmp, sizeof tmp, " %s ", device);
    if (strstr(tmp, " H200 "))
        snprintf(dev, sizeof dev, "NVIDIA_H200");
    else
        device_name(device, dev, sizeof dev);
    name_extra(s, ",", extra, sizeof extra);
    snprintf(path, len, "%s/E=%u,N=%u,device_name=%s%s.json", folder, s->e, s->n, dev, extra);
    return is_file(path);
}

/* Both engines pick min(keys, key=|k - M|), the first in file order on a tie; vLLM
 * skips "triton_version". Returns that entry's BLOCK_SIZE_M (and the key). */
static int engine_pick(const char *path, int m, int *key_out) {
    json_t *root = json_load_file(path, JSON_PRESERVE_ORDER, NULL);
    assert_non_null(root);
    const char *key;
    json_t *val, *best = NULL;
    long best_d = -1;
    json_object_foreach(root, key, val) {
        if (strcmp(key, "triton_version") == 0) continue;
        long d = labs(atol(key) - m);
        if (best_d < 0 || d < best_d) {
            best_d = d;
            best = val;
            *key_out = atoi(key);
        }
    }
    assert_non_null(best);
    int bm = (int)json_integer_value(json_object_get(best, "BLOCK_SIZE_M"));
    json_decref(root);
    return bm;
}

static void check_cfg(json_t *root, const char *key, int cfg) {
    static const int k_cfg[7][6] = {{0},
                                    {16, 64, 128, 1, 4, 3},
                                    {32, 64, 64, 16, 4, 2},
                                    {64, 128, 128, 16, 8, 4},
                                    {16, 128, 64, 1, 4, 4},
                                    {64, 64, 64, 1, 4, 3},
                                    {32, 128, 128, 16, 8, 3}};
    static const char *const k_f[6] = {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K",
                                       "GROUP_SIZE_M", "num_warps",    "num_stages"};
    json_t *e = json_object_get(root, key);
    if (!e) fail_msg("no entry %s", key);
    for (int i = 0; i < 6; i++)
        if (json_integer_value(json_object_get(e, k_f[i])) != k_cfg[cfg][i])
            fail_msg("entry %s: %s is %lld, config %d has %d", key, k_f[i],
                     (long long)json_integer_value(json_object_get(e, k_f[i])), cfg, k_cfg[cfg][i]);
    assert_int_equal(json_object_size(e), 6);
}

static void assert_keys_in_order(const char *text, const char *first) {
    const char *a = strstr(text, first ? first : "\"1\":"), *k1 = strstr(text, "\"1\":"),
               *k64 = strstr(text, "\"64\":"), *k4096 = strstr(text, "\"4096\":");
    assert_true(a && k1 && k64 && k4096);
    assert_true(a <= k1 && k1 < k64 && k64 < k4096);
}

static const eng_shape_t k_bf16 = {128, 768, NULL, 0, 0};
static const eng_shape_t k_fp8 = {256, 256, "fp8_w8a8", 128, 128};

static void test_sglang(void **state) {
    fixture_t *fx = *state;
    char err[1200], path[1024];
    exp_report_t rep;
    assert_int_equal(export_as(fx, EXP_ENGINE_SGLANG, 1, &rep, err, sizeof err), MT_OK);
    /* bf16 main + _down, fp8 main only */
    assert_int_equal(rep.n_files, 3);
    bool seen_down = false;
    for (size_t i = 0; i < rep.n_files; i++) {
        assert_int_equal(strncmp(rep.files[i].path, "configs/triton_3_6_0/", 21), 0);
        assert_int_equal(rep.files[i].state, EXP_NEW);
        assert_int_equal(rep.files[i].entries, 3);
        seen_down = seen_down || strstr(rep.files[i].path, "_down.json") != NULL;
    }
    assert_true(seen_down);
    exp_report_clear(&rep);

    /* The names SGLang builds, found where it looks (SGLANG_MOE_CONFIG_DIR=out). */
    assert_true(sglang_find(fx->out, "3.6.0", "NVIDIA H200", &k_bf16, false, path, sizeof path));
    assert_non_null(strstr(path, "/configs/triton_3_6_0/E=128,N=768,device_name=NVIDIA_H200.json"));
    char *text = tmpdb_read_file(path);
    assert_keys_in_order(text, NULL);
    assert_null(strstr(text, "triton_version"));
    free(text);
    /* The main file holds the pair's up config (1, BLOCK_SIZE_M 16), not the whole-layer
     * best (3); _down holds the pair's down config (4), same BLOCK_SIZE_M. */
    json_t *up = json_load_file(path, 0, NULL);
    for (size_t i = 0; i < 3; i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", k_sizes[i]);
        check_cfg(up, key, 1);
    }
    assert_true(sglang_find(fx->out, "3.6.0", "NVIDIA H200", &k_bf16, true, path, sizeof path));
    json_t *down = json_load_file(path, 0, NULL);
    assert_non_null(down);
    const char *key;
    json_t *val;
    json_object_foreach(down, key, val) {
        check_cfg(down, key, 4);
        assert_int_equal(json_integer_value(json_object_get(val, "BLOCK_SIZE_M")),
                         json_integer_value(json_object_get(json_object_get(up, key), "BLOCK_SIZE_M")));
    }
    assert_int_equal(json_object_size(down), 3);
    json_decref(up);
    json_decref(down);
    int k = 0;
    assert_int_equal(engine_pick(path, 50, &k), 16);
    assert_int_equal(k, 64);

    /* fp8 on the NVL: its own name, no _down (no split timings), whole-layer best (5). */
    assert_true(sglang_find(fx->out, "3.6.0", "NVIDIA H200 NVL", &k_fp8, false, path, sizeof path));
    assert_non_null(strstr(path, "E=256,N=256,device_name=NVIDIA_H200_NVL,dtype=fp8_w8a8,block_shape=[128, 128].json"));
    json_t *f8 = json_load_file(path, 0, NULL);
    check_cfg(f8, "1", 5);
    check_cfg(f8, "4096", 5);
    json_decref(f8);
    assert_false(sglang_find(fx->out, "3.6.0", "NVIDIA H200 NVL", &k_fp8, true, path, sizeof path));
    /* Another device's name is not there. */
    assert_false(sglang_find(fx->out, "3.6.0", "NVIDIA H100 80GB HBM3", &k_bf16, false, path, sizeof path));

    /* The manifest: versions, kernel, engine, the rule, and what the split buys. */
    snprintf(path, sizeof path, "%s/configs/triton_3_6_0/manifest.json", fx->out);
    json_t *man = json_load_file(path, 0, NULL);
    assert_non_null(man);
    json_t *rec = json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json");
    assert_non_null(rec);
    assert_string_equal(json_string_value(json_object_get(rec, "versions")), V36);
    assert_string_equal(json_string_value(json_object_get(rec, "kernel")), "sglang");
    assert_string_equal(json_string_value(json_object_get(rec, "engine")), "sglang");
    assert_string_equal(json_string_value(json_object_get(rec, "triton_version")), "3.6.0");
    assert_string_equal(json_string_value(json_object_get(rec, "role")), "up");
    assert_string_equal(json_string_value(json_object_get(rec, "down_file")),
                        "E=128,N=768,device_name=NVIDIA_H200_down.json");
    json_t *e64 = json_object_get(json_object_get(rec, "entries"), "64");
    assert_true(json_real_value(json_object_get(e64, "whole_layer_best_us")) == 50.0);
    assert_int_equal(json_integer_value(json_object_get(e64, "whole_layer_best_config_id")), 3);
    assert_true(json_real_value(json_object_get(e64, "whole_layer_best_up_down_us")) == 48.0);
    assert_true(json_real_value(json_object_get(e64, "split_sum_us")) == 30.0);
    assert_int_equal(json_integer_value(json_object_get(e64, "split_block_m")), 16);
    assert_int_equal(json_integer_value(json_object_get(e64, "config_id")), 1);
    json_t *drec = json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200_down.json");
    assert_string_equal(json_string_value(json_object_get(drec, "role")), "down");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(json_object_get(drec, "entries"), "64"), "config_id")), 4);
    json_t *frec =
        json_object_get(man, "E=256,N=256,device_name=NVIDIA_H200_NVL,dtype=fp8_w8a8,block_shape=[128, 128].json");
    assert_string_equal(json_string_value(json_object_get(frec, "role")), "whole");
    assert_true(json_is_null(json_object_get(frec, "down_file")));
    json_decref(man);

    /* Again: unchanged. Then Triton 3.5.1's sweep goes to its own folder, and SGLang
     * on a Triton nobody tuned falls back to the newest folder holding the file. */
    assert_int_equal(export_as(fx, EXP_ENGINE_SGLANG, 1, &rep, err, sizeof err), MT_OK);
    for (size_t i = 0; i < rep.n_files; i++) assert_int_equal(rep.files[i].state, EXP_UNCHANGED);
    exp_report_clear(&rep);
    export_ok(fx, EXP_ENGINE_SGLANG, 3);
    assert_true(sglang_find(fx->out, "3.5.1", "NVIDIA H200", &k_bf16, false, path, sizeof path));
    assert_non_null(strstr(path, "/triton_3_5_1/"));
    assert_true(sglang_find(fx->out, "3.7.0", "NVIDIA H200", &k_bf16, false, path, sizeof path));
    assert_non_null(strstr(path, "/triton_3_6_0/"));
}

static void test_vllm(void **state) {
    fixture_t *fx = *state;
    char path[1024];
    export_ok(fx, EXP_ENGINE_VLLM, 1);
    /* Flat, for VLLM_TUNED_CONFIG_FOLDER=out; no _down; the NVL is NVIDIA_H200. */
    assert_true(vllm_find(fx->out, "NVIDIA H200", &k_bf16, path, sizeof path));
    char *text = tmpdb_read_file(path);
    assert_non_null(strstr(text, "{\n    \"triton_version\": \"3.6.0\",\n    \"1\": {"));
    assert_keys_in_order(text, "\"triton_version\"");
    free(text);
    json_t *root = json_load_file(path, 0, NULL);
    check_cfg(root, "64", 3); /* no split for vLLM: the whole-layer best */
    json_decref(root);
    assert_true(vllm_find(fx->out, "NVIDIA H200 NVL", &k_fp8, path, sizeof path));
    assert_non_null(strstr(path, "/E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json"));
    int k = 0;
    assert_int_equal(engine_pick(path, 3000, &k), 64);
    assert_int_equal(k, 4096);
    /* Config 5 (BLOCK_SIZE_N/K 64/64) is SGLang's fp8 pick; vLLM's kernel needs N and K tiles that
     * are multiples of the 128x128 weight blocks, so its file has the best of those: config 3. */
    json_t *f8 = json_load_file(path, 0, NULL);
    check_cfg(f8, "1", 3);
    check_cfg(f8, "4096", 3);
    json_decref(f8);
    DIR *d = opendir(fx->out);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        assert_null(strstr(de->d_name, "_down"));
        assert_true(strcmp(de->d_name, "configs") != 0);
        n++;
    }
    closedir(d);
    assert_int_equal(n, 3); /* two files and manifest.json */
    snprintf(path, sizeof path, "%s/manifest.json", fx->out);
    json_t *man = json_load_file(path, 0, NULL);
    json_t *rec = json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json");
    assert_string_equal(json_string_value(json_object_get(rec, "engine")), "vllm");
    assert_string_equal(json_string_value(json_object_get(rec, "versions")), V36);
    json_decref(man);
}

static void test_refusals(void **state) {
    fixture_t *fx = *state;
    char err[1200];
    exp_report_t rep;
    /* All sweeps: 3.6.0 and 3.5.1 would share vLLM's flat name. */
    assert_int_equal(export_as(fx, EXP_ENGINE_VLLM, 0, &rep, err, sizeof err), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(err, "E=128,N=768,device_name=NVIDIA_H200.json"));
    /* the first two groups that meet: 3.5.1 (sweep 3) and 3.6.0 with torch 2.10 (sweep 4) */
    assert_non_null(strstr(err, "sweep 3 (triton_3_5_1, kernel_hash bbbb, versions '" V351 "')"));
    assert_non_null(strstr(err, "sweep 4 (triton_3_6_0, kernel_hash aaaa, versions '" V36_TORCH210 "')"));
    assert_non_null(strstr(err, "--sweep N"));
    assert_int_not_equal(access(fx->out, F_OK), 0); /* nothing written */
    /* SGLang: 3.5.1 has its folder, but sweep 4 (other torch) meets sweep 1 in triton_3_6_0. */
    assert_int_equal(export_as(fx, EXP_ENGINE_SGLANG, 0, &rep, err, sizeof err), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(err, "configs/triton_3_6_0/E=128,N=768,device_name=NVIDIA_H200.json"));
    assert_non_null(strstr(err, "torch=2.10.0"));
    assert_non_null(strstr(err, "torch=2.11.0"));
    /* One at a time into one folder: the manifest says the file came from other versions. */
    export_ok(fx, EXP_ENGINE_SGLANG, 1);
    assert_int_equal(export_as(fx, EXP_ENGINE_SGLANG, 4, &rep, err, sizeof err), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(err, "never mixes"));
    /* A vLLM file of another Triton (as vLLM's tuner writes it, no manifest) is not merged into. */
    char path[1024];
    snprintf(path, sizeof path, "%s/v", fx->dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/v/E=128,N=768,device_name=NVIDIA_H200.json", fx->dir);
    FILE *f = fopen(path, "w");
    fputs("{\"triton_version\": \"3.5.1\", \"8\": {\"BLOCK_SIZE_M\": 16, \"BLOCK_SIZE_N\": 64, \"BLOCK_SIZE_K\": 64,"
          " \"GROUP_SIZE_M\": 1, \"num_warps\": 4, \"num_stages\": 3}}\n",
          f);
    fclose(f);
    snprintf(fx->out, sizeof fx->out, "%s/v", fx->dir);
    assert_int_equal(export_as(fx, EXP_ENGINE_VLLM, 1, &rep, err, sizeof err), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(err, "holds configs for Triton 3.5.1"));
    /* cuda rows: refused by name, with or without --sweep. */
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(fx->db, &db), SQLITE_OK);
    tmpdb_exec(db, "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, device_id,"
                   " backend, compiler, created) VALUES (2, 1, 1, 1, 'ok', 3.0, 1, 'cuda', 'cuda_13_0', 1)");
    sqlite3_close(db);
    assert_int_equal(export_as(fx, EXP_ENGINE_SGLANG, 2, &rep, err, sizeof err), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(err, "sweep 2 measured with the cuda backend"));
    assert_non_null(strstr(err, "moetune's CUDA kernel, which no engine runs"));
    assert_int_equal(export_as(fx, EXP_ENGINE_VLLM, 0, &rep, err, sizeof err), MT_INVAL);
    exp_report_clear(&rep);
    assert_non_null(strstr(err, "cuda backend"));
    /* Without --engine, today's layout still exports the cuda sweep. */
    snprintf(fx->out, sizeof fx->out, "%s/plain", fx->dir);
    export_ok(fx, EXP_ENGINE_NONE, 2);
    snprintf(path, sizeof path, "%s/plain/cuda_13_0/E=128,N=768,device_name=NVIDIA_H200.json", fx->dir);
    assert_true(is_file(path));
}

static void test_names(void **state) {
    char buf[256];
    krn_shape_t s = {.e = 256, .n = 256, .k = 7168, .topk = 8, .dtype = "fp8_w8a8", .block_n = 128, .block_k = 128};
    exp_engine_file_name(EXP_ENGINE_SGLANG, "NVIDIA H200 NVL", &s, buf, sizeof buf);
    assert_string_equal(buf, "E=256,N=256,device_name=NVIDIA_H200_NVL,dtype=fp8_w8a8,block_shape=[128, 128].json");
    exp_engine_file_name(EXP_ENGINE_VLLM, "NVIDIA H200 NVL", &s, buf, sizeof buf);
    assert_string_equal(buf, "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json");
    krn_shape_t b = {.e = 8, .n = 7168, .k = 4096, .topk = 2, .dtype = "bf16"};
    exp_engine_file_name(EXP_ENGINE_VLLM, "NVIDIA H100 80GB HBM3", &b, buf, sizeof buf);
    assert_string_equal(buf, "E=8,N=7168,device_name=NVIDIA_H100_80GB_HBM3.json");
    exp_engine_file_name(EXP_ENGINE_VLLM, "NVIDIA H2000", &b, buf, sizeof buf); /* a token, not a substring */
    assert_string_equal(buf, "E=8,N=7168,device_name=NVIDIA_H2000.json");
    exp_engine_t e;
    assert_int_equal(exp_engine_parse("vllm", &e), MT_OK);
    assert_int_equal(e, EXP_ENGINE_VLLM);
    assert_int_equal(exp_engine_parse("trtllm", &e), MT_INVAL);
}

/* exp_pairs hands both rows over with their versions (kept past the row's own callback), and
 * exp_version_of reads one key of them: what the near-ties listing's re-measure command needs. */
typedef struct {
    size_t calls;
    char best[512], ru[512];
} pair_seen_t;

static mt_status_t see_pair(void *ctx, const dbq_result_t *best, const dbq_result_t *ru) {
    pair_seen_t *p = ctx;
    if (p->calls++ == 0) {
        snprintf(p->best, sizeof p->best, "%s", best->versions);
        snprintf(p->ru, sizeof p->ru, "%s", ru ? ru->versions : "(none)");
    }
    return MT_OK;
}

static void test_pairs_versions(void **state) {
    fixture_t *fx = *state;
    char err[400], v[64];
    dbq_t *q = NULL;
    uint64_t sweep = 3;
    dbq_select_t sel = {.ids = &sweep, .n_ids = 1};
    pair_seen_t seen = {0};
    assert_int_equal(dbq_open(fx->db, &q, err, sizeof err), MT_OK);
    assert_int_equal(exp_pairs(q, &sel, NULL, see_pair, &seen, err, sizeof err), MT_OK);
    dbq_close(&q);
    assert_int_equal(seen.calls, 3); /* one shape at 3 batch sizes */
    assert_string_equal(seen.best, V351);
    assert_string_equal(seen.ru, V351);
    exp_version_of(seen.best, "kernel", v, sizeof v);
    assert_string_equal(v, "sglang");
    exp_version_of(seen.best, "triton", v, sizeof v);
    assert_string_equal(v, "3.5.1");
    exp_version_of(seen.best, "engine", v, sizeof v);
    assert_string_equal(v, "sglang-0.5.4");
    exp_version_of(seen.best, "torc", v, sizeof v); /* a prefix of a key is not the key */
    assert_string_equal(v, "");
    exp_version_of(NULL, "kernel", v, sizeof v);
    assert_string_equal(v, "");
}

/* The ship guard with an engine: sweep 5 measured config 3 best (50 us) at M=64 and vLLM's newer
 * default (config 5) 0.05 us behind, within the noise (deviations 0.1): the vLLM file ships the
 * default, and its manifest says so; SGLang's file, whose default is config 2 (beaten by 15 us),
 * ships the pick. */
static void test_guard(void **state) {
    fixture_t *fx = *state;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(fx->db, &db), SQLITE_OK);
    tmpdb_exec(db, "INSERT INTO sweeps (id, name, spec, state, created) VALUES (5, 'guard', x'', 'done', 1);"
                   "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us,"
                   " stddev_us, samples, device_id, backend, compiler, kernel_hash, versions, created, phase)"
                   " SELECT 5, shape_id, config_id, batch_size, status, CASE WHEN config_id = 5 AND batch_size = 64"
                   " THEN 50.05 ELSE median_us END, min_us, stddev_us, samples, device_id, backend, compiler,"
                   " kernel_hash, versions, created, 2 FROM results WHERE sweep_id = 4;"
                   "INSERT INTO guard (sweep_id, shape_id, batch_size, role, engine, config_id, searched, source)"
                   " VALUES (5, 1, 64, 'default', 'vllm-2026', 5, 1, 'vllm-2026 get_default_config, by M'),"
                   " (5, 1, 64, 'default', 'vllm', 1, 1, 'vllm get_default_config, M <= E'),"
                   " (5, 1, 64, 'default', 'sglang', 2, 1, 'sglang get_default_config, M <= E');");
    sqlite3_close(db);
    char path[1024];
    export_ok(fx, EXP_ENGINE_VLLM, 5);
    assert_true(vllm_find(fx->out, "NVIDIA H200", &k_bf16, path, sizeof path));
    json_t *root = json_load_file(path, 0, NULL);
    check_cfg(root, "64", 5);
    check_cfg(root, "1", 3);
    json_decref(root);
    snprintf(path, sizeof path, "%s/manifest.json", fx->out);
    json_t *man = json_load_file(path, 0, NULL);
    json_t *g = json_object_get(
        json_object_get(json_object_get(json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json"), "entries"),
                        "64"),
        "guard");
    assert_string_equal(json_string_value(json_object_get(g, "shipped")), "default");
    assert_int_equal(json_integer_value(json_object_get(json_object_get(g, "searched_pick"), "config_id")), 3);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(g, "default"), "config_id")), 5);
    json_decref(man);
    export_ok(fx, EXP_ENGINE_SGLANG, 5);
    assert_true(sglang_find(fx->out, "3.6.0", "NVIDIA H200", &k_bf16, false, path, sizeof path));
    root = json_load_file(path, 0, NULL);
    check_cfg(root, "64", 3);
    json_decref(root);
}

/* SGLang's up/down pair against the guard as whole layers: sweep 6 is sweep 1 (pair up 1 + down 4:
 * 20 + 10 = 30 us at every batch size) with the default, config 6, timed at M=64 at 21 + 9.5 =
 * 30.5 us for its two GEMMs, within its own deviation (2 of 75 us) of the pair's: both files ship
 * config 6 there (a file must earn its place), the pair elsewhere. */
static void test_guard_layer(void **state) {
    fixture_t *fx = *state;
    sqlite3 *db = NULL;
    assert_int_equal(sqlite3_open(fx->db, &db), SQLITE_OK);
    tmpdb_exec(db, "INSERT INTO sweeps (id, name, spec, state, created) VALUES (6, 'layer', x'', 'done', 1);"
                   "INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us,"
                   " stddev_us, samples, device_id, backend, compiler, kernel_hash, versions, up_us, down_us, created,"
                   " phase) SELECT 6, shape_id, config_id, batch_size, status, median_us, min_us,"
                   " CASE WHEN config_id = 6 AND batch_size = 64 THEN 2 ELSE stddev_us END, samples,"
                   " device_id, backend, compiler, kernel_hash, versions, CASE WHEN config_id = 6 AND batch_size = 64"
                   " THEN 21 ELSE up_us END, CASE WHEN config_id = 6 AND batch_size = 64 THEN 9.5 ELSE down_us END,"
                   " created, 2 FROM results WHERE sweep_id = 1 AND shape_id = 1;"
                   "INSERT INTO guard (sweep_id, shape_id, batch_size, role, engine, config_id, searched, source)"
                   " VALUES (6, 1, 64, 'default', 'sglang', 6, 1, 'sglang get_default_config, M <= E');");
    sqlite3_close(db);
    char path[1024];
    export_ok(fx, EXP_ENGINE_SGLANG, 6);
    for (int down = 0; down < 2; down++) {
        assert_true(sglang_find(fx->out, "3.6.0", "NVIDIA H200", &k_bf16, down, path, sizeof path));
        json_t *root = json_load_file(path, 0, NULL);
        check_cfg(root, "64", 6);
        check_cfg(root, "1", down ? 4 : 1);
        json_decref(root);
    }
    assert_true(sglang_find(fx->out, "3.6.0", "NVIDIA H200", &k_bf16, false, path, sizeof path));
    char *slash = strrchr(path, '/');
    snprintf(slash + 1, sizeof path - (size_t)(slash + 1 - path), "manifest.json");
    json_t *man = json_load_file(path, 0, NULL);
    json_t *g = json_object_get(
        json_object_get(json_object_get(json_object_get(man, "E=128,N=768,device_name=NVIDIA_H200.json"), "entries"),
                        "64"),
        "guard");
    assert_string_equal(json_string_value(json_object_get(g, "shipped")), "default");
    json_t *wl = json_object_get(g, "whole_layer");
    assert_true(json_real_value(json_object_get(wl, "guard_up_down_us")) == 30.5);
    assert_true(json_real_value(json_object_get(wl, "pair_up_down_us")) == 30.0);
    json_decref(man);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sglang, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_vllm, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_refusals, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_pairs_versions, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_guard, setup, tmpdir_teardown),
        cmocka_unit_test_setup_teardown(test_guard_layer, setup, tmpdir_teardown),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
