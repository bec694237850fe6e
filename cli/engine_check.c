/* engine_check.c - ask an engine's own config lookup which file it reads (engine_check.h). */
#include "engine_check.h"
#include "convert.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define ENG_TIMEOUT_MS 180000    /* importing torch and an engine on a cold cache */
#define ENG_MAX_OUT (4u << 20)   /* the probe's line for a few thousand shapes */

const char *eng_python(void) {
    const char *p = getenv("MOETUNE_PYTHON");
    return p && *p ? p : "python3";
}

void eng_own_clear(eng_own_t *own) {
    free(own->answers);
    memset(own, 0, sizeof *own);
}

/* Runs argv (mt_run_capture, ENG_TIMEOUT_MS) and collects at most ENG_MAX_OUT bytes of its
 * stdout into *out (caller frees). MT_OK with the exit status in *status; MT_AGAIN on timeout;
 * MT_IO/MT_NOMEM with a reason. */
static int run_capture(char *const argv[], char **out, int *status, char *err, size_t errlen) {
    char *buf = mt_malloc(ENG_MAX_OUT + 1);
    *out = NULL;
    if (!buf) return MT_NOMEM;
    int rc = mt_run_capture(argv, ENG_TIMEOUT_MS, buf, ENG_MAX_OUT + 1, NULL, 0, status, err, errlen);
    if (rc == MT_OK)
        *out = buf;
    else
        free(buf);
    return rc;
}

/* The --names argument: one object per shape (worker/HELPER.md "Probe"). */
static char *names_json(const char *const *devices, const krn_shape_t *shapes, size_t n, bool lookup) {
    json_t *arr = json_array();
    for (size_t i = 0; arr && i < n; i++) {
        const krn_shape_t *s = &shapes[i];
        json_t *q = json_pack("{s:I, s:I, s:s, s:I, s:I, s:b}", "e", (json_int_t)s->e, "n", (json_int_t)s->n, "dtype",
                              s->dtype[0] ? s->dtype : "bf16", "block_n", (json_int_t)s->block_n, "block_k",
                              (json_int_t)s->block_k, "lookup", lookup);
        if (q && devices && devices[i]) json_object_set_new(q, "device", json_string(devices[i]));
        if (!q || json_array_append_new(arr, q) != 0) {
            json_decref(arr);
            return NULL;
        }
    }
    char *text = arr ? json_dumps(arr, JSON_COMPACT) : NULL;
    json_decref(arr);
    return text;
}

static void copy_str(json_t *obj, const char *key, char *dst, size_t len) {
    const char *v = json_string_value(json_object_get(obj, key));
    snprintf(dst, len, "%s", v ? v : "");
}

