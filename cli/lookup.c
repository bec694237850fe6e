/* lookup.c - config-file loader and the nearest-key lookup rule (see lookup.h). */
#include "lookup.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
    uint32_t key;
    moetune_lookup_config_t cfg;
} entry_t;

struct moetune_lookup {
    entry_t *entries; /* sorted by key, keys unique */
    size_t n;
    char triton_version[64]; /* "" when the file has none */
};

static void set_err(char *err, size_t errlen, const char *fmt, const char *a, const char *b) {
    if (err && errlen) snprintf(err, errlen, fmt, a ? a : "", b ? b : "");
}

/* Parses a canonical positive decimal key ("1", "4096"); 0 on anything else. */
static uint32_t parse_key(const char *s) {
    if (!s || s[0] < '1' || s[0] > '9') return 0;
    uint64_t v = 0;
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9') return 0;
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > UINT32_MAX) return 0;
    }
    return (uint32_t)v;
}

static int cmp_entry(const void *a, const void *b) {
    uint32_t x = ((const entry_t *)a)->key, y = ((const entry_t *)b)->key;
    return x < y ? -1 : x > y;
}

static const struct {
    const char *name;
    size_t off;
    int min;
} k_fields[] = {
    {"BLOCK_SIZE_M", offsetof(moetune_lookup_config_t, block_m), 1},
    {"BLOCK_SIZE_N", offsetof(moetune_lookup_config_t, block_n), 1},
    {"BLOCK_SIZE_K", offsetof(moetune_lookup_config_t, block_k), 1},
    {"GROUP_SIZE_M", offsetof(moetune_lookup_config_t, group_m), 1},
    {"num_warps", offsetof(moetune_lookup_config_t, num_warps), 1},
    {"num_stages", offsetof(moetune_lookup_config_t, num_stages), 0},
};

static int parse_root(json_t *root, moetune_lookup_t **out, char *err, size_t errlen) {
    int rc = MOETUNE_LOOKUP_OK;
    moetune_lookup_t *t = NULL;
    if (!json_is_object(root)) {
        set_err(err, errlen, "the file is not a JSON object%s%s", NULL, NULL);
        rc = MOETUNE_LOOKUP_EINVAL;
        goto out;
    }
    /* vLLM's tuner writes a "triton_version" string beside the entries; vLLM ignores it
     * on load, and so does this reader. */
    json_t *tv = json_object_get(root, "triton_version");
    if (tv && !json_is_string(tv)) {
        set_err(err, errlen, "\"triton_version\" is not a string%s%s", NULL, NULL);
        rc = MOETUNE_LOOKUP_EINVAL;
        goto out;
    }
    if (json_object_size(root) == (tv ? 1u : 0u)) {
        set_err(err, errlen, "the file holds no entries%s%s", NULL, NULL);
        rc = MOETUNE_LOOKUP_EINVAL;
        goto out;
    }
    t = calloc(1, sizeof *t);
    if (t) t->entries = calloc(json_object_size(root), sizeof *t->entries);
    if (!t || !t->entries) {
        rc = MOETUNE_LOOKUP_ENOMEM;
        goto out;
    }
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (val == tv) {
            snprintf(t->triton_version, sizeof t->triton_version, "%s", json_string_value(tv));
            continue;
        }
        entry_t *e = &t->entries[t->n];
        e->key = parse_key(key);
        if (e->key == 0) {
            set_err(err, errlen, "key \"%s\" is not a positive integer batch size%s", key, NULL);
            rc = MOETUNE_LOOKUP_EINVAL;
            goto out;
        }
        if (!json_is_object(val)) {
            set_err(err, errlen, "entry \"%s\" is not an object%s", key, NULL);
            rc = MOETUNE_LOOKUP_EINVAL;
            goto out;
        }
        for (size_t i = 0; i < sizeof k_fields / sizeof k_fields[0]; i++) {
            json_t *f = json_object_get(val, k_fields[i].name);
            if (!f) {
                set_err(err, errlen, "entry \"%s\" lacks %s", key, k_fields[i].name);
                rc = MOETUNE_LOOKUP_EINVAL;
                goto out;
            }
            json_int_t v = json_is_integer(f) ? json_integer_value(f) : -1;
            if (!json_is_integer(f) || v < k_fields[i].min || v > 1048576) {
                set_err(err, errlen, "entry \"%s\": %s is not a valid integer", key, k_fields[i].name);
                rc = MOETUNE_LOOKUP_EINVAL;
                goto out;
            }
            *(int *)((char *)&e->cfg + k_fields[i].off) = (int)v;
        }
        t->n++;
    }
    qsort(t->entries, t->n, sizeof *t->entries, cmp_entry);
    for (size_t i = 1; i < t->n; i++) {
        if (t->entries[i].key == t->entries[i - 1].key) {
            char buf[16];
            snprintf(buf, sizeof buf, "%u", t->entries[i].key);
            set_err(err, errlen, "key %s appears twice%s", buf, NULL);
            rc = MOETUNE_LOOKUP_EINVAL;
            goto out;
        }
    }
    *out = t;
    t = NULL;
