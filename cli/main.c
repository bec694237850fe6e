/* main.c - the moetune command: a table of subcommands, each with its options. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "mt.h"
#include "presets.h"

static const cli_opt_t *const tune_opts[] = {&opt_backend,
                                             &opt_workers,
                                             &opt_gpus,
                                             &opt_db,
                                             &opt_out,
                                             &opt_sim_time_scale,
                                             &opt_sim_faults,
                                             &opt_kernel,
                                             &opt_python,
                                             &opt_helper_mem_mb,
                                             &opt_engine,
                                             &opt_json,
                                             &opt_log_level,
                                             &opt_keep_temp,
                                             &opt_fresh,
                                             &opt_keep_settings,
                                             NULL};
static const cli_opt_t *const submit_opts[] = {&opt_control,
                                               &opt_timeout,
                                               &opt_wait,
                                               &opt_json,
                                               &opt_curve_secret,
                                               &opt_curve_server,
                                               &opt_compare_to,
                                               &opt_nightly_db,
                                               &opt_nightly_out,
                                               &opt_force_export,
                                               &opt_threshold,
                                               &opt_engine,
                                               NULL};
static const cli_opt_t *const status_opts[] = {&opt_control, &opt_timeout,      &opt_sweep,        &opt_wait,
                                               &opt_json,    &opt_curve_secret, &opt_curve_server, NULL};
static const cli_opt_t *const workers_opts[] = {&opt_control,      &opt_timeout,      &opt_json,
                                                &opt_curve_secret, &opt_curve_server, NULL};
static const cli_opt_t *const cancel_opts[] = {&opt_control,      &opt_timeout,      &opt_sweep,
                                               &opt_curve_secret, &opt_curve_server, NULL};
static const cli_opt_t *const keygen_opts[] = {&opt_key_out, &opt_key_name, NULL};
static const cli_opt_t *const results_opts[] = {
    &opt_db,    &opt_sweep, &opt_shape_filter,    &opt_batch_size, &opt_status, &opt_best,
    &opt_limit, &opt_json,  &opt_compare_routing, &opt_near_ties,  NULL};
static const cli_opt_t *const export_opts[] = {&opt_db,     &opt_out,     &opt_sweep, &opt_sweeps, &opt_latest,
                                               &opt_engine, &opt_partial, &opt_force, NULL};
static const cli_opt_t *const doctor_opts[] = {&opt_engine_doctor, &opt_python,       &opt_model, &opt_tp, &opt_ep,
                                               &opt_dtype,         &opt_doctor_shape, &opt_json,  NULL};
static const cli_opt_t *const lookup_opts[] = {&opt_json, NULL};
static const cli_opt_t *const history_opts[] = {
    &opt_db, &opt_shape_filter, &opt_batch_size, &opt_device_filter, &opt_backend_filter, &opt_json, NULL};
static const cli_opt_t *const diff_opts[] = {&opt_db, &opt_threshold, &opt_device_filter, &opt_json, NULL};
static const cli_opt_t *const report_opts[] = {&opt_db, &opt_sweep, &opt_report_out, &opt_heatmap_m, NULL};

static const cli_cmd_t k_cmds[] = {
    {"tune", NULL,
     "Tune on this machine: runs a coordinator and one worker per local GPU (or N sim workers),\n"
     "shows progress, and writes the config files.",
     "Shapes come from --shape, --model with --tp/--ep, or --model-config with --tp/--ep.\n"
     "Exit codes: 0 done, 1 failure (a process died, a worker could not open its backend),\n"
     "2 bad usage, 130 interrupted. Every result is committed as it arrives: after Ctrl-C or a\n"
     "crash, running the same command again on the same --db resumes the sweep, and once it is\n"
     "done the same command on the same GPU and kernel exports its files again without measuring.\n"
     "Both happen only when the expanded plan and every measurement setting are equal; otherwise\n"
     "tune says what differs and exits 2: choose --fresh (measure anew) or --keep-settings.",
     tune_opts, true, 0, 0, cmd_tune},
    {"submit", NULL, "Submit a sweep to a running coordinator and print its id, jobs and planned results.",
     "The nightly form: --wait --compare-to last --db FILE --out DIR waits for the sweep, diffs\n"
     "it against the previous done sweep of the same spec (names aside) on the same device, as\n"
     "moetune diff does, and exports the sweep's config files only when nothing regressed\n"
     "(or with --force). With no previous sweep it exports. Exit codes: 0 done (and exported),\n"
     "3 a regression beyond noise and --threshold, 1 failure, 2 bad usage.",
     submit_opts, true, 0, 0, cmd_submit},
    {"status", NULL, "Show the coordinator's sweeps and counters.", NULL, status_opts, false, 0, 0, cmd_status},
    {"workers", NULL, "Show the coordinator's workers.", NULL, workers_opts, false, 0, 0, cmd_workers},
    {"cancel", NULL, "Cancel a sweep: its pending and leased jobs are cancelled.", NULL, cancel_opts, false, 0, 0,
     cmd_cancel},
    {"results", NULL, "List measured results from the database (read-only).", NULL, results_opts, false, 0, 0,
     cmd_results},
    {"export", NULL, "Write the config files (best ok config per shape and batch size) and manifest.json.",
     "A file that exists is compared entry by entry; changed entries are printed and an\n"
     "unchanged file is left as it is. Results of the sim backend go under DIR/sim/.\n"
     "--engine sglang writes DIR/configs/triton_X_Y_Z/ (for SGLANG_MOE_CONFIG_DIR=DIR), with\n"
     "_down files when the GEMMs were timed apart; --engine vllm writes DIR/ flat (for\n"
     "VLLM_TUNED_CONFIG_FOLDER=DIR). Both take triton results only and never merge results of\n"
     "different Triton, kernel or library versions into one file.\n"
     "A database with several sweeps needs --sweep N, --sweeps A,B (merged) or --latest. A file\n"
     "is written only from a done sweep whose device measured every planned config at every\n"
     "batch size; --partial writes the others too, with the coverage in the output and the\n"
     "manifest. Two shapes that share a file name (same E and N) are always refused; an entry\n"
     "is replaced by a config measured slower than it only with --force. Exports into one DIR\n"
     "take a lock and run one after the other.",
     export_opts, false, 0, 0, cmd_export},
    {"lookup", "FILE M",
     "Print the entry of config FILE that an engine uses for batch size M\n"
     "(the exact key, else the nearest key; a tie goes to the smaller key).",
     NULL, lookup_opts, false, 2, 2, cmd_lookup},
    {"doctor", NULL,
     "Check whether SGLang or vLLM, in the given interpreter, finds a tuned config file\n"
     "for this GPU and shape, and say what to run when it does not.",
     "Without --python it uses the interpreter of a running SGLang or vLLM server (found by its\n"
     "command line in /proc), else the first of $VIRTUAL_ENV/bin/python3, $CONDA_PREFIX/bin/python3\n"
     "and python3 that has the engine, and says which. It runs the helper's probe there, then\n"
     "names the folder the engine reads, the file it expects, what it falls back to, and the\n"
     "moetune tune command that makes the file.\n"
     "Exit codes: 0 the file exists for the running Triton version, 3 it is missing, 1 the\n"
     "probe cannot run or finds no torch, Triton or GPU, or the engine's own lookup names\n"
     "another file than moetune does, 2 bad usage.",
     doctor_opts, false, 0, 0, cmd_doctor},
    {"history", NULL,
     "Per sweep, in time order, the best latency and config for each batch size of a shape,\n"
     "with the sweep's device, driver, toolkit, Triton and kernel versions (read-only).",
     "A version that changed since the previous sweep is shown as 'new (was old)', and each\n"
     "entry's change against the previous sweep's entry is in VS PREV. The guard line counts, as\n"
     "export decides, the keys the ship guard adds between batch sizes and the batch sizes where\n"
     "it ships the engine's default's or the incumbent's config.",
     history_opts, false, 0, 0, cmd_history},
    {"diff", "A B",
     "Compare two sweeps (ids, or last / prev): per shape and batch size the old and new best\n"
     "config and latency, the change, and whether it is beyond the sweeps' measured noise.",
     "last is the newest sweep that finished as done; prev is the done sweep before it with\n"
     "the same spec (names aside) on the same device. A change is beyond noise when it exceeds\n"
     "2 x sqrt(rsd_A^2 + rsd_B^2) of the two best results (rsd = stddev / median); a slowdown\n"
     "beyond noise and above --threshold is a regression. The guard line says, per sweep, what\n"
     "the ship guard does to its files (as history's). Exit codes: 0 no regression,\n"
     "3 at least one regression, 1 failure, 2 bad usage.",
     diff_opts, false, 2, 2, cmd_diff},
    {"report", NULL, "Write one self-contained HTML report of a sweep (inline SVG, nothing loaded from the network).",
     "Per shape: best latency and the engines' default config against batch size, the speed-up,\n"
     "a BLOCK_SIZE_M x BLOCK_SIZE_N heat map (best over the other parameters) at one batch\n"
     "size, results by status, and the sweep's provenance. The engines' default (SGLang and\n"
     "vLLM, bf16: 16x32x64 GROUP 1 when M <= E, else 64x64x32 GROUP 8; num_warps 4 and\n"
     "num_stages 3 as Triton's launch defaults) is shown where the sweep measured that config,\n"
     "and 'not measured' where it did not.",
     report_opts, false, 0, 0, cmd_report},
    {"keygen", NULL, "Write a CURVE key pair: DIR/NAME.key (secret, mode 0600) and DIR/NAME.pub (public).",
     "Give the coordinator its .key with --curve-secret and put the .pub of every worker and\n"
     "client in its --curve-allow directory; workers and clients take their own .key with\n"
     "--curve-secret and the coordinator's .pub with --curve-server. Existing files are not\n"
     "overwritten. The files are czmq certificates (ZPL text, Z85 keys).",
     keygen_opts, false, 0, 0, cmd_keygen},
};
#define N_CMDS (sizeof k_cmds / sizeof k_cmds[0])

static const cli_cmd_t *find_cmd(const char *name) {
    for (size_t i = 0; i < N_CMDS; i++)
        if (strcmp(k_cmds[i].name, name) == 0) return &k_cmds[i];
    return NULL;
}

static void main_help(FILE *out) {
    fprintf(out,
            "usage: moetune COMMAND [options]\n\nTunes fused Mixture-of-Experts kernels and writes the config files\n"
            "SGLang and vLLM load.\n\ncommands:\n");
    for (size_t i = 0; i < N_CMDS; i++) {
        const char *nl = strchr(k_cmds[i].summary, '\n');
        int len = nl ? (int)(nl - k_cmds[i].summary) : (int)strlen(k_cmds[i].summary);
        fprintf(out, "  %-9s %.*s\n", k_cmds[i].name, len, k_cmds[i].summary);
    }
    fprintf(out, "  %-9s %s\n", "help", "help CMD shows a command's options");
    fprintf(out, "\nmodel presets (--model):");
    for (size_t i = 0; i < cli_n_presets; i++)
        fprintf(out, "%s %s%s%s%s", i ? "," : "", cli_presets[i].name, cli_presets[i].alias ? " (" : "",
                cli_presets[i].alias ? cli_presets[i].alias : "", cli_presets[i].alias ? ")" : "");
    fprintf(out, "\n\nexample: moetune tune --model qwen3-30b-a3b --tp 2 --backend sim --workers 4\n");
}

int main(int argc, char **argv) {
    int code;
    char err[700];
    if (argc < 2) {
        main_help(stderr);
        return MT_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) {
        main_help(stdout);
        return MT_EXIT_OK;
    }
    if (strcmp(name, "help") == 0) {
        if (argc < 3) {
            main_help(stdout);
            return MT_EXIT_OK;
        }
        const cli_cmd_t *c = find_cmd(argv[2]);
        if (!c) {
            fprintf(stderr, "moetune: unknown command '%s' (see moetune --help)\n", argv[2]);
            return MT_EXIT_USAGE;
        }
        cli_print_help(c, stdout);
        return MT_EXIT_OK;
    }
    const cli_cmd_t *cmd = find_cmd(name);
    if (!cmd) {
        fprintf(stderr, "moetune: unknown command '%s' (see moetune --help)\n", name);
        return MT_EXIT_USAGE;
    }
    mt_log_init("moetune", MT_LOG_WARN);
    cli_opts_t o;
    memset(&o, 0, sizeof o);
    if (cmd->spec) {
        o.spec = cli_spec_new();
        if (!o.spec) return cli_fail(cmd, "out of memory");
    }
    bool help = false;
    int rc = cli_parse(cmd, argc - 2, argv + 2, &o, &help, err, sizeof err);
    if (rc != MT_OK)
        code = cli_usage(cmd, err);
    else if (help) {
        cli_print_help(cmd, stdout);
        code = MT_EXIT_OK;
    } else
        code = cmd->run(cmd, &o);
    /* a --json output that lost a part is not an answer */
    if (cli_json_incomplete && code == MT_EXIT_OK) code = MT_EXIT_FAIL;
    cli_spec_destroy(&o.spec);
    return code;
}
