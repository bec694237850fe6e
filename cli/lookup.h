/*
 * lookup.h - read a fused-MoE config file (the files moetune exports, the same format
 * SGLang and vLLM load) and pick the config for a batch size.
 *
 * A consumer library: it depends only on jansson and libc, so an engine can link it
 * without the rest of moetune. Functions return MOETUNE_LOOKUP_OK (0) or a negative
 * MOETUNE_LOOKUP_E* code with a one-line reason in the caller's buffer.
 *
 * Lookup rule (the engines' rule): the entry whose key equals M, else the entry whose
 * key is nearest to M; when two keys are equally near, the smaller key wins
 * (M = 3 with keys 2 and 4 picks 2).
 */
#ifndef MOETUNE_LOOKUP_H
#define MOETUNE_LOOKUP_H

#include <stddef.h>
#include <stdint.h>

enum {
    MOETUNE_LOOKUP_OK = 0,
    MOETUNE_LOOKUP_EINVAL = -5, /* not a valid config file; reason in err */
    MOETUNE_LOOKUP_EIO = -7,    /* the file cannot be read */
    MOETUNE_LOOKUP_ENOMEM = -4,
};

typedef struct {
    int block_m, block_n, block_k, group_m, num_warps, num_stages;
} moetune_lookup_config_t;

typedef struct moetune_lookup moetune_lookup_t;

/* Loads and validates the config file at path. The file must be a JSON object whose
 * keys are positive decimal integers (no sign, no leading zero) and whose values are
 * objects holding the integers BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M,
 * num_warps (all >= 1) and num_stages (>= 0); other fields of an entry are ignored,
 * and so is a top-level "triton_version" string (vLLM's tuner writes one).
 * On success *out is a new table the caller frees with moetune_lookup_free(). */
int moetune_lookup_load(const char *path, moetune_lookup_t **out, char *err, size_t errlen);

/* Same as moetune_lookup_load() on len bytes of JSON text in memory. */
int moetune_lookup_parse(const char *text, size_t len, moetune_lookup_t **out, char *err, size_t errlen);

/* Picks the entry for batch size m by the lookup rule above, copies it into *cfg and,
 * when key is not NULL, the chosen key into *key. Never fails on a loaded table (a
 * table always holds at least one entry); returns MOETUNE_LOOKUP_EINVAL on NULL args. */
int moetune_lookup_get(const moetune_lookup_t *table, uint32_t m, moetune_lookup_config_t *cfg, uint32_t *key);

/* Number of entries, and the i-th key in ascending order (0 <= i < count). */
size_t moetune_lookup_count(const moetune_lookup_t *table);
uint32_t moetune_lookup_key(const moetune_lookup_t *table, size_t i);

/* The file's top-level "triton_version" string (truncated to 63 bytes), "" when it
 * has none. */
const char *moetune_lookup_triton_version(const moetune_lookup_t *table);

/* Releases a table and nulls *table. NULL-safe. */
void moetune_lookup_free(moetune_lookup_t **table);

#endif
