/*
 * backend_triton.c - the triton backend: measures Triton kernels through a Python
 * helper (worker/HELPER.md is the line protocol; this file is its C side).
 *
 * open() starts `PYTHON HELPER --kernel K --gpu N [--cache-dir DIR]` in its own
 * process group with PDEATHSIG set, so the helper dies with the child whichever
 * way the child goes (the parent's time limit SIGKILLs the child). stdin carries
 * requests, stdout replies (one JSON line each, at most 64 KiB), stderr free text:
 * a thread drains stderr all the time, so the helper never blocks on it, logs it
 * at debug level and keeps the last line for the message when the helper dies.
 * While a config is measured the helper's resident memory (its process group,
 * from /proc) is checked every 100 ms against --helper-mem-mb.
 *
 * A helper that dies, breaks the protocol or grows past the limit is killed
 * (its whole group); measure() keeps the batch sizes measured before, marks the
 * rest CRASHED with the reason and returns MT_ERR, so the child sends a fatal
 * frame and the parent starts a new child (and with it a new helper).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "states.h"

#define TR_LINE_MAX (64u * 1024u) /* longest reply line (HELPER.md) */
#define TR_START_MS 120000u       /* importing torch is slow */
#define TR_MEM_POLL_MS 100
#define TR_DEFAULT_MEM_MB 65536u
#define TR_QUIT_MS 2000u
#define TR_BUSY_EVERY_MS 30000u /* the busy line while the helper runs (MOETUNE_TRITON_BUSY_LOG_MS) */

/* The phases of the helper's wall that every done carries (HELPER.md, "phases"), in the order
 * the busy line shows them: its key there and its name in the line. */
static const struct {
    const char *key, *label;
} g_phases[] = {
    {"timed", "timed"},     {"samples", "samples"},         {"warmup", "warm-up"},
    {"capture", "capture"}, {"launch", "launch"},           {"compile_wait", "compile wait"},
    {"inputs", "inputs"},   {"check_layer", "check layer"}, {"check", "check"},
    {"split", "split"},     {"cleanup", "cleanup"},         {"idle", "idle"},
    {"other", "other"},
};
#define TR_N_PHASES (sizeof g_phases / sizeof g_phases[0])

/* How a wait for a reply ended. */
typedef enum { TR_LINE = 0, TR_DIED, TR_PROTO, TR_MEM, TR_LATE } tr_end_t;

typedef struct {
    pid_t pid;                  /* the helper; also its process group id */
    int in_fd, out_fd, err_fd;  /* our ends of its stdin, stdout, stderr */
    char python[PATH_MAX];      /* as asked (--python) */
    char python_path[PATH_MAX]; /* as found on PATH */
    uint64_t mem_limit_kb;
    uint32_t mem_limit_mb;
    uint64_t next_id;
    char *obuf; /* stdout bytes not yet a whole line */
    size_t olen;
    char *line;    /* the reply line read_line() handed out last */
    char why[256]; /* what went wrong, one line */
    /* stderr, drained by err_thread */
    pthread_t err_thread;
    int err_thread_started;
    pthread_mutex_t mu;
    char last_err[256]; /* the last non-empty stderr line */
    int err_eof;
    /* what the helper did, logged when it is closed */
    uint64_t peak_group_kb;  /* largest resident size of its process group seen while waiting */
    uint64_t peak_helper_kb; /* largest peak_rss_kb it reported (its own and its compile processes') */
    double gpu_s;            /* seconds of timed kernels it reported */
    uint64_t configs, started_ms;
    uint64_t hello_ms, first_done_ms; /* when hello and the first config's done came (0: not yet) */
    char stats[512];                  /* the last done's "stats" object, compact JSON ("" when none) */
    krn_limits_t limits;              /* its device's, from the hello, for Triton's static rules */
    int have_limits;                  /* the hello gave a shared-memory limit */
    /* where the helper's wall went: its phases summed over every done (the busy line) */
    double phase_s[TR_N_PHASES];
    uint64_t busy_every_ms;  /* 0: no line while it runs */
    uint64_t busy_logged_ms; /* when the last busy line was logged (the hello's time before) */
    int phases_warned;       /* a malformed phases object was reported once */
} tr_state_t;

static void tr_busy_tick(tr_state_t *st);

/* ---- helpers around processes */

/* Resolves an interpreter name the way execvp would (PATH search when it has no
 * slash). MT_NOTFOUND when nothing executable is found. */
static int find_python(const char *name, char *out, size_t len) {
    if (strchr(name, '/')) {
        mt_fmt(out, len, "%s", name);
        return access(name, X_OK) == 0 ? MT_OK : MT_NOTFOUND;
    }
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t dl = colon ? (size_t)(colon - path) : strlen(path);
        char cand[PATH_MAX];
        struct stat sb;
        mt_fmt(cand, sizeof cand, "%.*s/%s", (int)dl, dl ? path : ".", name);
        if (stat(cand, &sb) == 0 && S_ISREG(sb.st_mode) && access(cand, X_OK) == 0) {
            mt_fmt(out, len, "%s", cand);
            return MT_OK;
        }
        if (!colon) break;
        path = colon + 1;
    }
    return MT_NOTFOUND;
}

