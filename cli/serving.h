/*
 * serving.h - the interpreter that serves: running SGLang and vLLM servers found in a
 * /proc-like tree, and the pick of the Python interpreter moetune probes and tunes with.
 *
 * A server is a process whose command line launches an engine's server:
 *   python [opts] -m sglang.launch_server ...     sglang serve ...  (a script run by python)
 *   python [opts] -m vllm.entrypoints.openai.api_server ...   (or vllm.entrypoints.api_server)
 *   python [opts] -m vllm.entrypoints.cli.main serve ...      vllm serve ...
 * and whose executable (<proc>/<pid>/exe) is a Python interpreter. Its interpreter is the
 * path it was started as (argv[0]): kept as written when absolute, joined to its working
 * folder (<pid>/cwd) when relative, looked up in its own PATH (<pid>/environ) when bare.
 * That path, not the exe link, is the one to run: a virtual environment's bin/python3 is
 * a symlink to the system interpreter, and only the symlink's path finds the venv's
 * packages. When argv[0] cannot be resolved, the exe link is used.
 */
#ifndef CLI_SERVING_H
#define CLI_SERVING_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "mt.h"

#define SRV_MAX_SERVERS 16
#define SRV_MAX_TRIED 6

typedef struct {
    int pid;
    char engine[8];          /* "sglang" or "vllm" */
    char python[PATH_MAX];   /* the interpreter to run (see above) */
    char exe[PATH_MAX];      /* where <pid>/exe points; "" when unreadable */
    char command[512];       /* the command line, arguments joined by spaces, "..." when cut */
    const char *python_from; /* "argv[0]", "cwd", "PATH", "exe", or "unknown" (python ""): another
                              * user's process whose exe, cwd and environ cannot be read */
} srv_server_t;

/* Scans the numbered folders of proc_root ("/proc", or a fixture tree of the same shape:
 * <pid>/cmdline NUL-separated, <pid>/exe a symlink, optional <pid>/cwd and <pid>/environ)
 * for servers of engine ("sglang", "vllm", or NULL for both). Fills found[0..max) in
 * ascending pid order and *n with their count (those past max are dropped). Processes
 * that vanish or cannot be read are skipped. MT_IO with a reason when proc_root cannot be
 * listed. */
mt_status_t srv_scan(const char *proc_root, const char *engine, srv_server_t *found, size_t max, size_t *n, char *err,
                     size_t errlen);

/* What an interpreter's probe (worker/HELPER.md "Probe") says; strings "" when null. */
typedef struct {
    char python[PATH_MAX], python_version[32], torch[32], triton[32], device[128], error[512];
    char engine[8], engine_version[32], config_dir[PATH_MAX], engine_error[512];
    char env_dir[PATH_MAX]; /* the engine's config variable as the probe saw it (srv_probe_parse_env) */
} srv_probe_t;

/* Finds the {"probe": ...} line in out and fills p. MT_INVAL when there is none. */
mt_status_t srv_probe_parse(const char *out, srv_probe_t *p);
/* srv_probe_parse, and the value of the engine's variable env_var (NULL: none) in env_dir. */
mt_status_t srv_probe_parse_env(const char *out, const char *env_var, srv_probe_t *p);

/* Runs PYTHON HELPER --probe --engine ENGINE with a timeout of timeout_ms; its stdout goes
 * into out (NUL-terminated, cut at outlen - 1), the last line of its stderr into tail, the
 * exit status (128 + signal when killed) into *status. MT_OK when it ran; MT_IO or
 * MT_AGAIN (timed out, killed) with a reason. */
mt_status_t srv_probe_run(const char *python, const char *helper, const char *engine, int timeout_ms, char *out,
                          size_t outlen, char *tail, size_t taillen, int *status, char *err, size_t errlen);

