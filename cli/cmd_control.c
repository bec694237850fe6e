/* cmd_control.c - the subcommands that talk to a coordinator: submit, status, workers,
 * cancel. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "cmd.h"
#include "eta.h"
#include "mt.h"
#include "progress.h"
#include "states.h"

static int connect_control(const cli_cmd_t *cmd, const cli_opts_t *o, cli_client_t **c) {
    char err[300];
    if (!o->control) return cli_usage(cmd, "--control EP is required");
    if (!o->curve_secret != !o->curve_server) return cli_usage(cmd, "--curve-secret and --curve-server go together");
    sec_cert_t self, server;
    if (o->curve_secret && (sec_load_secret(o->curve_secret, &self, err, sizeof err) != MT_OK ||
                            sec_load_public(o->curve_server, &server, err, sizeof err) != MT_OK))
        return cli_usage(cmd, err);
    if (cli_client_new_curve(o->control, (int)o->timeout_ms, o->curve_secret ? &self : NULL,
                             o->curve_secret ? &server : NULL, c, err, sizeof err) != MT_OK)
        return cli_fail(cmd, err);
    return MT_EXIT_OK;
}

uint32_t cli_live_workers(const Moetune__StatusReply *r) {
    uint32_t n = 0;
    for (size_t i = 0; i < r->n_workers; i++)
        if (r->workers[i]->state && strcmp(r->workers[i]->state, "dead") != 0) n++;
    return n;
}

/* Sleeps up to ms in steps of 100 ms, less when an interrupt comes. */
static void nap(uint32_t ms) {
    for (uint32_t t = 0; t < ms && !mt_stop_requested; t += 100) usleep(100 * 1000);
}

int cli_follow(const cli_cmd_t *cmd, cli_client_t *c, uint64_t sweep, bool json, const cli_follow_t *f,
               cli_follow_end_t *end) {
    static const cli_follow_t plain = {.poll_ms = 1000};
    int code = MT_EXIT_OK;
    char err[300];
    cli_progress_t *prog = NULL;
    wire_env_t *reply = NULL;
    uint64_t stop_ms = 0;
    if (!f) f = &plain;
    memset(end, 0, sizeof *end);
    if (cli_progress_new(json ? stdout : stderr, json, isatty(STDERR_FILENO), &prog) != MT_OK)
        return cli_fail(cmd, "out of memory");
    for (;;) {
        bool stop = mt_stop_requested;
        if (stop && !f->stop_grace_ms) {
            cli_progress_finish(prog, NULL, 0);
            end->interrupted = true;
            code = MT_EXIT_FAIL;
            break;
        }
        if (stop && !stop_ms) stop_ms = mt_now_ms();
        if (!stop && f->check) {
            code = f->check(f->ctx, NULL, prog);
            if (code != MT_EXIT_OK) {
                cli_progress_finish(prog, NULL, 0);
                break;
            }
        }
        wire_free(&reply);
        int rc = cli_client_status(c, sweep, &reply, err, sizeof err);
        const Moetune__StatusReply *r = rc == MT_OK ? reply->status_reply : NULL;
        if (!r && !f->retry) {
            cli_progress_finish(prog, NULL, 0);
            code = cli_fail(cmd, err);
            break;
        }
        if (r && sweep && r->n_sweeps == 0) {
            if (!f->retry) {
                code = cli_fail(cmd, "no such sweep");
                break;
            }
            r = NULL;
        }
        if (r) {
            bool all_done = true, any_bad = false;
            for (size_t i = 0; i < r->n_sweeps; i++) {
                if (!wire_sweep_finished(r->sweeps[i]->state))
                    all_done = false;
                else if (!wire_sweep_is(r->sweeps[i]->state, WIRE_SWEEP_DONE))
                    any_bad = true;
            }
            cli_progress_storage(prog, r->counters);
            if (r->n_sweeps == 1) {
                const Moetune__SweepStatus *st = r->sweeps[0];
                snprintf(end->state, sizeof end->state, "%s", st->state ? st->state : "");
                if (all_done) {
                    cli_progress_finish(prog, st, cli_live_workers(r));
                } else if (stop && cli_progress_complete(st) && mt_now_ms() - stop_ms < f->stop_grace_ms) {
                    /* An interrupt after the last commit: the sweep is about to be marked done,
                     * and waiting for that keeps the export. */
                    usleep(50 * 1000);
                    continue;
                } else {
                    cli_progress_update(prog, st, cli_live_workers(r));
                }
            }
            if (all_done) {
                if (any_bad && !f->quiet_end) {
                    code = MT_EXIT_FAIL;
                    for (size_t i = 0; i < r->n_sweeps; i++)
                        if (!wire_sweep_is(r->sweeps[i]->state, WIRE_SWEEP_DONE))
                            fprintf(stderr, "moetune %s: sweep %llu ended %s\n", cmd->name,
                                    (unsigned long long)r->sweeps[i]->sweep_id, r->sweeps[i]->state);
                }
                break;
            }
            if (f->check) {
                code = f->check(f->ctx, r, prog);
                if (code != MT_EXIT_OK) {
                    cli_progress_finish(prog, NULL, 0);
                    break;
                }
            }
        }
        if (stop) {
            cli_progress_finish(prog, NULL, 0);
            end->interrupted = true;
            code = MT_EXIT_FAIL;
            break;
        }
        nap(f->poll_ms);
    }
    wire_free(&reply);
    cli_progress_destroy(&prog);
    return code;
}

