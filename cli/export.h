/*
 * export.h - write the tuned config files (docs/design.md, "Config files") from the store.
 *
 * Per (export dir, device name, shape) one file
 *   OUT/<dir>/E={E},N={N},device_name={name, spaces→_}[,dtype=..][,block_shape=[n, k]].json
 * where dir is the results' compiler ("cuda_13_0") or "sim" for the sim backend. Each
 * entry is the lowest-median ok result for that batch size (ties: lower config id).
 * A manifest.json beside the files records where every entry came from.
 *
 * An existing file is never silently overwritten: entries that differ are reported
 * ("M: old -> new", with both latencies) through the changes stream and counted;
 * entries of the old file for batch sizes the store has no result for are kept; a file
 * whose entries all match is left untouched. An existing file is read with the lookup
 * library's parser (lookup.h: one definition of a valid file). Files are written
 * atomically (temp file + rename), and every file written or left unchanged is
 * recorded in the exports table (db/exports.h).
 *
 * Honest exports. Nothing is written until every file is planned, so a refusal writes
 * nothing. Refused, each with a one-line reason (MT_INVAL):
 *   - a result row with a batch size outside 1..2^32-1, or a median that is not a
 *     positive finite number, or a negative or non-finite min, deviation, up or down;
 *   - a file whose sweeps are not all done, or whose device did not measure every
 *     planned config of its shape at every batch size (a mixed fleet splits a sweep):
 *     unless partial, and then the file's manifest record ("coverage") and report
 *     (exp_file_t.partial, .coverage) say per batch size how many planned configs
 *     were measured;
 *   - two shapes (E, N equal; K, topk, ... not) in one file name, within one export
 *     or against the shape the existing file's manifest record names;
 *   - one file from results of different kernel sources (kernel_hash) or, with an
 *     engine, Triton builds or versions;
 *   - an entry replaced by a config measured slower than the entry's recorded latency
 *     (manifest), unless force;
 *   - with one_sweep, results of more than one sweep in the selection.
 * An export holds an exclusive lock (flock) on out_dir from the first read of its
 * files to the last write, so concurrent exports into one folder run one after the
 * other and no manifest record is lost. SIGXFSZ is ignored while writing, so a file
 * size limit is an error (EFBIG) like a full disk.
 *
 * Files and manifests land together. Every new text is written to a synced temp file
 * ("NAME.tmp.PID") first; a failure there (a full disk) removes them and leaves the
 * folder as it was. Then OUT/.moetune-export.journal lists the renames, and the renames
 * run (files before manifests). An export that dies after the journal is completed by
 * the next export into the folder before it reads anything (exp_report_t.recovered);
 * temp files of exports that died before it are removed. No file is written over the
 * database, its -wal, -shm or lock file; a read-only database is refused before any
 * file is written (the export could not be recorded). A device name with a control
 * character, ',' or '=' (the engines' separators), or longer than a result row holds, is
 * refused: file names are never cut.
 *
 * Entries kept from an existing file keep their provenance: their sweep (from the
 * previous manifest record) joins the record's sweep_ids and its coverage, and the
 * file is complete only when every sweep it now holds entries of was complete; an
 * entry whose sweep the previous record does not name makes the file partial.
 *
 * With an engine (exp_opts_t.engine), only results of the triton backend are exported,
 * laid out and named the way that engine finds them (docs/engines.md):
 *
 *   sglang  OUT/configs/<compiler>/E=..,N=..,device_name=<name, spaces→_>[,dtype=..]
 *           [,block_shape=[n, k]].json, so SGLANG_MOE_CONFIG_DIR=OUT finds them; the
 *           device name is not normalised (NVIDIA_H200_NVL stays).
 *   vllm    OUT/E=..,N=..,device_name=..[,dtype=..][,block_shape=[n,k]].json, flat, for
 *           VLLM_TUNED_CONFIG_FOLDER=OUT; a device name with the token H200 is written
 *           NVIDIA_H200; the file starts with "triton_version" as vLLM's tuner writes it.
 *
 * Up and down (sglang only). When every batch size of a file has results with both
 * GEMMs timed alone (results.up_us, down_us), a second file <name>_down.json is
 * written for the engine's second GEMM. Per batch size the exporter takes the pair
 * (up config, down config) with the lowest up_us + down_us among pairs whose
 * BLOCK_SIZE_M agree (both GEMMs share one align sort; the engine forces a mismatch);
 * the up config is the lowest up_us with that BLOCK_SIZE_M, the down config the lowest
 * down_us. The main file's entry is then the pair's up config, not the best whole-layer
 * config, because the engine runs the first GEMM with the main file and the second with
 * _down: together they give the lowest sum. The manifest records, per batch size, the
 * whole-layer best (its median and, when measured, its own up + down) beside the pair's
 * up, down and sum, so what the split buys is visible. Without split timings for every
 * batch size, no _down file is written and each entry is the best whole-layer config.
 *
 * One file holds results of one Triton version, kernel hash and versions string
 * (kernel, torch, python, engine) only: two such groups that would write one path are
 * refused, naming both, as is a file whose manifest record says it came from other
 * versions, and a vLLM file whose triton_version differs. Each manifest record gains
 * engine, kernel, versions, triton_version and, for sglang, the _down file and the
 * rule its entries follow. The manifest lies beside the files (OUT/configs/<compiler>/
 * for sglang, OUT/ for vllm).
 */