/* Resident memory of process group pgid, in KiB (the helper and its compile pool). */
static uint64_t group_rss_kb(pid_t pgid) {
    static long page_kb = 0;
    if (!page_kb) page_kb = sysconf(_SC_PAGESIZE) / 1024;
    uint64_t total = 0;
    DIR *d = opendir("/proc");
    if (!d) return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char path[64], buf[1024];
        mt_fmt(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) continue;
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n <= 0) continue;
        buf[n] = '\0';
        /* after "(comm)" come field 3 (state), 4 (ppid), 5 (pgrp), ... 24 (rss, pages) */
        char *p = strrchr(buf, ')');
        if (!p) continue;
        long long pgrp = -1, rss = 0;
        int field = 2;
        char *save = NULL;
        for (char *tok = strtok_r(p + 1, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
            field++;
            if (field == 5) pgrp = atoll(tok);
            if (field == 24) {
                rss = atoll(tok);
                break;
            }
        }
        if (pgrp != pgid) continue;
        if (rss > 0) total += (uint64_t)rss * (uint64_t)page_kb;
    }
    closedir(d);
    return total;
}

/* Kills the helper's process group and reaps the helper; how it ended goes into how
 * (may be NULL). Waits up to wait_ms first for it to exit by itself. */
static void kill_helper(tr_state_t *st, uint32_t wait_ms, char *how, size_t howlen) {
    int status = 0;
    if (how && howlen) how[0] = '\0';
    if (st->pid <= 0) return;
    uint64_t until = mt_now_ms() + wait_ms;
    pid_t r;
    while ((r = waitpid(st->pid, &status, WNOHANG)) == 0 && mt_now_ms() < until) usleep(5000);
    kill(-st->pid, SIGKILL); /* also what it started, when it already went */
    if (r == 0) {
        while ((r = waitpid(st->pid, &status, 0)) < 0 && errno == EINTR) {}
    }
    if (how && r == st->pid) mt_describe_wait(status, how, howlen);
    st->pid = -1;
}

/* ---- stderr */

static void *err_main(void *arg) {
    tr_state_t *st = arg;
    char line[512];
    size_t n = 0;
    char buf[4096];
    /* close() may cancel this thread, but only while it waits in read(): never while
     * it holds the mutex or stdio's lock. */
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    for (;;) {
        pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
        ssize_t r = read(st->err_fd, buf, sizeof buf);
        pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        for (ssize_t i = 0; i < r; i++) {
            if (buf[i] != '\n') {
                if (n < sizeof line - 1) line[n++] = buf[i];
                continue;
            }
            line[n] = '\0';
            if (n && line[n - 1] == '\r') line[--n] = '\0';
            if (n) {
                log_at(MT_LOG_DEBUG, "helper %d: %s", (int)st->pid, line);
                pthread_mutex_lock(&st->mu);
                mt_fmt(st->last_err, sizeof st->last_err, "%s", line);
                pthread_mutex_unlock(&st->mu);
            }
            n = 0;
        }
    }
    pthread_mutex_lock(&st->mu);
    if (n) {
        line[n] = '\0';
        mt_fmt(st->last_err, sizeof st->last_err, "%s", line);
    }
    st->err_eof = 1;
    pthread_mutex_unlock(&st->mu);
    return NULL;
}

/* Waits up to ms for stderr to end (so its last line is in), then copies that line. */
static void last_stderr(tr_state_t *st, uint32_t ms, char *out, size_t len) {
    uint64_t until = mt_now_ms() + ms;
    for (;;) {
        pthread_mutex_lock(&st->mu);
        int eof = st->err_eof;
        if (eof || mt_now_ms() >= until) mt_fmt(out, len, "%s", st->last_err);
        pthread_mutex_unlock(&st->mu);
        if (eof || mt_now_ms() >= until) return;
        usleep(5000);
    }
}

/* ---- the helper's end: failure reasons */

/* Kills the helper and writes "helper died: ..." or the reason given into st->why. */
static tr_end_t fail(tr_state_t *st, tr_end_t end, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static tr_end_t fail(tr_state_t *st, tr_end_t end, const char *fmt, ...) {
    char what[200] = "";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof what, fmt, ap);
        va_end(ap);
    }
    if (end == TR_DIED) {
        char how[64], tail[160];
        kill_helper(st, 1000, how, sizeof how);
        last_stderr(st, 500, tail, sizeof tail);
        if (tail[0])
            mt_fmt(st->why, sizeof st->why, "helper died: %s: %s", how[0] ? how : "gone", tail);
        else
            mt_fmt(st->why, sizeof st->why, "helper died: %s", how[0] ? how : "gone");
    } else {
        kill_helper(st, 0, NULL, 0);
        if (end == TR_PROTO)
            mt_fmt(st->why, sizeof st->why, "helper protocol error: %s", what);
        else
            mt_fmt(st->why, sizeof st->why, "%s", what);
    }
    return end;
}

/* Reads one reply line from the helper's stdout into *line (NUL-terminated, owned by
 * st until the next call), waiting at most wait_ms (0 = no limit) and checking its
 * memory every TR_MEM_POLL_MS when check_mem. Anything but TR_LINE has killed the
 * helper and put the reason into st->why. */
