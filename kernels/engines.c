/* engines.c - the engine table of engines.h, from KRN_ENGINES. */
#include "engines.h"

#include <assert.h>
#include <string.h>

static const krn_engine_t engines[KRN_ENGINE_COUNT] = {
#define KRN_ENGINE_ROW(id, name, display, env) {KRN_ENGINE_##id, name, display, env},
    KRN_ENGINES(KRN_ENGINE_ROW)
#undef KRN_ENGINE_ROW
};

const krn_engine_t *krn_engine_find(const char *name) {
    if (!name) return NULL;
    for (size_t i = 0; i < KRN_ENGINE_COUNT; i++)
        if (strcmp(engines[i].name, name) == 0) return &engines[i];
    return NULL;
}

const krn_engine_t *krn_engine_get(krn_engine_id_t id) {
    assert(id < KRN_ENGINE_COUNT);
    return &engines[id];
}

/* The engine named by list[0..len), or NULL. */
static const krn_engine_t *find_n(const char *list, size_t len) {
    for (size_t i = 0; i < KRN_ENGINE_COUNT; i++)
        if (strlen(engines[i].name) == len && memcmp(engines[i].name, list, len) == 0) return &engines[i];
    return NULL;
}

bool krn_engines_valid(const char *list) {
    bool seen[KRN_ENGINE_COUNT] = {false};
    if (!list || !*list) return false;
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        const krn_engine_t *e = find_n(p, len);
        if (!e || seen[e->id]) return false;
        seen[e->id] = true;
        p += len;
        if (!*p) return true;
    }
}

bool krn_engines_has(const char *list, const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (!list || !n) return false;
    for (const char *p = list;; p++) {
        size_t len = strcspn(p, ",");
        if (len == n && memcmp(p, name, n) == 0) return true;
        p += len;
        if (!*p) return false;
    }
}
