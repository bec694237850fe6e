/*
 * export.h - write the tuned config files (DESIGN.md "Config files") from the store.
 *
 * Per (export dir, device name, shape) one file
 *   OUT/<dir>/E={E},N={N},device_name={name, spaces→_}[,dtype=..][,block_shape=[n, k]].json
 * where dir is the results' compiler ("cuda_13_0") or "sim" for the sim backend. Each
 * entry is the lowest-median ok result for that batch size (ties: lower config id).
 * A manifest.json beside the files records where every entry came from.
 *
 * An existing file is never silently overwritten: entries that differ are reported
 * ("M: old → new") through the changes stream and counted; entries of the old file
 * for batch sizes the store has no result for are kept; a file whose entries all
 * match is left untouched. Files are written atomically (temp file + rename), and
 * every file considered is recorded in the exports table.
 */
#ifndef EXP_EXPORT_H
#define EXP_EXPORT_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    const char *db_path;   /* the store; read, plus one short write to `exports` */
    const char *out_dir;   /* created when missing */
    uint64_t sweep_id;     /* 0 = best over all sweeps */
    FILE *changes;         /* where "changed entry" lines go; NULL = nowhere */
} exp_opts_t;

typedef enum { EXP_NEW, EXP_CHANGED, EXP_UNCHANGED } exp_state_t;

typedef struct {
    char path[512];        /* relative to out_dir, e.g. "sim/E=128,N=768,device_name=NVIDIA_H200.json" */
    uint32_t entries;      /* entries in the file as it now is */
    uint32_t changed;      /* entries that differ from the file it replaced (all, when new) */
    exp_state_t state;
    int simulated;
} exp_file_t;

typedef struct {
    exp_file_t *files;
    size_t n_files;
} exp_report_t;

/* Exports as described above and fills report (caller clears it with
 * exp_report_clear, also after an error). Returns MT_OK; MT_NOTFOUND when there is
 * no ok result to export; MT_INVAL when an existing file is not a config file or two
 * shapes would share one file name; MT_IO/MT_ERR on disk or database errors; the
 * reason is in err. */
int exp_run(const exp_opts_t *opts, exp_report_t *report, char *err, size_t errlen);

/* Frees the report's files and zeroes it. */
void exp_report_clear(exp_report_t *report);

/* Name of a state: "new", "changed", "unchanged". */
const char *exp_state_name(exp_state_t state);

#endif