static tr_end_t read_line(tr_state_t *st, uint32_t wait_ms, int check_mem, char **line) {
    uint64_t until = wait_ms ? mt_now_ms() + wait_ms : 0;
    free(st->line);
    st->line = NULL;
    if (st->pid <= 0) return fail(st, TR_DIED, NULL);
    for (;;) {
        char *nl = st->olen ? memchr(st->obuf, '\n', st->olen) : NULL;
        if (nl) {
            size_t n = (size_t)(nl - st->obuf);
            if (n > TR_LINE_MAX) return fail(st, TR_PROTO, "a reply line longer than %u KiB", TR_LINE_MAX / 1024);
            st->line = mt_malloc(n + 1);
            if (!st->line) return fail(st, TR_PROTO, "out of memory");
            memcpy(st->line, st->obuf, n);
            st->line[n] = '\0';
            memmove(st->obuf, nl + 1, st->olen - n - 1);
            st->olen -= n + 1;
            *line = st->line;
            return TR_LINE;
        }
        if (st->olen > TR_LINE_MAX) return fail(st, TR_PROTO, "a reply line longer than %u KiB", TR_LINE_MAX / 1024);
        if (check_mem) {
            uint64_t kb = group_rss_kb(st->pid);
            if (kb > st->peak_group_kb) st->peak_group_kb = kb;
            if (kb > st->mem_limit_kb)
                /* rounded up: just over the limit never reads "used 128 MiB, over the limit of 128" */
                return fail(st, TR_MEM, "helper used %llu MiB, over the limit of %u MiB",
                            (unsigned long long)((kb + 1023) / 1024), st->mem_limit_mb);
        }
        tr_busy_tick(st);
        int ms = TR_MEM_POLL_MS;
        if (until) {
            uint64_t now = mt_now_ms();
            if (now >= until) return fail(st, TR_LATE, "helper did not answer within %u s", wait_ms / 1000);
            if (until - now < (uint64_t)ms) ms = (int)(until - now);
        }
        struct pollfd pfd = {st->out_fd, POLLIN, 0};
        int pr = poll(&pfd, 1, ms);
        if (pr < 0 && errno != EINTR) return fail(st, TR_PROTO, "poll: %s", strerror(errno));
        if (pr <= 0) continue;
        ssize_t r = read(st->out_fd, st->obuf + st->olen, TR_LINE_MAX + 2 - st->olen);
        if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (r <= 0) return fail(st, TR_DIED, NULL);
        st->olen += (size_t)r;
    }
}

static int write_line(tr_state_t *st, json_t *req) {
    char *s = json_dumps(req, JSON_COMPACT);
    int rc = MT_OK;
    if (!s) return MT_NOMEM;
    size_t len = strlen(s);
    s[len] = '\0';
    const char *parts[2] = {s, "\n"};
    size_t lens[2] = {len, 1};
    for (int i = 0; i < 2 && !rc; i++) {
        const char *p = parts[i];
        size_t left = lens[i];
        while (left > 0) {
            ssize_t w = write(st->in_fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                rc = MT_IO;
                break;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    free(s);
    return rc;
}

/* ---- JSON fields */

static int get_str(json_t *o, const char *key, char *dst, size_t len) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return MT_INVAL;
    mt_fmt(dst, len, "%s", json_string_value(v));
    return MT_OK;
}

static int get_u32(json_t *o, const char *key, uint32_t *dst) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > UINT32_MAX) return MT_INVAL;
    *dst = (uint32_t)json_integer_value(v);
    return MT_OK;
}

/* A finite number >= 0 (an integer is accepted); absent gives def when def >= 0. */
static int get_num(json_t *o, const char *key, double def, double *dst) {
    json_t *v = json_object_get(o, key);
    if (!v && def >= 0) {
        *dst = def;
        return MT_OK;
    }
    if (!json_is_number(v)) return MT_INVAL;
    double x = json_number_value(v);
    if (!isfinite(x) || x < 0) return MT_INVAL;
    *dst = x;
    return MT_OK;
}

/* A reply's status (HELPER.md): the store's names, except crashed, which is the C side's own. */
static int status_of(const char *name) {
    int status;
    if (wire_status_parse(name, &status) || status == MOETUNE__STATUS__STATUS_CRASHED)
        return MOETUNE__STATUS__STATUS_UNKNOWN;
    return status;
}

/* The device fields of hello's "device" object, by name. */
static const struct {
    const char *key;
    size_t off, len; /* len 0: a uint32_t, 1: the uint64_t memory_bytes, else a char array */
} g_dev_fields[] = {
#define LEN_TEXT(f) sizeof(((wrk_device_t *)0)->f)
#define LEN_U32(f) 0
#define LEN_U64(f) 1
#define X(f, kind) {#f, offsetof(wrk_device_t, f), LEN_##kind(f)},
    WRK_DEVICE_GPU_FIELDS(X)
#undef X
#undef LEN_TEXT
#undef LEN_U32
#undef LEN_U64
};