int cli_wait_sweeps(const cli_cmd_t *cmd, cli_client_t *c, uint64_t sweep, bool json) {
    cli_follow_end_t end;
    int code = cli_follow(cmd, c, sweep, json, NULL, &end);
    if (end.interrupted) code = cli_fail(cmd, "interrupted; the sweep goes on in the coordinator");
    return code;
}

int cmd_submit(const cli_cmd_t *cmd, cli_opts_t *o) {
    int code;
    char err[400];
    cli_client_t *c = NULL;
    wire_env_t *reply = NULL;
    if (cli_spec_finish(o->spec, false, err, sizeof err) != MT_OK) return cli_usage(cmd, err);
    code = cli_nightly_check(cmd, o);
    if (code != MT_EXIT_OK) return code;
    code = connect_control(cmd, o, &c);
    if (code != MT_EXIT_OK) return code;
    int ecode = 0;
    int rc = cli_client_submit(c, cli_spec_get(o->spec), &reply, &ecode, err, sizeof err);
    if (rc != MT_OK) {
        /* A spec the coordinator refuses is the user's input: usage. */
        code = ecode == WIRE_E_SPEC ? cli_usage(cmd, err) : cli_fail(cmd, err);
        goto out;
    }
    const Moetune__Submitted *s = reply->submitted;
    if (o->json) {
        cli_print_json(stdout,
                       json_pack("{s:I, s:i, s:i, s:i, s:i, s:I, s:s}", "sweep", (json_int_t)s->sweep_id, "jobs",
                                 (int)s->jobs, "configs_valid", (int)s->configs_valid, "configs_rejected",
                                 (int)s->configs_rejected, "configs_unsampled", (int)s->configs_unsampled,
                                 "results_planned", (json_int_t)s->results_planned, "rules", s->rules ? s->rules : ""));
    } else {
        printf("submitted sweep %llu: %u jobs, %u configs valid, %u rejected, %u left out by the sample, %llu results "
               "planned\n",
               (unsigned long long)s->sweep_id, s->jobs, s->configs_valid, s->configs_rejected, s->configs_unsampled,
               (unsigned long long)s->results_planned);
        if (s->rules && *s->rules) printf("static rules: %s\n", s->rules);
    }
    fflush(stdout);
    cli_say_queued_behind(cmd->name, s->queued_behind, s->n_queued_behind);
    code = o->wait ? cli_wait_sweeps(cmd, c, s->sweep_id, o->json) : MT_EXIT_OK;
    if (code == MT_EXIT_OK && o->compare_to) code = cli_nightly_finish(cmd, o, s->sweep_id);
out:
    wire_free(&reply);
    cli_client_destroy(&c);
    return code;
}

/* The ETA of one status snapshot (eta.h: the sweep's life so far), as a followed display
 * starts from; < 0 for a sweep that is not running. */
static double snapshot_eta(const Moetune__SweepStatus *s) {
    if (!wire_sweep_is(s->state, WIRE_SWEEP_RUNNING)) return -1.0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    cli_eta_sample_t e;
    cli_progress_sample(s, 0.0, (double)ts.tv_sec + ts.tv_nsec * 1e-9, &e);
    return cli_eta_once(&e);
}

static json_t *sweep_json(const Moetune__SweepStatus *s) {
    json_t *o =
        json_pack("{s:I, s:o, s:s, s:I, s:I, s:I, s:I, s:f, s:f, s:i, s:i, s:i, s:i, s:i, s:f, s:I}", "sweep",
                  (json_int_t)s->sweep_id, "name", cli_json_text(s->name), "state", s->state ? s->state : "",
                  "results_planned", (json_int_t)s->results_planned, "results_done", (json_int_t)s->results_done,
                  "results_failed", (json_int_t)s->results_failed, "results_pruned", (json_int_t)s->results_pruned,
                  "timed_s", s->timed_s, "gpu_busy", s->gpu_busy, "jobs_total", (int)s->jobs_total, "jobs_pending",
                  (int)s->jobs_pending, "jobs_leased", (int)s->jobs_leased, "jobs_done", (int)s->jobs_done,
                  "jobs_failed", (int)s->jobs_failed, "rate", s->rate, "created", (json_int_t)s->created_s);
    if (o) json_object_set_new(o, "eta_s", cli_progress_eta_json(s, snapshot_eta(s)));
    if (o) cli_progress_json_phase(o, s);
    if (o && s->warm_start && *s->warm_start) json_object_set_new(o, "warm_start", json_string(s->warm_start));
    return o;
}