#ifndef EXP_EXPORT_H
#define EXP_EXPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "export_layout.h"
#include "mt.h"
#include "query.h"
#include "space.h"

typedef struct exp_opts_s {
    const char *db_path;       /* the store; read-only, plus one short write to `exports` */
    const char *out_dir;       /* created when missing */
    uint64_t sweep_id;         /* this sweep only; 0 = sweep_ids, or every sweep when none */
    FILE *changes;             /* where "changed entry" lines go; NULL = nowhere */
    exp_engine_t engine;       /* EXP_ENGINE_NONE: OUT/<compiler>/name.json */
    const uint64_t *sweep_ids; /* with sweep_id 0: only these sweeps (n_sweep_ids > 0) */
    size_t n_sweep_ids;
    bool latest;    /* per file, only the newest selected sweep that measured it */
    bool one_sweep; /* refuse when the selection holds results of several sweeps */
    bool partial;   /* write files of unfinished or incompletely covered sweeps */
    bool force;     /* replace entries by configs measured slower */
} exp_opts_t;

typedef enum { EXP_NEW, EXP_CHANGED, EXP_UNCHANGED } exp_state_t;

typedef struct {
    char path[512];   /* relative to out_dir, e.g. "sim/E=128,N=768,device_name=NVIDIA_H200.json" */
    uint32_t entries; /* entries in the file as it now is */
    uint32_t changed; /* entries that differ from the file it replaced (all, when new) */
    exp_state_t state;
    int simulated;
    bool partial;       /* not every planned config measured, or a sweep not done */
    char coverage[512]; /* per batch size "measured/planned", for partial files */
    uint32_t sample;    /* the picks come from a sample of at most this many configs per shape
                         * (--sample; the manifest's coverage says so too); 0 = the whole space */
    char guard[400];    /* what the file buys over the engine's default and the incumbent, one line
                         * (shipguard.h); "" when nothing was guarded */
} exp_file_t;

typedef struct {
    exp_file_t *files;
    size_t n_files;
    uint32_t recovered; /* files of an export that died mid-commit, put in place first */
} exp_report_t;

/* Exports as described above and fills report (caller clears it with
 * exp_report_clear, also after an error: it lists files only when they were all
 * written, i.e. when only recording them in the database failed). Returns MT_OK;
 * MT_NOTFOUND when there is no ok result to export; MT_INVAL for a refusal above, an
 * existing file that is not a config file or a manifest that is not JSON, a damaged
 * journal, or an engine export that meets results of another backend; MT_BUSY when
 * another export held out_dir's lock for over a minute; MT_IO/MT_ERR on disk or
 * database errors; the reason is in err. */
mt_status_t exp_run(const exp_opts_t *opts, exp_report_t *report, char *err, size_t errlen);

/* Frees the report's files and zeroes it. */
void exp_report_clear(exp_report_t *report);

/* Name of a state: "new", "changed", "unchanged". */
const char *exp_state_name(exp_state_t state);

/* Near ties. A winner's margin over its runner-up (the best ok row of another config
 * in the same file and batch size) in units of measured deviation:
 * (runner_up - best) / sqrt(sd_best^2 + sd_runner_up^2). Under EXP_NEAR_TIE_SD the
 * two differ by less than their samples' own spread: the pick is within noise, and a
 * second run may pick the other. The manifest records, per entry, the runner-up, the
 * margin ("margin_sd", null when neither row has a deviation and the medians differ)
 * and "near_tie"; each record lists its near-tie batch sizes ("near_ties"). */
#define EXP_NEAR_TIE_SD MT_NEAR_TIE_SD
/* The margin of best over runner_up as above: 0 for equal medians, INFINITY when the
 * medians differ and neither row has a deviation. */
double exp_margin_sd(double best_us, double best_sd, double ru_us, double ru_sd);

/* Called per (export dir, device name, shape, batch size) with the row an export takes
 * (lowest median, ties to the lower config id) and its runner-up (NULL when no other
 * config has an ok row). Both are copies valid during the call. Returns an
 * MT_* status; one other than MT_OK stops the walk. */
typedef mt_status_t (*exp_pair_fn)(void *ctx, const dbq_result_t *best, const dbq_result_t *runner_up);
typedef struct shipguard shipguard_t; /* shipguard.h */
/* Walks the ok rows of the selected sweeps (sel NULL = all) as an export reads them and
 * calls fn per (dir, device, shape, batch size), in the export's order; with guard, the rows
 * shipguard_candidate refuses are left out. Returns MT_OK,
 * the error fn stopped the walk with, MT_NOMEM, or the query's error with its text in err. */
mt_status_t exp_pairs(dbq_t *q, const dbq_select_t *sel, const shipguard_t *guard, exp_pair_fn fn, void *ctx, char *err,
                      size_t errlen);

#endif
