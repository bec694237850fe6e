/*
 * supervise.h - the local process supervisor of `moetune tune`: a run folder, one
 * coordinator and N workers as child processes, their exits, and stopping them in order.
 *
 * The children run in their own process groups (a terminal's Ctrl-C reaches only the
 * CLI, which then stops them: workers first, so their Byes arrive, then the
 * coordinator) and get SIGTERM when the CLI dies, however it dies (PR_SET_PDEATHSIG).
 * They talk over ipc:// sockets in a fresh folder under /tmp that also holds their logs.
 */
#ifndef CLI_SUPERVISE_H
#define CLI_SUPERVISE_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mt.h"

#define SUP_MAX_WORKERS 64

/* One child process. */
typedef struct {
    pid_t pid;  /* 0 until spawned */
    int status; /* wait status once exited */
    bool exited;
    char log[PATH_MAX];
    char label[32]; /* "coordinator", "worker 3" */
} sup_proc_t;

/* A run: the caller fills gpus and n_workers before starting workers; the rest is the
 * supervisor's. Visible because tune builds the workers' arguments from it. */
typedef struct {
    char dir[PATH_MAX]; /* run folder; "" until sup_open_dir */
    char coord_bin[PATH_MAX], worker_bin[PATH_MAX];
    char workers_ep[PATH_MAX + 16], control_ep[PATH_MAX + 16];
    sup_proc_t coord;
    sup_proc_t workers[SUP_MAX_WORKERS];
    uint32_t n_workers;
    uint32_t gpus[SUP_MAX_WORKERS];
} sup_t;

/* Counts local GPUs: `nvidia-smi -L`, else /dev/nvidiaN device nodes. */
uint32_t sup_count_gpus(void);

/* New run whose binaries are moetune-coordinator and moetune-worker beside the running
 * executable. MT_OK with *out (free with sup_destroy); MT_NOTFOUND with a one-line
 * reason in err when they are not there; MT_NOMEM. */
mt_status_t sup_new(sup_t **out, char *err, size_t errlen);

/* Creates the run folder and names the endpoints in it. MT_IO with errno's text. */
mt_status_t sup_open_dir(sup_t *s, char *err, size_t errlen);

/* Starts the coordinator on db with its log in the run folder. MT_IO or MT_ERR with a reason. */
mt_status_t sup_start_coordinator(sup_t *s, const char *db, const char *log_level, char *err, size_t errlen);

/* Starts worker i (its log in the run folder) as `moetune-worker --connect EP --gpu
 * gpus[i] ARGS...`; args is NULL-terminated and copied by exec. Errors as above. */
mt_status_t sup_start_worker(sup_t *s, uint32_t i, char *const args[], char *err, size_t errlen);

/* Collects p's exit if it has ended; true when it has. */
bool sup_reap(sup_proc_t *p);

/* "LABEL exited with code N: <last line of its log>" (or killed by signal N). */
void sup_describe_exit(const sup_proc_t *p, char *buf, size_t len);

/* Checks the children. MT_OK while the run can go on (a worker that died of anything but
 * a start-up failure is warned about on stderr once, and the others go on); MT_ERR with
 * the reason in why when the coordinator ended, a worker could not start (exit 1 or 2),
 * or every worker is gone. */
mt_status_t sup_check(sup_t *s, char *why, size_t len);

/* True when the coordinator has exited; its wait status in *status. */
bool sup_coordinator_exited(sup_t *s, int *status);

/* Workers started and not exited. */
uint32_t sup_workers_running(const sup_t *s);

/* True when a worker exited with MT_EXIT_USAGE (it refused its arguments: the user's input). */
bool sup_worker_refused_args(const sup_t *s);

/* Stops the workers: SIGTERM, up to 5 s, then SIGKILL. */
void sup_stop_workers(sup_t *s);

/* Stops the workers, then the coordinator, as above. */
void sup_stop_all(sup_t *s);

/* Stops everything, removes the run folder unless keep_dir, frees *s and nulls it.
 * NULL-safe. */
void sup_destroy(sup_t **s, bool keep_dir);

#endif