out:
    moetune_lookup_free(&t);
    return rc;
}

int moetune_lookup_parse(const char *text, size_t len, moetune_lookup_t **out, char *err, size_t errlen) {
    if (!text || !out) return MOETUNE_LOOKUP_EINVAL;
    *out = NULL;
    json_error_t jerr;
    /* REJECT_DUPLICATES: two entries for one batch size make the file ambiguous. */
    json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        char where[64];
        snprintf(where, sizeof where, "line %d", jerr.line);
        set_err(err, errlen, "not valid JSON (%s: %s)", where, jerr.text);
        return MOETUNE_LOOKUP_EINVAL;
    }
    int rc = parse_root(root, out, err, errlen);
    json_decref(root);
    return rc;
}

int moetune_lookup_load(const char *path, moetune_lookup_t **out, char *err, size_t errlen) {
    int rc = MOETUNE_LOOKUP_OK;
    char *buf = NULL;
    FILE *f = NULL;
    if (!path || !out) return MOETUNE_LOOKUP_EINVAL;
    *out = NULL;
    /* Without blocking, regular files only: a FIFO or a device would hold the caller
     * forever. (This library stands alone, so not through mt_open_regular.) */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        return MOETUNE_LOOKUP_EIO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        set_err(err, errlen, "%s: %s", path, "not a regular file");
        return MOETUNE_LOOKUP_EINVAL;
    }
    f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        return MOETUNE_LOOKUP_EIO;
    }
    size_t cap = 0, len = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > (64u << 20)) {
                set_err(err, errlen, "%s: file larger than 64 MiB%s", path, NULL);
                rc = MOETUNE_LOOKUP_EINVAL;
                goto out;
            }
            char *grown = realloc(buf, cap);
            if (!grown) {
                rc = MOETUNE_LOOKUP_ENOMEM;
                goto out;
            }
            buf = grown;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        set_err(err, errlen, "%s: %s", path, strerror(errno));
        rc = MOETUNE_LOOKUP_EIO;
        goto out;
    }
    rc = moetune_lookup_parse(buf, len, out, err, errlen);
out:
    free(buf);
    if (f) fclose(f);
    return rc;
}

int moetune_lookup_get(const moetune_lookup_t *t, uint32_t m, moetune_lookup_config_t *cfg, uint32_t *key) {
    if (!t || !cfg || t->n == 0) return MOETUNE_LOOKUP_EINVAL;
    /* Binary search for the first key >= m; the answer is it or its predecessor. */
    size_t lo = 0, hi = t->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (t->entries[mid].key < m)
            lo = mid + 1;
        else
            hi = mid;
    }
    size_t pick;
    if (lo == t->n) {
        pick = t->n - 1;
    } else if (t->entries[lo].key == m || lo == 0) {
        pick = lo;
    } else {
        uint64_t above = (uint64_t)t->entries[lo].key - m;
        uint64_t below = (uint64_t)m - t->entries[lo - 1].key;
        pick = below <= above ? lo - 1 : lo; /* a tie goes to the smaller key */
    }
    *cfg = t->entries[pick].cfg;
    if (key) *key = t->entries[pick].key;
    return MOETUNE_LOOKUP_OK;
}

const char *moetune_lookup_triton_version(const moetune_lookup_t *t) { return t ? t->triton_version : ""; }

size_t moetune_lookup_count(const moetune_lookup_t *t) { return t ? t->n : 0; }

uint32_t moetune_lookup_key(const moetune_lookup_t *t, size_t i) { return (t && i < t->n) ? t->entries[i].key : 0; }

void moetune_lookup_free(moetune_lookup_t **t) {
    if (!t || !*t) return;
    free((*t)->entries);
    free(*t);
    *t = NULL;
}
