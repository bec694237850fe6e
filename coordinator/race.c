/* race.c - the racing table. See race.h. */
#include "race.h"

#include <stdlib.h>
#include <string.h>

#include "mt.h"

typedef struct {
    uint64_t sweep_id, shape_id;
    uint32_t bs;
    double best_us;
} race_entry_t;

/* The entries in the order they were noted, and an open-addressing index over them (slot =
 * entry + 1, 0 = empty; a power of two at least twice the entries): a lookup is a hash and a
 * probe or two. A cluster sweep has about 600 keys and each Result, Job and Ack asks for up to
 * 18 of them; a scan per lookup was about 5 % of the coordinator's loop. */
struct race {
    race_entry_t *e;
    size_t n, cap;
    uint32_t *slot;
    size_t n_slot;
};

race_t *race_new(void) { return mt_calloc(1, sizeof(race_t)); }

void race_free(race_t **pr) {
    if (!pr || !*pr) return;
    free((*pr)->e);
    free((*pr)->slot);
    free(*pr);
    *pr = NULL;
}

static size_t hash(uint64_t sweep_id, uint64_t shape_id, uint32_t bs) {
    uint64_t h = sweep_id * 0x9E3779B97F4A7C15ull ^ shape_id * 0xC2B2AE3D27D4EB4Full ^ bs * 0x165667B19E3779F9ull;
    h ^= h >> 29;
    return (size_t)(h * 0xBF58476D1CE4E5B9ull >> 17);
}

/* The slot of the key: its entry's, or the empty one where it would go. */
static uint32_t *probe(const race_t *r, uint64_t sweep_id, uint64_t shape_id, uint32_t bs) {
    size_t mask = r->n_slot - 1;
    for (size_t i = hash(sweep_id, shape_id, bs) & mask;; i = (i + 1) & mask) {
        uint32_t *sl = &r->slot[i];
        if (!*sl) return sl;
        const race_entry_t *e = &r->e[*sl - 1];
        if (e->sweep_id == sweep_id && e->shape_id == shape_id && e->bs == bs) return sl;
    }
}

static race_entry_t *find(const race_t *r, uint64_t sweep_id, uint64_t shape_id, uint32_t bs) {
    if (!r->n_slot) return NULL;
    uint32_t *sl = probe(r, sweep_id, shape_id, bs);
    return *sl ? &r->e[*sl - 1] : NULL;
}

/* Rebuilds the index for n_slot slots (a power of two above twice the entries); in place, and
 * so without fail, for as many slots as it has. */
static mt_status_t reindex(race_t *r, size_t n_slot) {
    if (n_slot == r->n_slot) {
        memset(r->slot, 0, n_slot * sizeof *r->slot);
    } else {
        uint32_t *slot = mt_calloc(n_slot, sizeof *slot);
        if (!slot) return MT_NOMEM;
        free(r->slot);
        r->slot = slot;
        r->n_slot = n_slot;
    }
    for (size_t i = 0; i < r->n; i++) *probe(r, r->e[i].sweep_id, r->e[i].shape_id, r->e[i].bs) = (uint32_t)(i + 1);
    return MT_OK;
}

mt_status_t race_note(race_t *r, uint64_t sweep_id, uint64_t shape_id, uint32_t bs, double median_us) {
    if (!(median_us > 0)) return MT_OK;
    race_entry_t *e = find(r, sweep_id, shape_id, bs);
    if (e) {
        if (median_us < e->best_us) e->best_us = median_us;
        return MT_OK;
    }
    if (r->n >= UINT32_MAX - 1) return MT_NOMEM;
    if (2 * (r->n + 1) > r->n_slot && reindex(r, r->n_slot ? 2 * r->n_slot : 64)) return MT_NOMEM;
    if (mt_grow((void **)&r->e, &r->cap, r->n + 1, sizeof *r->e, 64) != MT_OK) return MT_NOMEM;
    r->e[r->n++] = (race_entry_t){sweep_id, shape_id, bs, median_us};
    *probe(r, sweep_id, shape_id, bs) = (uint32_t)r->n;
    return MT_OK;
}

double race_best(const race_t *r, uint64_t sweep_id, uint64_t shape_id, uint32_t bs) {
    const race_entry_t *e = r ? find(r, sweep_id, shape_id, bs) : NULL;
    return e ? e->best_us : 0.0;
}

double race_shape_top(const race_t *r, uint64_t sweep_id, uint64_t shape_id) {
    double top = 0.0;
    for (size_t i = 0; r && i < r->n; i++)
        if (r->e[i].sweep_id == sweep_id && r->e[i].shape_id == shape_id && r->e[i].best_us > top)
            top = r->e[i].best_us;
    return top;
}

void race_forget(race_t *r, uint64_t sweep_id) {
    size_t k = 0;
    for (size_t i = 0; i < r->n; i++)
        if (r->e[i].sweep_id != sweep_id) r->e[k++] = r->e[i];
    r->n = k;
    if (r->n_slot) reindex(r, r->n_slot); /* in place: cannot fail */
}

size_t race_size(const race_t *r) { return r ? r->n : 0; }