/* The interpreter picked for an engine, and how. */
typedef struct {
    char python[PATH_MAX]; /* the pick */
    bool from_server;      /* taken from a running server's process */
    srv_server_t server;   /* that server (the lowest pid of its engine with a known interpreter); with
                            * n_servers > 0 and !from_server, one whose interpreter is unknown */
    size_t n_servers;      /* servers of the engine found */
    bool servers_differ;   /* they run more than one interpreter */
    size_t n_tried;        /* without a server: the interpreters probed, in order */
    struct {
        char python[PATH_MAX]; /* as probed (the probe's sys.executable when it answered) */
        char note[200];        /* what it has or lacks: "sglang 0.5.4", "no torch", "did not run: ..." */
    } tried[SRV_MAX_TRIED];
    char *out; /* the chosen interpreter's probe stdout ("" when not probed) */
    size_t outlen;
    char tail[512];    /* last stderr line of that probe */
    int status;        /* its exit status */
    bool probed;       /* out/tail/status hold a probe of python */
    srv_probe_t probe; /* out parsed (zeroed when it holds no probe line) */
} srv_pick_t;

/* Where srv_pick looks and what it runs. */
typedef struct {
    const char *proc_root;         /* NULL: $MOETUNE_PROC_ROOT when set (tests), else "/proc" */
    const char *engine;            /* "sglang" or "vllm" */
    const char *helper;            /* the helper script to probe with */
    const char *const *candidates; /* NULL-terminated; NULL: $VIRTUAL_ENV/bin/python3,
                                     * $CONDA_PREFIX/bin/python3, python3 */
    int timeout_ms;                /* per probe; 0: 180 s */
    bool no_scan;                  /* probe the candidates only (an interpreter the user named) */
} srv_pick_opts_t;

/* Allocates an empty pick with a probe buffer of outlen bytes; caller destroys it. */
mt_status_t srv_pick_new(size_t outlen, srv_pick_t **out);

/* Frees a pick; NULL-safe, nulls *p. */
void srv_pick_destroy(srv_pick_t **p);

/* Picks the interpreter for opts->engine: the interpreter of a running server of that
 * engine (probed once), else the first candidate whose probe finds the engine, else the
 * first with torch and Triton, else the first that answered, else the first candidate.
 * Never fails for want of an interpreter: what was found and tried is in the pick, for
 * srv_pick_describe. MT_INVAL for a missing engine or helper. */
mt_status_t srv_pick(const srv_pick_opts_t *opts, srv_pick_t *pick, char *err, size_t errlen);

/* One line for the user on how the pick was made: "SGLang server pid 4242
 * (/root/ml-env/bin/python3 -m sglang.launch_server ...): its interpreter
 * /root/ml-env/bin/python3" or "no running SGLang server found; interpreters tried:
 * python3 (/usr/bin/python3: no torch), ...". */
void srv_pick_describe(const srv_pick_t *pick, const char *engine, char *buf, size_t len);

/* What `tune` runs when --backend is not given (or --backend triton without --python). */
typedef struct {
    char backend[8];       /* "triton" or "cuda" */
    char kernel[8];        /* triton: "sglang", "vllm" or "moetune"; "" for cuda */
    char engine[16];       /* triton: the engine whose files are written; "" for cuda */
    char python[PATH_MAX]; /* triton: the interpreter; "" for cuda */
    char why[3072];        /* one line saying what was chosen and why */
} srv_decision_t;

typedef struct {
    const char *proc_root;         /* as srv_pick_opts_t */
    const char *helper;            /* the helper script to probe with */
    const char *const *candidates; /* as srv_pick_opts_t */
    int timeout_ms;
    const char *python; /* --python, or NULL */
    const char *kernel; /* --kernel, or NULL */
    const char *engine; /* --engine ("sglang", "vllm", "sglang,vllm"), or NULL */
    bool triton_given;  /* --backend triton: only the interpreter (and kernel) are chosen */
} srv_decide_opts_t;

/* The rule: the engine is --kernel's or --engine's, else a running server's, else the one
 * installed in the interpreter (SGLang first). The interpreter is --python, else a running
 * server's of that engine, else the best candidate (srv_pick). When it imports torch and
 * Triton, the backend is triton with the engine's kernel where the engine is installed there
 * and moetune's own Triton kernel otherwise, writing that engine's files; else cuda
 * (moetune's CUDA kernel, whose files no engine reads). With triton_given and a --kernel
 * of an engine not installed in the interpreter: MT_NOTFOUND with a one-line reason. */
mt_status_t srv_decide(const srv_decide_opts_t *opts, srv_decision_t *d, char *err, size_t errlen);

#endif