/* Fills own from the probe's output (the {"probe": ...} line); own->why when there is none. */
static int parse_own(const char *text, const char *python, const char *ename, size_t n, eng_own_t *own) {
    json_t *probe = NULL, *root = NULL;
    for (const char *line = text; line && *line && !probe;) {
        const char *nl = strchr(line, '\n');
        root = json_loadb(line, nl ? (size_t)(nl - line) : strlen(line), 0, NULL);
        probe = json_object_get(root, "probe");
        if (!json_is_object(probe)) {
            probe = NULL;
            json_decref(root);
            root = NULL;
        }
        line = nl ? nl + 1 : NULL;
    }
    if (!probe) {
        mt_fmt(own->why, sizeof own->why, "the probe in %s gave no answer", python);
        return MT_OK;
    }
    json_t *eng = json_object_get(probe, "engine"), *o = json_object_get(eng, "own");
    json_t *names = json_object_get(o, "names");
    copy_str(eng, "version", own->version, sizeof own->version);
    copy_str(probe, "device", own->device, sizeof own->device);
    copy_str(probe, "triton", own->triton, sizeof own->triton);
    copy_str(eng, "config_dir", own->config_dir, sizeof own->config_dir);
    copy_str(eng, "error", own->engine_error, sizeof own->engine_error);
    if (!json_is_array(names) || json_array_size(names) != n) {
        const char *why = json_string_value(json_object_get(o, "error"));
        if (!why) why = json_string_value(json_object_get(eng, "error"));
        if (!why) why = json_string_value(json_object_get(probe, "error"));
        mt_fmt(own->why, sizeof own->why, "%s's own lookup was not asked in %s: %s", ename, python,
               why ? why : "no answer");
        json_decref(root);
        return MT_OK;
    }
    own->answers = mt_calloc(n ? n : 1, sizeof *own->answers);
    if (!own->answers) {
        json_decref(root);
        return MT_NOMEM;
    }
    own->n = n;
    own->asked = true;
    copy_str(o, "module", own->module, sizeof own->module);
    for (size_t i = 0; i < n; i++) {
        json_t *a = json_array_get(names, i);
        eng_answer_t *ans = &own->answers[i];
        copy_str(a, "file", ans->file, sizeof ans->file);
        copy_str(a, "down_file", ans->down_file, sizeof ans->down_file);
        copy_str(a, "loaded", ans->loaded, sizeof ans->loaded);
        copy_str(a, "error", ans->error, sizeof ans->error);
        if (!ans->error[0]) copy_str(a, "lookup_error", ans->error, sizeof ans->error);
        json_t *tried = json_object_get(a, "tried");
        ans->traced = json_is_array(tried);
        const char *first = json_string_value(json_array_get(tried, 0));
        snprintf(ans->first, sizeof ans->first, "%s", first ? first : "");
        ans->n_entries = (unsigned)json_array_size(json_object_get(a, "entries"));
    }
    json_decref(root);
    return MT_OK;
}

mt_status_t eng_ask(const char *python, exp_engine_t engine, const char *const *devices, const krn_shape_t *shapes,
                    size_t n, bool lookup, eng_own_t *own) {
    char helper[PATH_MAX], why[400];
    const char *ename = exp_engine_name(engine);
    char *names = NULL, *out = NULL;
    int status = 0, rc = MT_OK;
    memset(own, 0, sizeof *own);
    if (mt_helper_path(helper, sizeof helper, why, sizeof why) != MT_OK) {
        mt_fmt(own->why, sizeof own->why, "%s", why);
        return MT_OK;
    }
    names = names_json(devices, shapes, n, lookup);
    if (!names) return MT_NOMEM;
    char *argv[] = {(char *)python, helper, "--probe", "--engine", (char *)ename, "--names", names, NULL};
    rc = run_capture(argv, &out, &status, why, sizeof why);
    if (rc == MT_NOMEM) goto out;
    if (rc != MT_OK) {
        mt_fmt(own->why, sizeof own->why, "the probe in %s failed: %s", python, why);
        rc = MT_OK;
        goto out;
    }
    if (status == 127) {
        mt_fmt(own->why, sizeof own->why, "cannot run %s", python);
        goto out;
    }
    rc = parse_own(out, python, ename, n, own);
out:
    free(names);
    free(out);
    return rc;
}

/* "NAME" of a path's last component. */
static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* Compares the engine's answers in own with moetune's names; MT_INVAL naming both at the first
 * that differs. */