/* Fills dev from a hello line; the missing or mistyped field's name in bad. */
static int parse_hello(json_t *hello, wrk_device_t *dev, const char **bad) {
    json_t *d = json_object_get(hello, "device");
    *bad = "device";
    if (!json_is_object(d)) return MT_INVAL;
    for (size_t i = 0; i < sizeof g_dev_fields / sizeof g_dev_fields[0]; i++) {
        char *p = (char *)dev + g_dev_fields[i].off;
        int rc;
        *bad = g_dev_fields[i].key;
        if (g_dev_fields[i].len == 0) {
            rc = get_u32(d, g_dev_fields[i].key, (uint32_t *)(void *)p);
        } else if (g_dev_fields[i].len == 1) {
            json_t *v = json_object_get(d, g_dev_fields[i].key);
            rc = json_is_integer(v) && json_integer_value(v) >= 0 ? MT_OK : MT_INVAL;
            if (!rc) *(uint64_t *)(void *)p = (uint64_t)json_integer_value(v);
        } else {
            rc = get_str(d, g_dev_fields[i].key, p, g_dev_fields[i].len);
        }
        if (rc) return rc;
    }
    *bad = "compiler";
    if (get_str(hello, "compiler", dev->compiler, sizeof dev->compiler)) return MT_INVAL;
    *bad = "kernel_hash";
    if (get_str(hello, "kernel_hash", dev->kernel_hash, sizeof dev->kernel_hash)) return MT_INVAL;
    *bad = "versions";
    if (get_str(hello, "versions", dev->versions, sizeof dev->versions)) return MT_INVAL;
    *bad = NULL;
    return MT_OK;
}

/* ---- ops */

/* The busy line's interval: MOETUNE_TRITON_BUSY_LOG_MS (milliseconds, 0 = only at close), else
 * TR_BUSY_EVERY_MS; a value that is not a whole number is reported and the default kept. */
static uint64_t busy_every_ms(void) {
    const char *s = getenv("MOETUNE_TRITON_BUSY_LOG_MS");
    if (!s || !*s) return TR_BUSY_EVERY_MS;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end || *s == '-') {
        log_at(MT_LOG_WARN, "MOETUNE_TRITON_BUSY_LOG_MS=%.40s is not a whole number of milliseconds; using %u", s,
               TR_BUSY_EVERY_MS);
        return TR_BUSY_EVERY_MS;
    }
    return (uint64_t)v;
}

static void tr_close(void **state);

/* Forks and execs the helper with pipes for its three streams. */
static int spawn_helper(tr_state_t *st, const char *helper, const wrk_backend_opts_t *opts, char *err, size_t errlen) {
    int in[2] = {-1, -1}, out[2] = {-1, -1}, er[2] = {-1, -1}, ex[2] = {-1, -1};
    char gpu[16];
    const char *argv[12];
    int argc = 0;
    mt_fmt(gpu, sizeof gpu, "%d", opts->gpu_index);
    argv[argc++] = st->python;
    argv[argc++] = helper;
    argv[argc++] = "--kernel";
    argv[argc++] = opts->kernel && *opts->kernel ? opts->kernel : "moetune";
    argv[argc++] = "--gpu";
    argv[argc++] = gpu;
    if (opts->cache_dir && *opts->cache_dir) {
        argv[argc++] = "--cache-dir";
        argv[argc++] = opts->cache_dir;
    }
    argv[argc] = NULL;
    if (pipe2(in, O_CLOEXEC) || pipe2(out, O_CLOEXEC) || pipe2(er, O_CLOEXEC) || pipe2(ex, O_CLOEXEC)) {
        mt_fmt(err, errlen, "pipe: %s", strerror(errno));
        goto fail;
    }
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        mt_fmt(err, errlen, "fork: %s", strerror(errno));
        goto fail;
    }
    if (pid == 0) {
        /* Only async-signal-safe calls from here to exec: the child may have threads. */
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        if (dup2(in[0], 0) < 0 || dup2(out[1], 1) < 0 || dup2(er[1], 2) < 0) _exit(127);
        if (ex[1] != 3 && dup2(ex[1], 3) < 0) _exit(127);
        fcntl(3, F_SETFD, FD_CLOEXEC);
        close_range(4, ~0U, 0);
        execv(st->python_path, (char *const *)argv);
        int e = errno;
        ssize_t w = write(3, &e, sizeof e);
        (void)w;
        _exit(127);
    }
    setpgid(pid, pid); /* both sides, so a kill right after fork reaches the group */
    st->pid = pid;
    close(in[0]);
    close(out[1]);
    close(er[1]);
    close(ex[1]);
    st->in_fd = in[1];
    st->out_fd = out[0];
    st->err_fd = er[0];
    int e = 0;
    ssize_t r;
    while ((r = read(ex[0], &e, sizeof e)) < 0 && errno == EINTR) {}
    close(ex[0]);
    if (r == (ssize_t)sizeof e) {
        kill_helper(st, 1000, NULL, 0);
        mt_fmt(err, errlen, "cannot run python '%s': %s", st->python, strerror(e));
        return MT_ERR;
    }
    return MT_OK;
