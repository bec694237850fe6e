/*
 * guard.h - the ship guard: what the engine runs without the sweep's file, measured beside
 * the finalists.
 *
 * A tuned file helps only where its config beats what the engine would run without it: the
 * engine's default config for that batch size (get_default_config in SGLang's and vLLM's
 * fused-MoE code, by dtype and block shape) and the entry of the file it would otherwise
 * load (the incumbent: a bundled file, another Triton version's, or one given with
 * `--baseline`; the key nearest to M). In a sweep's last side-by-side step (racing's decide
 * step, halving's phase 2) the guard adds, at every batch size, those configs and the
 * batch size's best to the phase-2 job, whatever the search space (the bf16 default's
 * BLOCK_SIZE_K 32 is outside the default space), and records each in the `guard` table
 * (role, engine, whether it was searched, where it came from), so that export can ship the
 * guard's config where the pick does not beat it by more than the noise. A `--configs`
 * re-measure gets them in its one job (guard_plan_listed). Once a shape's phase 2 is over, the
 * batch sizes where the engine's nearest-key rule switches between two keys' entries are checked
 * too, in rounds (guard_gaps_advance). SweepSpec.no_guard turns all of it off.
 */
#ifndef COORD_GUARD_H
#define COORD_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "halving.h"
#include "planner.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "space.h"
#include "store.h"

/* Triton's launch defaults, which the engines' bf16 defaults leave to it. */
#define GUARD_TRITON_WARPS 4
#define GUARD_TRITON_STAGES 3
/* Guard configs a batch size can have: a default and an incumbent per engine, and vLLM's
 * newer default beside its classic one. */
#define GUARD_MAX 6

/* Pure: the default config engine ("sglang", "vllm": the rule of vLLM up to its 0.12 era, or
 * "vllm-2026": its newer heuristic by M) runs at batch size m for shape, and
 * the rule's name in *rule (static text, e.g. "sglang get_default_config, M <= E");
 * MT_INVAL for an unknown engine. A field the rule leaves out is Triton's launch default. */
mt_status_t guard_default_config(const char *engine, const krn_shape_t *shape, uint32_t m, krn_config_t *out,
                                 const char **rule);

/* Pure: the default rules engine ("sglang", "vllm") may run, for guard_default_config: its own,
 * and for vLLM also "vllm-2026" (which one runs depends on the vLLM release). Fills rules (at
 * most 2) and returns how many; 0 for an unknown engine. */
size_t guard_default_rules(const char *engine, const char *rules[2]);

/* Pure: the key of keys[0..n) (any order) nearest to m, the smaller of two equally near
 * (the engines' rule); 0 when n is 0. */
uint32_t guard_nearest_key(const uint32_t *keys, size_t n, uint32_t m);

/* Pure: the engines whose files a sweep of spec is for: its engines, else both for the
 * triton backend, else SGLang's (whose layout the other backends' files follow). Fills
 * names (at most 2) and returns how many. */
size_t guard_engines(const Moetune__SweepSpec *spec, const char *names[2]);

/* What the guard added to one shape's phase 2. */
typedef struct {
    uint32_t rows;      /* guard (config, batch size) rows recorded */
    uint32_t new_rows;  /* of which, result rows outside the searched space: results_planned grows */
    uint32_t finalists; /* rows made finalists (a best alone, a guard config) */
} guard_step_t;

/* Inside the caller's open transaction (halving_advance): for every batch size bs[0..nb) of
 * (sweep, shape), records the guard rows, stores their configs, and marks in *rows (n rows,
 * capacity *cap, as halving_choose left them) the configs to measure side by side: each
 * guard config (a row added where the config has none, device 0, median 0) and, where a
 * guard config differs from it, the batch size's best. Rows are then sorted by batch size,
 * guard configs first (the first phase-2 job of a batch size holds them), then as ranked.
 * MT_IO/MT_BUSY with store_errmsg(db), MT_NOMEM; a spec that does not unpack is MT_INVAL. */
mt_status_t guard_advance(store_t *db, uint64_t sweep_id, uint64_t shape_id, const uint32_t *bs, size_t nb,
                          halving_row_t **rows, size_t *n, size_t *cap, guard_step_t *out);

/* A listed space (Space.configs: a `--configs` re-measure, one side-by-side job per shape):
 * appends to each shape's valid configs of plan p (built from spec) the guard's configs of
 * every batch size that the list lacks, so the one job measures them beside the listed ones
 * at every batch size, and counts them into the plan (configs_valid, results_planned, the
 * chunk: still one job a shape). Nothing for another space or with no_guard. MT_NOMEM. */
mt_status_t guard_plan_listed(const Moetune__SweepSpec *spec, plan_t *p);

/* Inside plan_write's transaction, after the shapes' configs have ids: the guard rows of a
 * listed space's plan (as guard_plan_listed extended it), searched where the list holds the
 * config. MT_IO/MT_BUSY with store_errmsg(db), MT_NOMEM. */
mt_status_t guard_write_listed(store_t *db, const Moetune__SweepSpec *spec, const plan_t *p, uint64_t sweep_id);

/* The batch sizes between the keys. Once a shape's side-by-side step is over (inside the
 * caller's transaction; halving_advance calls it for a shape whose phase 2 is planned): for each
 * pair of neighbouring batch sizes k1 < k2 (unless both picks are one config and no guard config
 * differs from it), at the batch sizes where the engine's nearest-key rule switches from one to
 * the other (mid = k1 + (k2 - k1) / 2 takes k1's entry, mid + 1 takes k2's; only those strictly
 * between), one phase-2 job of that batch size measures side by side every config either
 * neighbour could ship (its searched pick, the defaults and incumbent entry at M = that key) and
 * the defaults and incumbent there; guard rows "nearest" and "other" say whose each is. Export
 * adds such a batch size as a key only where the entry the file ships at the nearest key loses
 * by more than the noise. A later call (the round's jobs done) predicts from the measurements the
 * file export writes and plans its switch points not yet measured, those that added keys moved,
 * for at most GUARD_GAP_ROUNDS rounds in all; out->already when nothing is left to plan.
 * results_planned grows by the rows planned. MT_IO/MT_BUSY with store_errmsg(db), MT_NOMEM. */
mt_status_t guard_gaps_advance(store_t *db, uint64_t sweep_id, uint64_t shape_id, const uint32_t *bs, size_t nb,
                               int64_t now_s, halving_step_t *out);

/* Parses the batch size of a job between the keys ("80": one, 1..PLAN_MAX_BATCH) into a new
 * array (*out, caller frees) of *n = 1; MT_INVAL for anything else. */
mt_status_t guard_gap_bs_parse(const char *text, uint32_t **out, size_t *n);

#endif
