/*
 * shipguard.h - the ship guard's CLI side: the incumbent files a sweep is guarded against
 * (`--baseline FILE|DIR`), and export's rule that never ships a config slower than what
 * the engine runs without the file (coordinator/guard.h measures those side by side).
 *
 * Incumbents. `--baseline FILE` is a config file (the engines' format, read with the lookup
 * library): its name's E, N, dtype and block shape say which of the sweep's shapes it is for
 * (a name that says none fits a sweep of one shape). `--baseline DIR` is an engine's config
 * folder: the file for each shape is looked up there as the engine looks it up
 * (cli_guard_bundled_find). Every entry goes into SweepSpec.incumbents; the coordinator
 * measures, at each batch size, the entry of the key nearest to it.
 */
#ifndef CLI_SHIPGUARD_H
#define CLI_SHIPGUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "export.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "query.h"
#include "space.h"

typedef struct cli_guard cli_guard_t;

/* A new, empty set of baselines; NULL when out of memory. */
cli_guard_t *cli_guard_new(void);
/* Releases g and what its incumbents hold; NULL-safe, nulls *g. */
void cli_guard_destroy(cli_guard_t **g);

/* Keeps path (a file or an engine's config folder) for cli_guard_resolve; MT_INVAL when
 * more than CLI_GUARD_MAX_BASELINES are given. */
#define CLI_GUARD_MAX_BASELINES 8
mt_status_t cli_guard_add_baseline(cli_guard_t *g, const char *path, char *err, size_t errlen);

/* Reads every baseline for shapes[0..n) and fills spec's incumbents (owned by g, valid
 * while g lives). device: the GPU name the folder lookup wants (NULL: the one device a
 * folder has a file for). MT_INVAL with a one-line reason naming the path: a file that is
 * not a config file, whose name names none of the shapes, a folder with no file for a shape
 * or files of several devices; MT_NOMEM. */
mt_status_t cli_guard_resolve(cli_guard_t *g, Moetune__SweepSpec *spec, const krn_shape_t *shapes, size_t n,
                              const char *device, char *err, size_t errlen);

/* True when two specs hold the same incumbent entries (shape, key, config, engine; the file
 * they came from aside), in the same order. */
bool cli_guard_same_incumbents(const Moetune__SweepSpec *a, const Moetune__SweepSpec *b);

/* The file an engine loads for shape from its config folder dir (a package's or the
 * folder its variable names): SGLang's DIR[/configs]/triton_X_Y_Z/<name> for triton
 * ("3.6.0"; NULL or "": none known) or else the newest other triton_* folder holding the
 * file (its fallback); vLLM's DIR[/configs]/<name>. device NULL: the one device whose
 * file for the shape the folder holds. MT_OK with the path in path; MT_NOTFOUND when
 * there is none; MT_INVAL with the reason in err when several devices' files fit. This is
 * the one function that a probe of the engine's interpreter (its config_dir, Triton
 * version and device) feeds. */
mt_status_t cli_guard_bundled_find(const char *dir, exp_engine_t engine, const char *triton, const char *device,
                                   const krn_shape_t *shape, char *path, size_t len, char *err, size_t errlen);

/* An engine's config folder as the interpreter that serves reports it (its probe). */
typedef struct {
    exp_engine_t engine;
    const char *dir;    /* its package's config folder ("" or NULL: none found) */
    const char *triton; /* the interpreter's Triton version ("3.6.0") */
    const char *device; /* the GPU it sees; NULL: the one device the folder has a file for */
    const char *who;    /* how lines name it: "sglang 0.6.0 in /usr/bin/python3" */
    const char *why;    /* with no dir: why ("sglang is not installed in python3") */
} cli_guard_engine_t;

/* For a sweep given no --baseline: per shape of shapes[0..n), the file the engine loads from
 * e->dir (cli_guard_bundled_find for e's Triton version and device, as --baseline DIR), its
 * entries added to spec's incumbents for e's engine. Writes one line per shape into say: the
 * file and whether it is the engine's own for this Triton version or another version's that
 * it falls back to, or that there is none (no folder, no file, one that does not load): then
 * the engine's default alone guards it. Where it ships no file for the shape on e's GPU, its file
 * for the shape on another GPU, else for the nearest shape (same dtype and block shape), goes into
 * spec's warm_files (the warm start's known picks, never an incumbent), said in one line. MT_OK,
 * or MT_NOMEM. */
mt_status_t cli_guard_engine_folder(cli_guard_t *g, Moetune__SweepSpec *spec, const krn_shape_t *shapes, size_t n,
                                    const cli_guard_engine_t *e, FILE *say);

/* ---- export's rule */

/* The guard rows an export reads and what it decided per entry. */
typedef struct shipguard shipguard_t;

/* Loads the guard rows of the selected sweeps for engine (EXP_ENGINE_NONE: SGLang's, whose
 * layout the plain files follow) into a new *out. MT_OK (none: an empty guard), MT_NOMEM,
 * or the query's error with its text in err. */
mt_status_t shipguard_load(dbq_t *q, const dbq_select_t *sel, exp_engine_t engine, shipguard_t **out, char *err,
                           size_t errlen);
/* As shipguard_load, the rows of every engine (for listing them). */
mt_status_t shipguard_load_all(dbq_t *q, const dbq_select_t *sel, shipguard_t **out, char *err, size_t errlen);
/* Releases g; NULL-safe, nulls *g. */
void shipguard_free(shipguard_t **g);