fail:
    for (int i = 0; i < 2; i++) {
        if (in[i] >= 0) close(in[i]);
        if (out[i] >= 0) close(out[i]);
        if (er[i] >= 0) close(er[i]);
        if (ex[i] >= 0) close(ex[i]);
    }
    return MT_ERR;
}

static mt_status_t tr_open(const wrk_backend_opts_t *opts, void **state, wrk_device_t *dev, char *err, size_t errlen) {
    int rc = MT_ERR;
    char helper[PATH_MAX];
    json_t *j = NULL;
    tr_state_t *st = mt_calloc(1, sizeof *st);
    *state = NULL;
    if (!st) return MT_NOMEM;
    st->pid = -1;
    st->in_fd = st->out_fd = st->err_fd = -1;
    pthread_mutex_init(&st->mu, NULL);
    st->mem_limit_mb = opts->helper_mem_mb ? opts->helper_mem_mb : TR_DEFAULT_MEM_MB;
    st->mem_limit_kb = (uint64_t)st->mem_limit_mb * 1024u;
    st->busy_every_ms = busy_every_ms();
    st->obuf = mt_malloc(TR_LINE_MAX + 2);
    if (!st->obuf) {
        rc = MT_NOMEM;
        goto out;
    }
    mt_fmt(st->python, sizeof st->python, "%s", opts->python && *opts->python ? opts->python : "python3");
    if (find_python(st->python, st->python_path, sizeof st->python_path)) {
        mt_fmt(err, errlen, "cannot run python '%s': %s", st->python, strerror(ENOENT));
        goto out;
    }
    if (mt_helper_path(helper, sizeof helper, err, errlen)) goto out;
    if (spawn_helper(st, helper, opts, err, errlen)) goto out;
    st->started_ms = mt_now_ms();
    if (pthread_create(&st->err_thread, NULL, err_main, st) != 0) {
        mt_fmt(err, errlen, "cannot start the stderr reader: %s", strerror(errno));
        goto out;
    }
    st->err_thread_started = 1;

    char *line = NULL;
    tr_end_t end = read_line(st, TR_START_MS, 1, &line);
    if (end != TR_LINE) {
        mt_fmt(err, errlen, "%s (%s): %s", st->python, st->python_path, st->why);
        goto out;
    }
    json_error_t jerr;
    j = json_loads(line, 0, &jerr);
    json_t *fatal = json_is_object(j) ? json_object_get(j, "fatal") : NULL;
    json_t *hello = json_is_object(j) ? json_object_get(j, "hello") : NULL;
    if (json_is_string(fatal)) {
        char one[200];
        mt_fmt(one, sizeof one, "%s", json_string_value(fatal));
        one[strcspn(one, "\r\n")] = '\0';
        mt_fmt(err, errlen, "%s (%s): %s", st->python, st->python_path, one);
        kill_helper(st, 1000, NULL, 0);
        goto out;
    }
    const char *bad = "hello";
    if (!json_is_object(hello) || parse_hello(hello, dev, &bad)) {
        kill_helper(st, 0, NULL, 0);
        mt_fmt(err, errlen, "%s (%s): helper protocol error: the first line is not a hello (%s)", st->python,
               st->python_path, bad ? bad : "?");
        goto out;
    }
    st->hello_ms = mt_now_ms();
    st->busy_logged_ms = st->hello_ms;
    krn_limits_default(&st->limits);
    st->limits.smem_per_block = dev->smem_per_block;
    st->limits.cc_major = dev->cc_major;
    st->limits.cc_minor = dev->cc_minor;
    st->have_limits = dev->smem_per_block > 0;
    log_at(MT_LOG_INFO, "triton helper %d: %s, %s, %s (hello after %.1f s)", (int)st->pid, dev->name, dev->compiler,
           dev->versions, (double)(st->hello_ms - st->started_ms) / 1000.0);
    *state = st;
    st = NULL;
    rc = MT_OK;
out:
    json_decref(j);
    if (st) {
        void *p = st;
        tr_close(&p);
    }
    return rc;
}

static json_t *shape_json(const krn_shape_t *s) {
    return json_pack("{s:i, s:i, s:i, s:i, s:s, s:i, s:i}", "e", (int)s->e, "n", (int)s->n, "k", (int)s->k, "topk",
                     (int)s->topk, "dtype", s->dtype, "block_n", (int)s->block_n, "block_k", (int)s->block_k);
}

static json_t *config_json(const krn_config_t *c) {
    json_t *o = json_object();
    for (int i = 0; o && i < KRN_N_FIELDS; i++) {
        if (json_object_set_new(o, krn_config_fields[i].file, json_integer(KRN_CONFIG_GET(c, i)))) {
            json_decref(o);
            return NULL;
        }
    }
    return o;
}

static json_t *bs_json(const uint32_t *bs, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_integer(bs[i]));
    return a;
}

/* Racing: per batch size the best median to beat (0 = none), and the margin (0 = off). */
static json_t *best_json(const wrk_measure_t *m, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++) json_array_append_new(a, json_real(m->best_us ? m->best_us[i] : 0.0));
    return a;
}

/* Whether Triton's static rules on this helper's device refuse cfg (the reason in why): such a
 * config is neither compiled ahead nor sent to be measured. */