static json_t *worker_json(const Moetune__WorkerInfo *w) {
    const Moetune__Gpu *g = w->gpu;
    return json_pack("{s:o, s:o, s:i, s:o, s:o, s:o, s:s, s:i, s:I, s:I}", "worker", cli_json_text(w->worker_id), "host",
                     cli_json_text(w->host), "pid", (int)w->pid, "backend", cli_json_text(w->backend), "gpu",
                     cli_json_text(g ? g->name : NULL), "gpu_uuid", cli_json_text(g ? g->uuid : NULL), "state",
                     w->state ? w->state : "", "jobs_leased", (int)w->jobs_leased, "results", (json_int_t)w->results,
                     "last_seen_ms", (json_int_t)w->last_seen_ms);
}

static void print_status(const Moetune__StatusReply *r, bool json) {
    if (json) {
        json_t *root = json_object(), *sw = json_array();
        for (size_t i = 0; i < r->n_sweeps; i++) json_array_append_new(sw, sweep_json(r->sweeps[i]));
        json_object_set_new(root, "sweeps", sw);
        const Moetune__Counters *c = r->counters;
        if (c)
            json_object_set_new(root, "counters",
                                json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:s, s:I}", "bad_messages",
                                          (json_int_t)c->bad_messages, "rejected_results",
                                          (json_int_t)c->rejected_results, "results_committed",
                                          (json_int_t)c->results_committed, "requeued_jobs",
                                          (json_int_t)c->requeued_jobs, "dead_workers", (json_int_t)c->dead_workers,
                                          "commit_failures", (json_int_t)c->commit_failures, "storage_error", "",
                                          "results_unacked", (json_int_t)c->results_unacked));
        if (c) /* sqlite's text can quote a path, which may be any bytes */
            json_object_set_new(json_object_get(root, "counters"), "storage_error", cli_json_text(c->storage_error));
        if (c)
            json_object_set_new(json_object_get(root, "counters"), "auth_refused",
                                json_integer((json_int_t)c->auth_refused));
        cli_print_json(stdout, root);
        return;
    }
    printf("%-6s %-32s %-9s %21s %8s %19s %9s %8s\n", "SWEEP", "NAME", "STATE", "RESULTS DONE/PLANNED", "FAILED",
           "JOBS P/L/D/F", "RATE/s", "ETA");
    for (size_t i = 0; i < r->n_sweeps; i++) {
        const Moetune__SweepStatus *s = r->sweeps[i];
        char res[48], jobs[48], eta[32];
        snprintf(res, sizeof res, "%llu/%llu", (unsigned long long)s->results_done,
                 (unsigned long long)s->results_planned);
        snprintf(jobs, sizeof jobs, "%u/%u/%u/%u", s->jobs_pending, s->jobs_leased, s->jobs_done, s->jobs_failed);
        cli_progress_eta_text(s, snapshot_eta(s), eta, sizeof eta);
        printf("%-6llu %-32.32s %-9s %21s %8llu %19s %9.1f %8s\n", (unsigned long long)s->sweep_id,
               s->name ? s->name : "", s->state ? s->state : "", res, (unsigned long long)s->results_failed, jobs,
               s->rate, eta);
    }
    if (r->n_sweeps == 0) printf("(no sweeps)\n");
    for (size_t i = 0; i < r->n_sweeps; i++) {
        const Moetune__SweepStatus *s = r->sweeps[i];
        if (s->results_pruned)
            printf("sweep %llu: %llu results pruned by racing (kept, never exported)\n",
                   (unsigned long long)s->sweep_id, (unsigned long long)s->results_pruned);
        if (s->phase) {
            char counts[160];
            cli_progress_counts(s, counts, sizeof counts);
            printf("sweep %llu: %s %s (%.1f%%)\n", (unsigned long long)s->sweep_id,
                   s->decide_step ? "racing, then the decide step:" : "halving", counts, cli_progress_percent(s));
        }
        if (s->gpu_busy > 0)
            printf("sweep %llu: GPU busy %.0f%% (%.1f s in timed kernels)\n", (unsigned long long)s->sweep_id,
                   100.0 * s->gpu_busy, s->timed_s);
        if (s->warm_start && *s->warm_start)
            printf("sweep %llu: warm start: %s\n", (unsigned long long)s->sweep_id, s->warm_start);
    }
    if (r->counters && r->counters->auth_refused)
        printf("connections refused by CURVE: %llu\n", (unsigned long long)r->counters->auth_refused);
    const Moetune__Counters *c = r->counters;
    if (c)
        printf("workers: %zu (%u alive); results committed %llu, rejected %llu, bad messages %llu, "
               "requeued jobs %llu, dead workers %llu, commit failures %llu\n",
               r->n_workers, cli_live_workers(r), (unsigned long long)c->results_committed,
               (unsigned long long)c->rejected_results, (unsigned long long)c->bad_messages,
               (unsigned long long)c->requeued_jobs, (unsigned long long)c->dead_workers,
               (unsigned long long)c->commit_failures);
    if (c && c->storage_error && *c->storage_error)
        printf("storage: %s (%llu results waiting for a commit)\n", c->storage_error,
               (unsigned long long)c->results_unacked);
}

