/*
 * spec.h - build a sweep spec (Moetune__SweepSpec) from command-line flags and/or a
 * JSON spec file, validating every value with a one-line reason.
 *
 * Options are named like the flags without "--" ("shape", "batch-sizes", "block-m",
 * ...); the JSON file uses the same names with '_' for '-' ("batch_sizes") plus
 * "shapes", "models" and "space" objects (see cli_spec_parse_json).
 */
#ifndef CLI_SPEC_H
#define CLI_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#include "moetune.pb-c.h"
#include "mt.h"
#include "shipguard.h"
#include "space.h"

#define CLI_SPEC_MAX_SHAPES 64
#define CLI_SPEC_MAX_BATCH 256

typedef struct cli_spec cli_spec_t;

/* One spec option, for the CLI's help text. */
typedef struct {
    const char *name;    /* flag without "--" */
    const char *metavar; /* NULL for none */
    const char *help;
} cli_spec_opt_t;

/* The i-th spec option in help order; NULL past the last. */
const cli_spec_opt_t *cli_spec_opt_at(size_t i);

/* New empty spec; NULL on allocation failure. Caller frees with cli_spec_destroy. */
cli_spec_t *cli_spec_new(void);
/* Releases a spec and nulls *spec. NULL-safe. */
void cli_spec_destroy(cli_spec_t **spec);

/* True when name is a spec option. */
bool cli_spec_knows(const char *name);

/* Applies one option. "shape", "model" and "model-config" add to what is there; a list
 * option replaces the list; "spec" loads a JSON file. Returns MT_OK, MT_INVAL with a
 * reason naming the option on a bad value, MT_NOTFOUND for an unknown option. */
mt_status_t cli_spec_set(cli_spec_t *spec, const char *name, const char *value, char *err, size_t errlen);

/* Applies a JSON spec document: an object with any of "name", "shapes" (array of shape
 * strings or objects {"E","N","K","topk"[,"dtype"][,"block_shape":[n,k]]}), "models"
 * (array of names or objects {"name","tp","ep"}), "model_configs" (array of paths),
 * "tp", "ep", "dtype", "batch_sizes", "space" ({"block_m": [...], ...}), "strategy",
 * "device_filter", "chunk", "max_attempts", "measure" ({"warmup", "min_samples",
 * "max_samples", "rsd_target", "budget_ms", "timeout_ms", "seed", "race_margin"}). Unknown keys are
 * errors. */
mt_status_t cli_spec_parse_json(cli_spec_t *spec, const char *text, size_t len, char *err, size_t errlen);
mt_status_t cli_spec_load_json(cli_spec_t *spec, const char *path, char *err, size_t errlen);

/* Resolves models into shapes, checks the whole spec (at least one shape, min_samples
 * <= max_samples, ...) and assembles the message. With fill_defaults, empty fields get
 * the planner's defaults explicitly (18 batch sizes, default space, chunk 16,
 * exhaustive, 3 attempts), so the same command always produces the same spec. Either
 * way, a space with only some lists given gets the default for the others, and an
 * empty name gets one derived from the shapes. Call once, after every set. */
mt_status_t cli_spec_finish(cli_spec_t *spec, bool fill_defaults, char *err, size_t errlen);

/* True when a finished spec takes its ship guard's incumbent from the engine: the guard is on
 * and no --baseline was given. */
bool cli_spec_engine_incumbent_wanted(const cli_spec_t *spec);

/* When cli_spec_engine_incumbent_wanted: the incumbent files of the engine's config folder
 * e->dir go into the finished spec (cli_guard_engine_folder, its lines into say); else
 * nothing. MT_OK or MT_NOMEM. */
mt_status_t cli_spec_engine_incumbent(cli_spec_t *spec, const cli_guard_engine_t *e, FILE *say);

/* The assembled message (valid after cli_spec_finish, owned by spec). */
const Moetune__SweepSpec *cli_spec_get(const cli_spec_t *spec);

/* True when two specs name the same sweep target (name, worker backend and shapes, in
 * order), whatever their settings: the candidates for a resume or a reuse. */
bool cli_spec_same_target(const Moetune__SweepSpec *a, const Moetune__SweepSpec *b);

/* Compares the work of a stored spec (was) and a new one (now) after the planner has
 * expanded both: defaults filled by the planner, so a zero or absent field is the
 * default and never a wildcard; batch sizes, space, chunk, attempts, every measurement
 * setting, strategy, device filter and the configs the static rules accept. Sets *same;
 * the differences go into diff as "field A, now B" joined by "; ". MT_INVAL (reason in
 * diff) when either spec does not plan. */
mt_status_t cli_spec_compare(const Moetune__SweepSpec *was, const Moetune__SweepSpec *now, bool *same, char *diff,
                             size_t len);

#endif