static int tr_refused(const tr_state_t *st, const krn_shape_t *shape, const krn_config_t *cfg, char *why,
                      size_t whylen) {
    return st->have_limits && krn_check_triton_on(shape, cfg, &st->limits, why, whylen) != MT_OK;
}

static mt_status_t tr_prepare(void *state, const krn_shape_t *shape, const krn_config_t *cfgs, size_t n) {
    tr_state_t *st = state;
    char why[160];
    if (!st || st->pid <= 0) return MT_ERR;
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++)
        if (!tr_refused(st, shape, &cfgs[i], why, sizeof why)) json_array_append_new(list, config_json(&cfgs[i]));
    /* The batch sizes come with each measure; prepare compiles, which does not need them. */
    json_t *req =
        json_pack("{s:s, s:o, s:o, s:[]}", "op", "prepare", "shape", shape_json(shape), "configs", list, "batch_sizes");
    int rc = req ? write_line(st, req) : MT_NOMEM;
    json_decref(req);
    return rc;
}

/* Checks one per-batch-size reply against the request and fills m; the problem in
 * bad (static text or st->why's scratch) when it does not fit. */
static int take_reply(json_t *j, uint64_t id, uint32_t bs, wrk_meas_t *m, char *bad, size_t badlen) {
    uint32_t got_bs = 0;
    json_t *jid = json_object_get(j, "id");
    if (!json_is_integer(jid) || (uint64_t)json_integer_value(jid) != id) {
        mt_fmt(bad, badlen, "a reply for another request (id %lld, expected %llu)",
               json_is_integer(jid) ? (long long)json_integer_value(jid) : -1LL, (unsigned long long)id);
        return MT_INVAL;
    }
    if (json_is_true(json_object_get(j, "done"))) {
        mt_fmt(bad, badlen, "done before batch size %u", bs);
        return MT_INVAL;
    }
    if (get_u32(j, "bs", &got_bs) || got_bs != bs) {
        mt_fmt(bad, badlen, "batch size %u out of order (expected %u)", got_bs, bs);
        return MT_INVAL;
    }
    json_t *js = json_object_get(j, "status");
    int status = json_is_string(js) ? status_of(json_string_value(js)) : MOETUNE__STATUS__STATUS_UNKNOWN;
    if (status == MOETUNE__STATUS__STATUS_UNKNOWN) {
        mt_fmt(bad, badlen, "unknown status '%.40s' at batch size %u", json_is_string(js) ? json_string_value(js) : "",
               bs);
        return MT_INVAL;
    }
    memset(m, 0, sizeof *m);
    m->status = status;
    /* a pruned config carries the statistics of the samples it got, like an ok one */
    if (status == MOETUNE__STATUS__STATUS_OK || status == MOETUNE__STATUS__STATUS_PRUNED) {
        static const char *const keys[] = {"median_us", "min_us",  "mean_us", "stddev_us",
                                           "up_us",     "down_us", "timed_us"};
        double *dst[] = {&m->median_us, &m->min_us, &m->mean_us, &m->stddev_us, &m->up_us, &m->down_us, &m->timed_us};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            /* up/down/timed are optional (0 = not measured), the rest are not */
            if (get_num(j, keys[i], i >= 4 ? 0.0 : -1.0, dst[i])) {
                mt_fmt(bad, badlen, "missing or non-finite %s at batch size %u", keys[i], bs);
                return MT_INVAL;
            }
        }
        if (get_u32(j, "samples", &m->samples)) {
            mt_fmt(bad, badlen, "missing samples at batch size %u", bs);
            return MT_INVAL;
        }
        if (!(m->median_us > 0) || !(m->min_us > 0) || !(m->mean_us > 0)) {
            mt_fmt(bad, badlen, "non-positive latency at batch size %u", bs);
            return MT_INVAL;
        }
    }
    /* why, for a failure; the reference check's error for an ok or pruned one */
    json_t *d = json_object_get(j, "detail");
    if (json_is_string(d)) mt_fmt(m->detail, sizeof m->detail, "%s", json_string_value(d));
    m->detail[strcspn(m->detail, "\r\n")] = '\0';
    return MT_OK;
}

/* Keeps done's "stats" object (HELPER.md) as compact JSON for the closing log line; one too
 * long for the buffer is kept cut, marked with "...". */
static void keep_stats(tr_state_t *st, json_t *stats) {
    if (!json_is_object(stats)) return;
    char *s = json_dumps(stats, JSON_COMPACT | JSON_SORT_KEYS | JSON_REAL_PRECISION(9));
    if (!s) return;
    if (strlen(s) < sizeof st->stats)
        mt_fmt(st->stats, sizeof st->stats, "%s", s);
    else
        mt_fmt(st->stats, sizeof st->stats, "%.*s...", (int)sizeof st->stats - 4, s);
    free(s);
}

/* Adds a done's "phases" (seconds by phase, HELPER.md) to the helper's sums. Absent (an older
 * helper) adds nothing; a malformed object is left out whole, with one warning per helper. */