static int compare_names(exp_engine_t engine, const eng_own_t *own, const char *python, const char *const *devices,
                         const krn_shape_t *shapes, const char *const *names, size_t n, char *err, size_t errlen) {
    int rc = MT_OK;
    for (size_t i = 0; i < n && rc == MT_OK; i++) {
        const eng_answer_t *a = &own->answers[i];
        const char *dev = devices && devices[i] ? devices[i] : "this GPU";
        char down[440], sh[200];
        krn_shape_format(&shapes[i], sh, sizeof sh);
        mt_fmt(down, sizeof down, "%.*s_down.json", (int)(strlen(names[i]) > 5 ? strlen(names[i]) - 5 : 0),
               names[i]);
        if (a->error[0] && !a->file[0]) {
            mt_fmt(err, errlen, "%s (%s, in %s) could not name the file for %s on %s: %s; moetune would write %s",
                   exp_engine_name(engine), own->version, python, sh, dev, a->error, names[i]);
            rc = MT_INVAL;
        } else if (strcmp(a->file, base_name(names[i])) != 0 ||
                   (a->down_file[0] && strcmp(a->down_file, down) != 0)) {
            bool main = strcmp(a->file, base_name(names[i])) != 0;
            mt_fmt(err, errlen,
                   "%s (%s, in %s) looks for %s for %s on %s (%s.get_config_file_name), moetune would write %s: "
                   "the engine would not read it",
                   exp_engine_name(engine), own->version, python, main ? a->file : a->down_file, sh, dev,
                   own->module, main ? names[i] : down);
            rc = MT_INVAL;
        }
    }
    return rc;
}

mt_status_t eng_check_names(exp_engine_t engine, const char *const *devices, const krn_shape_t *shapes,
                            const char *const *names, size_t n, FILE *note, char *err, size_t errlen) {
    eng_own_t own;
    const char *python = eng_python();
    if (n == 0) return MT_OK;
    int rc = eng_ask(python, engine, devices, shapes, n, false, &own);
    if (rc != MT_OK || !own.asked) {
        eng_own_clear(&own);
        return rc;
    }
    rc = compare_names(engine, &own, python, devices, shapes, names, n, err, errlen);
    if (rc == MT_OK && note)
        fprintf(note, "%s %s in %s names %zu file%s as moetune does (%s.get_config_file_name)\n",
                exp_engine_name(engine), own.version, python, n, n == 1 ? "" : "s", own.module);
    eng_own_clear(&own);
    return rc;
}

/* One engine of eng_check_spec: its answer into own (the caller clears it), its names checked
 * with check. */
static int check_spec_engine(const char *python, exp_engine_t engine, const krn_shape_t *shapes, size_t n, bool check,
                             eng_own_t *own, char *err, size_t errlen) {
    int rc = eng_ask(python, engine, NULL, shapes, n, false, own);
    if (rc != MT_OK || !check || !own->asked || !own->device[0]) return rc;
    char(*names)[420] = mt_calloc(n, sizeof *names);
    const char **np = mt_calloc(n, sizeof *np), **devs = mt_calloc(n, sizeof *devs);
    rc = names && np && devs ? MT_OK : MT_NOMEM;
    for (size_t i = 0; rc == MT_OK && i < n; i++) {
        exp_engine_file_name(engine, own->device, &shapes[i], names[i], sizeof names[i]);
        np[i] = names[i];
        devs[i] = own->device;
    }
    if (rc == MT_OK) rc = compare_names(engine, own, python, devs, shapes, np, n, err, errlen);
    free(names);
    free(np);
    free(devs);
    return rc;
}

mt_status_t eng_check_spec(const char *python, const char *engines, const Moetune__SweepSpec *spec, bool check,
                           eng_own_t kept[2], char *err, size_t errlen) {
    size_t n = spec ? spec->n_shapes : 0;
    memset(kept, 0, 2 * sizeof *kept);
    if (!engines || n == 0) return MT_OK;
    krn_shape_t *shapes = mt_calloc(n, sizeof *shapes);
    if (!shapes) return MT_NOMEM;
    int rc = MT_OK;
    for (size_t i = 0; rc == MT_OK && i < n; i++) {
        char why[200];
        if (wire_shape_from_msg(spec->shapes[i], &shapes[i], why, sizeof why) != MT_OK) n = i; /* the plan says why */
    }
    static const exp_engine_t all[] = {EXP_ENGINE_SGLANG, EXP_ENGINE_VLLM};
    for (size_t k = 0; rc == MT_OK && k < 2; k++)
        if (strstr(engines, exp_engine_name(all[k])))
            rc = check_spec_engine(python, all[k], shapes, n, check, &kept[k], err, errlen);
    free(shapes);
    return rc;
}