/* The rule. Of the best row of a file's batch size (best: the pick) and the guard's rows
 * measured there on the same device, the row to ship: the incumbent's where the pick does
 * not beat it by more than the noise (exp_margin_sd under EXP_NEAR_TIE_SD, or not faster),
 * else the default's on the same terms, else best. A batch size between two keys (guard rows
 * "nearest"): NULL, no entry, unless best beats the entry the engine takes there (the config
 * the file ships at the nearest key, measured there) by more than the noise; then the key is
 * added, by the same rule; NULL too where that entry was not measured there. The row returned is best or one g owns
 * (valid while g lives); the decision is kept for shipguard_entry. g NULL: best. */
/* Whether row r may be a batch size's best (the searched pick): false for a config measured only
 * because of the guard (outside the searched space) except at a batch size where it is the
 * guard's own default or incumbent config. g NULL: true. */
bool shipguard_candidate(const shipguard_t *g, const dbq_result_t *r);
/* The order in which shipguard_ship must decide r's batch size, 0..SHIPGUARD_DEPTHS-1: 0 for a
 * key of the sweep, 1 + the depth of the key whose entry the engine takes there for a batch size
 * between two keys (the guard's "nearest" rows), since there the file's own entry at that key,
 * itself perhaps added between two keys, is what the engine runs. g NULL: 0. */
#define SHIPGUARD_DEPTHS 8
size_t shipguard_depth(const shipguard_t *g, const dbq_result_t *r);
const dbq_result_t *shipguard_ship(shipguard_t *g, const dbq_result_t *best);

/* Decides each best row of n, the k-th at (const char *)rows + k * stride, by shipguard_ship in
 * the order it must (shipguard_depth, each row's computed once: the keys first), and calls
 * done(ctx, k, ship) with its answer. MT_OK, or MT_NOMEM with nothing decided. */
mt_status_t shipguard_ship_each(shipguard_t *g, const void *rows, size_t n, size_t stride,
                                void (*done)(void *ctx, size_t k, const dbq_result_t *ship), void *ctx);

/* SGLang's up/down pair, whole layers. For a split file whose pair's up + down is pair_sum
 * at best's batch size: the guard row (the incumbent's first, then the default's) whose own
 * up + down, both timed on best's device, does not exceed it beyond that row's relative
 * deviation, to ship for both GEMMs; NULL when the pair wins or nothing was timed. Updates the
 * decision shipguard_ship made for best (it must have been asked first). */
const dbq_result_t *shipguard_layer(shipguard_t *g, const dbq_result_t *best, double pair_sum);

/* The guard role of a result row ("default" or "incumbent": the guard row of its sweep,
 * shape, batch size and config, for g's engine), or NULL when it is none. */
const char *shipguard_role(const shipguard_t *g, const dbq_result_t *r);

/* Adds to a manifest entry (json object e) of the shipped row its "guard": what was
 * shipped and why, and the default's and the incumbent's configs, medians and the speed-up
 * of the shipped config over each (median ratio and its deviation, both measured side by
 * side); counts it into the file summary. Nothing where no guard row is known. */
void shipguard_entry(shipguard_t *g, const dbq_result_t *shipped, json_t *e);

/* Adds the file summary to its manifest record rec ("guard") and writes the one-line form
 * into line ("1.00x-1.61x faster than the engine's default, 1.00x-1.04x faster than
 * triton_3_5_1's file"; "" when the file has no guard rows); then starts the next file. */
void shipguard_file(shipguard_t *g, json_t *rec, char *line, size_t len);

/* The one-line form of a file's "guard" summary as its manifest record holds it (what
 * shipguard_file writes into line); "" when guard is NULL. doctor reads it back this way. */
void shipguard_line(const json_t *guard, char *line, size_t len);

/* ---- what the rule did to a sweep (diff, history, the nightly submit) */

typedef struct {
    bool guarded;               /* the sweep has guard rows */
    uint32_t keys_added;        /* batch sizes between two keys that become keys */
    uint32_t default_shipped;   /* batch sizes where the engine's default's config is shipped */
    uint32_t incumbent_shipped; /* ... the incumbent's */
} shipguard_counts_t;

/* Keeps of g (loaded with shipguard_load_all) one engine's guard rows for counting: SGLang's,
 * else vLLM's, as shipguard_load would have; false when none are left. */
bool shipguard_count_engine(shipguard_t *g);

/* Counts into c (c->guarded set) what export's rule (shipguard_ship, per batch size) does to a
 * sweep's n cell picks best (as exp_pairs finds them, keys first) that match only (NULL: all;
 * zero and "" fields match anything). guard_counts.h runs the whole count for a sweep. */
mt_status_t shipguard_count_picks(shipguard_t *g, const dbq_result_t *best, size_t n, const dbq_hist_filter_t *only,
                                  shipguard_counts_t *c);

/* "2 keys added, the default's config shipped at 1 batch size, the incumbent's at 0", or
 * "none (no default or incumbent measured)" for a sweep without the guard. */
void shipguard_counts_text(const shipguard_counts_t *c, char *buf, size_t len);

/* {"keys_added": n, "default_shipped": n, "incumbent_shipped": n}, or JSON null without the
 * guard; caller owns the reference. */
json_t *shipguard_counts_json(const shipguard_counts_t *c);

#endif