/* Connects to o's coordinator and asks for the status of sweep (0: all sweeps). MT_EXIT_OK with
 * the client in *c and the reply in *reply, both the caller's to release; otherwise the exit
 * code, the failure printed and nothing left open. */
static int fetch_status(const cli_cmd_t *cmd, const cli_opts_t *o, uint64_t sweep, cli_client_t **c,
                        wire_env_t **reply) {
    char err[300];
    int code = connect_control(cmd, o, c);
    if (code != MT_EXIT_OK) return code;
    if (cli_client_status(*c, sweep, reply, err, sizeof err) != MT_OK) {
        cli_client_destroy(c);
        return cli_fail(cmd, err);
    }
    return MT_EXIT_OK;
}

int cmd_status(const cli_cmd_t *cmd, cli_opts_t *o) {
    cli_client_t *c = NULL;
    wire_env_t *reply = NULL;
    int code = fetch_status(cmd, o, o->sweep, &c, &reply);
    if (code != MT_EXIT_OK) return code;
    if (o->sweep && reply->status_reply->n_sweeps == 0) {
        code = cli_fail(cmd, "no such sweep");
        goto out;
    }
    print_status(reply->status_reply, o->json);
    fflush(stdout);
    if (o->wait) {
        code = cli_wait_sweeps(cmd, c, o->sweep, false);
        if (code == MT_EXIT_OK && !o->json) printf("all sweeps finished\n");
    }
out:
    wire_free(&reply);
    cli_client_destroy(&c);
    return code;
}

int cmd_workers(const cli_cmd_t *cmd, cli_opts_t *o) {
    cli_client_t *c = NULL;
    wire_env_t *reply = NULL;
    int code = fetch_status(cmd, o, 0, &c, &reply);
    if (code != MT_EXIT_OK) return code;
    const Moetune__StatusReply *r = reply->status_reply;
    if (o->json) {
        json_t *arr = json_array();
        for (size_t i = 0; i < r->n_workers; i++) json_array_append_new(arr, worker_json(r->workers[i]));
        cli_print_json(stdout, json_pack("{s:o}", "workers", arr));
    } else {
        printf("%-28s %-16s %7s %-7s %-24s %-6s %5s %9s %10s\n", "WORKER", "HOST", "PID", "BACKEND", "GPU", "STATE",
               "JOBS", "RESULTS", "LAST SEEN");
        for (size_t i = 0; i < r->n_workers; i++) {
            const Moetune__WorkerInfo *w = r->workers[i];
            char seen[32];
            snprintf(seen, sizeof seen, "%.1fs ago", (double)w->last_seen_ms / 1000.0);
            printf("%-28.28s %-16.16s %7u %-7s %-24.24s %-6s %5u %9llu %10s\n", w->worker_id ? w->worker_id : "",
                   w->host ? w->host : "", w->pid, w->backend ? w->backend : "",
                   w->gpu && w->gpu->name ? w->gpu->name : "", w->state ? w->state : "", w->jobs_leased,
                   (unsigned long long)w->results, seen);
        }
        if (r->n_workers == 0) printf("(no workers)\n");
    }
    wire_free(&reply);
    cli_client_destroy(&c);
    return code;
}

int cmd_cancel(const cli_cmd_t *cmd, cli_opts_t *o) {
    char err[300];
    cli_client_t *c = NULL;
    wire_env_t *reply = NULL;
    if (!o->sweep) return cli_usage(cmd, "--sweep ID is required");
    int code = connect_control(cmd, o, &c);
    if (code != MT_EXIT_OK) return code;
    if (cli_client_cancel(c, o->sweep, &reply, err, sizeof err) != MT_OK) {
        code = cli_fail(cmd, err);
        goto out;
    }
    printf("cancelled sweep %llu (%u jobs)\n", (unsigned long long)reply->cancelled->sweep_id,
           reply->cancelled->jobs_cancelled);
out:
    wire_free(&reply);
    cli_client_destroy(&c);
    return code;
}
