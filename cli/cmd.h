/*
 * cmd.h - the moetune subcommands: the option table type, the parser, and the
 * handlers (one cmd_* function per subcommand). Internal to the CLI.
 */
#ifndef CLI_CMD_H
#define CLI_CMD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "mt.h"
#include "query.h"
#include "spec.h"

typedef enum { OPT_STR, OPT_U32, OPT_U64, OPT_FLAG } cli_opt_type_t;

/* One option: flag name, how it is stored (nginx-style offset into cli_opts_t). */
typedef struct {
    const char *flag;
    cli_opt_type_t type;
    size_t off;
    const char *metavar;
    const char *help;
} cli_opt_t;

/* Every option of every command lands here; a command reads the ones it lists. */
typedef struct {
    const char *control, *db, *out, *shape, *status, *backend, *gpus, *sim_time_scale, *sim_faults, *log_level,
        *curve_secret, *curve_server, *key_name, *kernel, *python, *engine, *model, *dtype, *doctor_shape;
    uint32_t timeout_ms, batch_size, limit, workers, helper_mem_mb, tp, ep;
    uint64_t sweep;
    bool wait, json, best, keep_temp, fresh, keep_settings, compare_routing, near_ties;
    const char *sweeps; /* export: --sweeps A,B */
    bool latest, partial, force;
    cli_spec_t *spec; /* set for commands that take spec options */
    bool spec_given;  /* at least one spec option was given */
    const char *pos[4];
    size_t n_pos;
    /* history, diff, report, submit --compare-to */
    const char *device, *threshold, *compare_to;
    uint32_t heatmap_m;
    bool force_export;
} cli_opts_t;

typedef struct cli_cmd cli_cmd_t;
typedef int (*cli_run_fn)(const cli_cmd_t *cmd, cli_opts_t *o);

struct cli_cmd {
    const char *name;
    const char *args; /* usage after the options, e.g. "FILE M" */
    const char *summary;
    const char *details;          /* extra help paragraph, or NULL */
    const cli_opt_t *const *opts; /* NULL-terminated */
    bool spec;                    /* accepts the spec options */
    size_t min_pos, max_pos;
    cli_run_fn run;
};

/* Shared option definitions. */
extern const cli_opt_t opt_control, opt_timeout, opt_sweep, opt_wait, opt_json, opt_db, opt_out, opt_shape_filter,
    opt_batch_size, opt_status, opt_best, opt_compare_routing, opt_near_ties, opt_limit, opt_backend, opt_workers,
    opt_gpus, opt_sim_time_scale, opt_sim_faults, opt_log_level, opt_keep_temp, opt_curve_secret, opt_curve_server,
    opt_key_out, opt_key_name, opt_kernel, opt_python, opt_helper_mem_mb, opt_engine, opt_engine_doctor, opt_model,
    opt_tp, opt_ep, opt_dtype, opt_doctor_shape, opt_fresh, opt_keep_settings, opt_sweeps, opt_latest, opt_partial,
    opt_force;

/* history, diff, report, submit --compare-to (cmd_common.c) */
extern const cli_opt_t opt_device_filter, opt_backend_filter, opt_threshold, opt_compare_to, opt_nightly_db,
    opt_nightly_out, opt_force_export, opt_heatmap_m, opt_report_out;

/* Parses a partial shape filter "E=128,N=768[,K=..][,topk=..][,dtype=..]" into f's shape
 * fields. MT_INVAL with a one-line reason in err. */
mt_status_t cli_parse_shape_filter(const char *text, dbq_filter_t *f, char *err, size_t errlen);
/* Parses --threshold PCT (NULL: the default 3 %). MT_INVAL with a reason in err. */
mt_status_t cli_parse_threshold(const char *text, double *out, char *err, size_t errlen);

/* Parses argv (after the command name) into o. Returns MT_OK, with *help true when
 * --help (or -h) was asked (parsing stops there; the caller prints the help); MT_INVAL
 * with a one-line reason in err; MT_NOMEM. */
mt_status_t cli_parse(const cli_cmd_t *cmd, int argc, char **argv, cli_opts_t *o, bool *help, char *err, size_t errlen);

/* Prints the command's help. */
void cli_print_help(const cli_cmd_t *cmd, FILE *out);

/* Prints "moetune CMD: msg" on stderr; returns MT_EXIT_USAGE. */
int cli_usage(const cli_cmd_t *cmd, const char *msg);
/* Prints "moetune CMD: msg" on stderr; returns MT_EXIT_FAIL. */
int cli_fail(const cli_cmd_t *cmd, const char *msg);

