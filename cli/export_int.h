/* export_int.h - what the export's files share: an export's state and the steps each file
 * gives those above it. From the bottom: export_commit.c (the folder: lock, manifests,
 * commit), export_plan.c (rows, near ties, planning a file), export_engine.c (the engine
 * layouts), export.c (exp_run and the plain layout). Callers use export.h. */
#ifndef EXP_EXPORT_INT_H
#define EXP_EXPORT_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "export.h"
#include "mt.h"
#include "query.h"
#include "shipguard.h"
#include "space.h"

#define MAX_FILE_SWEEPS 16
#define LOCK_WAIT_MS 60000
/* The list of renames an export has committed to, in out_dir while they run (see commit). */
#define JOURNAL ".moetune-export.journal"

typedef struct {
    dbq_result_t *rows;
    dbq_result_t *ru; /* per row, its runner-up (config_id 0: none) */
    size_t n, cap;
    char bad[400]; /* why a row was refused */
} rowvec_t;

/* One entry of a file being written: from a result row, or kept from the old file. */
typedef struct {
    uint32_t bs;
    krn_config_t cfg;
    const dbq_result_t *row; /* NULL when kept from the previous file */
    double cost;             /* what "slower" compares: median, or up + down for a split pair */
    bool split;
    const dbq_result_t *ru; /* the best ok row of another config at this batch size, or NULL */
} entry_t;

/* What exports gets per file. */
typedef struct {
    uint64_t shape_id;
    char dir[48];
    char sweep_ids[256];
    char hash[17];
} file_meta_t;

/* A file planned: nothing is written until every file is planned. */
typedef struct {
    char mdir[1024]; /* folder of the file and its manifest */
    char name[420];  /* file name: the manifest key */
    char *text;      /* new body; NULL when the file is left as it is */
    json_t *rec;     /* its manifest record */
    char *changes;   /* "path: batch size M: old -> new" lines, shown once written */
    exp_file_t f;
    file_meta_t meta;
    bool done;
} pend_t;

/* A manifest being rebuilt: one per folder. */
typedef struct {
    char dir[1024];
    json_t *m;
} mdir_t;

/* One export's state, from the selection to the last write. */
typedef struct {
    const exp_opts_t *o;
    dbq_select_t sel;
    uint64_t one_id;
    dbq_coverage_t *cov;
    size_t n_cov, cap_cov;
    struct sampled {
        uint64_t sweep_id;
        uint32_t sample; /* the spec's Space.sample: configs kept per shape */
        char *warm;      /* the spec's warm_start: what its start came from (owned); NULL = none */
    } * sampled;
    size_t n_sampled, cap_sampled;
    mdir_t *dirs;
    size_t n_dirs;
    pend_t *pend;
    size_t n_pend, cap_pend;
    int lock_fd;
    uint32_t recovered; /* renames of an interrupted export completed first */
    shipguard_t *guard; /* the ship guard's rows and decisions (shipguard.h) */
} run_t;

/* ---- export_plan.c */

/* Refuses a file whose coverage is incomplete, unless partial (DB only: runs before
 * anything is created). */
int exp_check_coverage(const run_t *x, const dbq_result_t *first, const entry_t *ents, size_t n, const char *rel,
                       char *err, size_t errlen);
/* MT_OK for a device name an export can put into a file name as it is; else MT_INVAL:
 * a name cut when read, a control character, ',' or '=' (the engines' file names
 * separate their fields with them: "NVIDIA H200,dtype=fp8_w8a8" would name an fp8 file),
 * or bytes that are not UTF-8. */
int exp_check_device_name(const dbq_result_t *r, char *err, size_t errlen);
/* MT_OK for a directory name from the database that is one plain path component, else
 * MT_INVAL with the reason in err. */
int exp_check_dir_name(const char *s, char *err, size_t errlen);
/* Rows are data: a damaged or hand-written value is refused, never exported. */
int exp_check_row(const dbq_result_t *r, char *bad, size_t len);
/* The error of an export that selected no ok result: MT_NOTFOUND with the reason in err. */
int exp_no_results(const exp_opts_t *o, char *err, size_t errlen);
/* Plans one config file mdir/name (OUT/rel) holding new_ents[0, n) (sorted by batch
 * size) merged with the entries of the file it replaces, kept for batch sizes new_ents
 * lacks. tv, when not NULL, is written first as "triton_version" (vLLM's files);
 * versions (engine exports) must match the existing record's. Nothing is written: the
 * planned file goes to x->pend (*out). */
int exp_plan_file(run_t *x, const char *mdir, const char *name, const char *rel, const entry_t *new_ents, size_t n,
                  const char *tv, const char *versions, const dbq_result_t *first, pend_t **out, char *err,
                  size_t errlen);
/* A shape in words, with its captured routing when it has one: two shapes that differ only
 * there must not read alike. */
void exp_shape_text(const krn_shape_t *s, char *buf, size_t len);

/* ---- export_commit.c: the folder's lock, manifests and the commit of planned files */

/* Appends a line to a growing string; false when out of memory. */
bool exp_append_line(char **buf, const char *line);
/* Dumps a JSON value the way the frameworks' files look: indent 4, keys in insertion
 * order, newline at the end. Caller frees. */
char *exp_dump(json_t *v);
/* Writes the planned files and manifests so that the folder holds either the previous
 * state or the new one whole, never a mix: every new text goes to a synced temp file
 * first (a full disk fails here, and the temp files are removed); then the journal
 * commits to the renames; then the renames, files before manifests; then the journal
 * goes. No path written is the database or one of its files. The files are then
 * recorded in the database. */
int exp_commit(run_t *x, exp_report_t *rep, char *err, size_t errlen);
/* Takes an exclusive lock on out_dir (created when missing) for the whole export, then
 * completes or cleans up what an export that died there left (recover). */
int exp_lock_out(run_t *x, char *err, size_t errlen);
/* The manifest of a folder, loaded once (after the lock). A manifest that exists but
 * is not a JSON object is refused: rebuilding it would drop its records. */
int exp_manifest_for(run_t *x, const char *dir, json_t **out, char *err, size_t errlen);
/* Releases what the export holds: planned files, manifests, coverage, its lock. */
void exp_run_free(run_t *x);

/* ---- export_engine.c: the engine layouts */

/* The export with an engine: reads the rows (closing *q), plans every file, takes the
 * folder's lock and commits. MT_* as exp_run. */
int exp_engine_run(run_t *x, dbq_t **q, exp_report_t *rep, char *err, size_t errlen);

#endif