static void take_phases(tr_state_t *st, json_t *ph) {
    double v[TR_N_PHASES];
    const char *bad = NULL;
    if (!ph) return;
    if (!json_is_object(ph)) bad = "phases is not an object";
    for (size_t i = 0; !bad && i < TR_N_PHASES; i++)
        if (get_num(ph, g_phases[i].key, 0.0, &v[i])) bad = g_phases[i].key;
    if (bad) {
        if (!st->phases_warned)
            log_at(MT_LOG_WARN, "triton helper: phases of a done left out: %s%s", bad,
                   json_is_object(ph) ? " is not a number >= 0" : "");
        st->phases_warned = 1;
        return;
    }
    for (size_t i = 0; i < TR_N_PHASES; i++) st->phase_s[i] += v[i];
}

/* The busy breakdown as of now_ms: the wall since the helper was started (or the phases' sum
 * when larger), the configs, and each phase's share of it, then "start" (up to its hello) and
 * "unreported" (since its last done: the config in flight, or waiting). */
static void busy_text(const tr_state_t *st, uint64_t now_ms, char *out, size_t len) {
    double wall = (double)(now_ms - st->started_ms) / 1000.0, reported = 0;
    double start = st->hello_ms ? (double)(st->hello_ms - st->started_ms) / 1000.0 : wall;
    for (size_t i = 0; i < TR_N_PHASES; i++) reported += st->phase_s[i];
    double unreported = wall - start - reported > 0 ? wall - start - reported : 0.0;
    double denom = start + reported + unreported > wall ? start + reported + unreported : wall;
    double pct = denom > 0 ? 100.0 / denom : 0.0;
    size_t n = 0;
    mt_fmt(out, len, "wall %.0f s, %llu configs:", denom, (unsigned long long)st->configs);
    for (size_t i = 0; i < TR_N_PHASES; i++) {
        n = strlen(out);
        mt_fmt(out + n, len - n, " %s %.0f %%,", g_phases[i].label, st->phase_s[i] * pct);
    }
    n = strlen(out);
    mt_fmt(out + n, len - n, " start %.0f %%, unreported %.0f %%", start * pct, unreported * pct);
}

/* Logs the busy line once every busy_every_ms while the helper runs, so that a worker
 * stopped before the helper's close still leaves one in its log. */
static void tr_busy_tick(tr_state_t *st) {
    if (!st->busy_every_ms || !st->hello_ms) return;
    uint64_t now = mt_now_ms();
    if (now - st->busy_logged_ms < st->busy_every_ms) return;
    char line[600];
    busy_text(st, now, line, sizeof line);
    log_at(MT_LOG_INFO, "triton busy: %s", line);
    st->busy_logged_ms = now;
}