/* Handlers. Each returns the process exit code. */
int cmd_tune(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_submit(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_status(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_workers(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_cancel(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_results(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_export(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_lookup(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_keygen(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_doctor(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_history(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_diff(const cli_cmd_t *cmd, cli_opts_t *o);
int cmd_report(const cli_cmd_t *cmd, cli_opts_t *o);

/* Runs an export (export.h) and prints each file written or left unchanged, with its
 * coverage when partial, and the error; eo->changes is set to stdout when NULL. The C
 * entry point for every command that exports. Returns an exit code. */
struct exp_opts_s;
int cli_export(const cli_cmd_t *cmd, const struct exp_opts_s *eo, bool json);

/* cli_export of one sweep (finished and fully covered: no --partial; force replaces entries
 * by slower-measured ones, as `tune --fresh` asks), into
 * OUT/<compiler>/ when engine is NULL, else as "sglang" or "vllm" lay them out. */
int cli_run_export(const cli_cmd_t *cmd, const char *db, const char *out, uint64_t sweep, const char *engine, bool json,
                   bool force);

/* submit --compare-to: checks the options (an exit code, MT_EXIT_OK when fine), and after
 * the wait diffs the sweep against the previous one and exports when nothing regressed.
 * Returns 0, 3 on a regression (exported only with --force), 1 or 2 (cmd_nightly.c). */
int cli_nightly_check(const cli_cmd_t *cmd, const cli_opts_t *o);
int cli_nightly_finish(const cli_cmd_t *cmd, const cli_opts_t *o, uint64_t sweep);

/* Waits until sweep (0 = every sweep) is finished, showing progress for one sweep.
 * Returns an exit code (0 when all finished as done). */
struct cli_client;
int cli_wait_sweeps(const cli_cmd_t *cmd, struct cli_client *c, uint64_t sweep, bool json);

/* How cli_follow runs; all zero (or a NULL pointer) is the plain wait of submit/status --wait. */
struct cli_progress;
typedef struct {
    uint32_t poll_ms;       /* between status calls */
    bool retry;             /* a failed status call, or no such sweep yet, is asked again */
    uint32_t stop_grace_ms; /* after an interrupt, wait this long for a sweep whose every result
                              * is committed to be marked done; 0: end at once */
    bool quiet_end;         /* a sweep that ended other than done: leave saying so to the caller */
    /* Called each round before the status call with r NULL (not after an interrupt), and
     * after each status of a sweep still running with r; returns MT_EXIT_OK to go on, else
     * the exit code that ends the wait (the progress line is ended first). */
    int (*check)(void *ctx, const Moetune__StatusReply *r, struct cli_progress *prog);
    void *ctx;
} cli_follow_t;

typedef struct {
    char state[16];   /* the followed sweep's last state; "" when unknown */
    bool interrupted; /* mt_stop_requested ended the wait */
} cli_follow_end_t;

/* The follow loop of tune, submit --wait and status --wait: polls the status of sweep
 * (0 = every sweep) until all are finished, showing one sweep's progress (JSON lines on
 * stdout with json). Returns an exit code: MT_EXIT_OK when all finished (as done, unless
 * quiet_end), the check's code, or MT_EXIT_FAIL with end->interrupted on an interrupt. */
int cli_follow(const cli_cmd_t *cmd, struct cli_client *c, uint64_t sweep, bool json, const cli_follow_t *f,
               cli_follow_end_t *end);

/* Workers of r that are not dead. */
uint32_t cli_live_workers(const Moetune__StatusReply *r);

/* Prints v on out as one compact JSON line, keys in their order, and releases v. A NULL v
 * (a failed json_pack) or one that cannot be dumped prints nothing on out, one line on
 * stderr (once), and sets cli_json_incomplete. */
void cli_print_json(FILE *out, json_t *v);
/* Set when cli_print_json could not print a value (NULL, or not serialisable): the
 * command's output is incomplete, and main() makes its exit status a failure. Builders of
 * JSON output set it too when a part was lost (cli_json_append). */
extern bool cli_json_incomplete;
/* A JSON string of text from a peer or the database: bytes that are not UTF-8 are kept as
 * the text "\xNN" rather than dropping the whole value. NULL is "". NULL only when out
 * of memory. */
json_t *cli_json_text(const char *text);
/* Appends v to arr; a NULL v (a part that could not be built) or a failed append marks
 * the output incomplete. */
void cli_json_append(json_t *arr, json_t *v);

/* Says on stderr, in one line, which running sweeps a submitted one waits behind (nothing
 * when none): they are measured first. */
void cli_say_queued_behind(const char *cmd_name, const uint64_t *ids, size_t n);

#endif