static mt_status_t tr_measure(void *state, const krn_shape_t *shape, const krn_config_t *cfg, const uint32_t *bs,
                              size_t n_bs, const wrk_measure_t *m, wrk_meas_t *out, uint32_t *regs, uint32_t *spills,
                              char *err, size_t errlen) {
    tr_state_t *st = state;
    size_t done = 0;
    json_t *reply = NULL;
    char bad[160];
    tr_end_t end = TR_LINE;
    *regs = *spills = 0;
    if (tr_refused(st, shape, cfg, bad, sizeof bad)) {
        for (size_t i = 0; i < n_bs; i++) {
            memset(&out[i], 0, sizeof out[i]);
            out[i].status = MOETUNE__STATUS__STATUS_INVALID;
            mt_fmt(out[i].detail, sizeof out[i].detail, "%s", bad);
        }
        return MT_OK;
    }
    uint64_t id = ++st->next_id;
    json_t *req =
        json_pack("{s:s, s:I, s:o, s:o, s:o, s:{s:i, s:i, s:i, s:f, s:i, s:I, s:f, s:o, s:f}, s:b}", "op", "measure",
                  "id", (json_int_t)id, "shape", shape_json(shape), "config", config_json(cfg), "batch_sizes",
                  bs_json(bs, n_bs), "measure", "warmup", (int)m->warmup, "min_samples", (int)m->min_samples,
                  "max_samples", (int)m->max_samples, "rsd_target", m->rsd_target, "budget_ms", (int)m->budget_ms,
                  "seed", (json_int_t)m->seed, "race_margin", m->race_margin > 0 ? m->race_margin : 0.0, "best_us",
                  best_json(m, n_bs), "settle_margin", m->settle_margin > 0 ? m->settle_margin : 0.0, "split", 1);
    /* Captured routing: the helper reads the file (it also reads PyTorch captures) and checks
     * its sha256 against the one the sweep was planned on. */
    if (req && shape->routing[0] &&
        json_object_set_new(req, "routing", json_pack("{s:s, s:s}", "path", m->routing_path, "sha256", shape->routing)))
        json_decref(req), req = NULL;
    if (!req) {
        end = fail(st, TR_PROTO, "cannot build the request");
        goto out;
    }
    if (st->pid <= 0 || write_line(st, req)) {
        end = fail(st, TR_DIED, NULL);
        goto out;
    }
    /* one line per batch size, then done */
    while (done <= n_bs) {
        char *line = NULL;
        end = read_line(st, 0, 1, &line);
        if (end != TR_LINE) goto out;
        json_decref(reply);
        json_error_t jerr;
        reply = json_loads(line, 0, &jerr);
        if (!json_is_object(reply)) {
            end = fail(st, TR_PROTO, "a reply that is not a JSON object: %.60s", line);
            goto out;
        }
        json_t *e = json_object_get(reply, "error");
        if (e) {
            end = fail(st, TR_PROTO, "the helper refused the request: %.80s",
                       json_is_string(e) ? json_string_value(e) : "?");
            goto out;
        }
        if (done == n_bs) {
            json_t *jid = json_object_get(reply, "id");
            if (!json_is_true(json_object_get(reply, "done")) || !json_is_integer(jid) ||
                (uint64_t)json_integer_value(jid) != id) {
                end = fail(st, TR_PROTO, "expected done for request %llu after %zu batch sizes", (unsigned long long)id,
                           n_bs);
                goto out;
            }
            if (get_u32(reply, "regs", regs)) *regs = 0;
            if (get_u32(reply, "spills", spills)) *spills = 0;
            json_t *pk = json_object_get(reply, "peak_rss_kb"), *gs = json_object_get(reply, "gpu_s");
            if (json_is_integer(pk) && (uint64_t)json_integer_value(pk) > st->peak_helper_kb)
                st->peak_helper_kb = (uint64_t)json_integer_value(pk);
            if (json_is_number(gs) && json_number_value(gs) >= st->gpu_s) st->gpu_s = json_number_value(gs);
            keep_stats(st, json_object_get(reply, "stats"));
            take_phases(st, json_object_get(reply, "phases"));
            if (!st->first_done_ms) st->first_done_ms = mt_now_ms();
            st->configs++;
            tr_busy_tick(st);
            break;
        }
        if (take_reply(reply, id, bs[done], &out[done], bad, sizeof bad)) {
            end = fail(st, TR_PROTO, "%s", bad);
            goto out;
        }
        done++;
    }
out:
    json_decref(req);
    json_decref(reply);
    if (end == TR_LINE) return MT_OK;
    /* The helper is gone: what it measured stands, the rest crashed with it. */
    for (size_t i = done; i < n_bs; i++) {
        memset(&out[i], 0, sizeof out[i]);
        out[i].status = MOETUNE__STATUS__STATUS_CRASHED;
        mt_fmt(out[i].detail, sizeof out[i].detail, "%s", st->why);
    }
    *regs = *spills = 0;
    log_at(MT_LOG_WARN, "triton helper: %s", st->why);
    mt_fmt(err, errlen, "%s", st->why);
    return MT_ERR;
}

static void tr_close(void **state) {
    if (!state || !*state) return;
    tr_state_t *st = *state;
    if (st->hello_ms) {
        char line[600];
        busy_text(st, mt_now_ms(), line, sizeof line);
        log_at(MT_LOG_INFO, "triton busy at close: %s", line);
    }
    if (st->configs) {
        double wall_s = (double)(mt_now_ms() - st->started_ms) / 1000.0;
        log_at(MT_LOG_INFO,
               "triton helper: %llu configs; peak RSS %llu MiB (its report), %llu MiB (process group, polled);"
               " timed kernels %.1f s of %.1f s (GPU busy %.0f %%); hello after %.1f s, first config done after %.1f s",
               (unsigned long long)st->configs, (unsigned long long)(st->peak_helper_kb / 1024),
               (unsigned long long)(st->peak_group_kb / 1024), st->gpu_s, wall_s,
               wall_s > 0 ? 100.0 * st->gpu_s / wall_s : 0.0,
               st->hello_ms ? (double)(st->hello_ms - st->started_ms) / 1000.0 : 0.0,
               st->first_done_ms ? (double)(st->first_done_ms - st->started_ms) / 1000.0 : 0.0);
        if (st->stats[0]) log_at(MT_LOG_INFO, "triton helper stats: %s", st->stats);
    }
    if (st->pid > 0 && st->in_fd >= 0) {
        json_t *q = json_pack("{s:s}", "op", "quit");
        if (q) write_line(st, q);
        json_decref(q);
    }
    if (st->in_fd >= 0) close(st->in_fd); /* EOF: the helper exits too */
    st->in_fd = -1;
    kill_helper(st, TR_QUIT_MS, NULL, 0);
    if (st->err_thread_started) {
        char tail[8];
        last_stderr(st, 1000, tail, sizeof tail);
        pthread_mutex_lock(&st->mu);
        int eof = st->err_eof;
        pthread_mutex_unlock(&st->mu);
        /* a process outside the group may still hold stderr open */
        if (!eof) pthread_cancel(st->err_thread);
        pthread_join(st->err_thread, NULL);
    }
    if (st->out_fd >= 0) close(st->out_fd);
    if (st->err_fd >= 0) close(st->err_fd);
    pthread_mutex_destroy(&st->mu);
    free(st->obuf);
    free(st->line);
    free(st);
    *state = NULL;
}

const wrk_backend_ops_t wrk_backend_triton = {
    .name = "triton",
    .open = tr_open,
    .prepare = tr_prepare,
    .measure = tr_measure,
    .close = tr_close,
};
