/* child.c - the measuring child process and the parent's handle on it. See child.h. */
#include "child.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "moetune.pb-c.h"
#include "mt.h"

/* Frame types. Parent -> child: PREPARE, MEASURE. Child -> parent: the rest. */
enum { FR_PREPARE = 1, FR_MEASURE, FR_DEVICE, FR_OPENERR, FR_RESULT, FR_FATAL };

#define FRAME_HDR 8u
#define FRAME_MAX (8u * 1024u * 1024u)
#define MAX_PREPARE 65536u

typedef struct {
    krn_shape_t shape;
    krn_config_t cfg;
    wrk_measure_t m;
    uint32_t n_bs;
} req_hdr_t;

typedef struct {
    uint32_t regs, spills, n;
} rep_hdr_t;

typedef struct {
    krn_shape_t shape;
    uint32_t n;
} prep_hdr_t;

struct wrk_child {
    const wrk_backend_ops_t *be;
    wrk_backend_opts_t opts;
    char *sim_faults, *sim_device, *cache_dir, *python, *kernel; /* owned copies of the opts strings */
    pid_t pid;
    int fd;
    wrk_child_state_t state;
    unsigned spawns;
    wrk_device_t dev;
    char error[256];
    uint64_t deadline_ms;
    uint32_t timeout_ms;
    uint8_t *rbuf; /* bytes read from the child, not yet a whole frame */
    size_t rlen, rcap;
    wrk_meas_t *meas;
    size_t n_meas, cap_meas;
    uint32_t regs, spills;
};

/* ---- plumbing shared by both sides */

static int write_all(int fd, const void *buf, size_t len) {
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            struct pollfd pfd = {fd, POLLOUT, 0};
            poll(&pfd, 1, 1000);
            continue;
        }
        if (w <= 0) return MT_IO;
        p += w;
        len -= (size_t)w;
    }
    return MT_OK;
}

/* One frame whose payload is the parts one after the other. */
static int send_parts(int fd, uint32_t type, const void *const *part, const size_t *len, int n) {
    size_t total = 0;
    for (int i = 0; i < n; i++) total += len[i];
    if (total > FRAME_MAX) return MT_INVAL;
    uint32_t hdr[2] = {type, (uint32_t)total};
    if (write_all(fd, hdr, sizeof hdr)) return MT_IO;
    for (int i = 0; i < n; i++)
        if (len[i] && write_all(fd, part[i], len[i])) return MT_IO;
    return MT_OK;
}

static int send_frame(int fd, uint32_t type, const void *a, size_t alen, const void *b, size_t blen) {
    const void *part[2] = {a, b};
    size_t len[2] = {alen, blen};
    return send_parts(fd, type, part, len, 2);
}

static int read_all(int fd, void *buf, size_t len) {
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t r = read(fd, p, len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return MT_IO;
        p += r;
        len -= (size_t)r;
    }
    return MT_OK;
}

/* ---- the child process */

static void child_serve(int fd, const wrk_backend_ops_t *be, const wrk_backend_opts_t *opts) {
    void *state = NULL;
    wrk_device_t dev;
    char err[256] = "";
    uint8_t *payload = NULL;
    wrk_meas_t *out = NULL;
    memset(&dev, 0, sizeof dev);
    if (be->open(opts, &state, &dev, err, sizeof err) != MT_OK) {
        if (!err[0]) mt_fmt(err, sizeof err, "%s backend did not open", be->name);
        send_frame(fd, FR_OPENERR, err, strlen(err), NULL, 0);
        _exit(0);
    }
    if (send_frame(fd, FR_DEVICE, &dev, sizeof dev, NULL, 0)) goto out;
    for (;;) {
        uint32_t hdr[2];
        if (read_all(fd, hdr, sizeof hdr)) goto out; /* the parent closed the pipe: stop */
        if (hdr[1] > FRAME_MAX) goto out;
        free(payload);
        payload = mt_malloc(hdr[1] ? hdr[1] : 1);
        if (!payload || read_all(fd, payload, hdr[1])) goto out;
        if (hdr[0] == FR_PREPARE && hdr[1] >= sizeof(prep_hdr_t)) {
            prep_hdr_t ph;
            memcpy(&ph, payload, sizeof ph);
            if (ph.n <= MAX_PREPARE && hdr[1] == sizeof ph + ph.n * sizeof(krn_config_t) && be->prepare)
                be->prepare(state, &ph.shape, (const krn_config_t *)(payload + sizeof ph), ph.n);
            continue;
        }
        if (hdr[0] != FR_MEASURE || hdr[1] < sizeof(req_hdr_t)) goto out;
        req_hdr_t rq;
        memcpy(&rq, payload, sizeof rq);
        if (rq.n_bs == 0 || rq.n_bs > WRK_CHILD_MAX_BS ||
            hdr[1] != sizeof rq + rq.n_bs * (sizeof(uint32_t) + sizeof(double)))
            goto out;
        uint32_t *bs = mt_malloc(rq.n_bs * sizeof *bs);
        double *best = mt_malloc(rq.n_bs * sizeof *best);
        free(out);
        out = mt_calloc(rq.n_bs, sizeof *out);
        if (!bs || !best || !out) {
            free(bs);
            free(best);
            goto out;
        }
        memcpy(bs, payload + sizeof rq, rq.n_bs * sizeof *bs);
        memcpy(best, payload + sizeof rq + rq.n_bs * sizeof *bs, rq.n_bs * sizeof *best);
        rq.m.best_us = best;
        rep_hdr_t rp = {0, 0, rq.n_bs};
        err[0] = '\0';
        int rc = be->measure(state, &rq.shape, &rq.cfg, bs, rq.n_bs, &rq.m, out, &rp.regs, &rp.spills, err, sizeof err);
        free(bs);
        free(best);
        if (rc != MT_OK) {
            /* The backend can no longer work (a lost context): send what it measured before
             * (the batch size that lost the context says timeout or launch_error), say why
             * and go. */
            if (!err[0]) mt_fmt(err, sizeof err, "%s backend failed (%d)", be->name, rc);
            const void *part[3] = {&rp, out, err};
            size_t len[3] = {sizeof rp, rq.n_bs * sizeof *out, strlen(err)};
            send_parts(fd, FR_FATAL, part, len, 3);
            goto out;
        }
        if (send_frame(fd, FR_RESULT, &rp, sizeof rp, out, rq.n_bs * sizeof *out)) goto out;
    }
out:
    free(payload);
    free(out);
    be->close(&state);
    _exit(0);
}

/* Runs in the freshly forked child; never returns. */
static void child_main(int fd, pid_t parent, const wrk_backend_ops_t *be, const wrk_backend_opts_t *opts) {
    /* The parent decides when to stop; a Ctrl-C to the process group is its to handle. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_DFL);
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(0);
    /* Drop every inherited descriptor (the parent's ZeroMQ sockets above all) so a
     * reconnecting parent really closes its TCP connection. */
    if (fd != 3) {
        if (dup2(fd, 3) < 0) _exit(1);
        fd = 3;
    }
    close_range(4, ~0U, 0);
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    child_serve(fd, be, opts);
    _exit(0);
}

/* ---- the parent's handle */

static int spawn(wrk_child_t *c, char *err, size_t errlen) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        mt_fmt(err, errlen, "socketpair: %s", strerror(errno));
        return MT_ERR;
    }
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) {
        mt_fmt(err, errlen, "fork: %s", strerror(errno));
        close(sv[0]);
        close(sv[1]);
        return MT_ERR;
    }
    if (pid == 0) {
        close(sv[0]);
        child_main(sv[1], parent, c->be, &c->opts);
    }
    close(sv[1]);
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    c->pid = pid;
    c->fd = sv[0];
    c->state = WRK_CHILD_STARTING;
    c->spawns++;
    c->rlen = 0;
    c->deadline_ms = 0;
    memset(&c->dev, 0, sizeof c->dev);
    log_at(MT_LOG_DEBUG, "child %d started (%s backend)", (int)pid, c->be->name);
    return MT_OK;
}

/* SIGKILLs the child, and its whole process group when it made itself a group
 * leader (so what it started goes with it); other children are killed alone, as
 * they always were. */
static void kill_child(pid_t pid) { kill(getpgid(pid) == pid ? -pid : pid, SIGKILL); }

/* Closes the pipe and reaps the child (SIGKILL first when kill_first). Describes
 * how it ended into c->error. */
static void reap(wrk_child_t *c, int kill_first) {
    int status = 0;
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    if (c->pid > 0) {
        if (kill_first) kill_child(c->pid);
        while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {}
        char how[64];
        mt_describe_wait(status, how, sizeof how);
        mt_fmt(c->error, sizeof c->error, "child died: %s", how);
    }
    c->pid = -1;
    c->state = WRK_CHILD_DEAD;
    c->deadline_ms = 0;
    c->rlen = 0;
}

static void fill_all(wrk_child_t *c, int status, const char *detail) {
    for (size_t i = 0; i < c->n_meas; i++) {
        memset(&c->meas[i], 0, sizeof c->meas[i]);
        c->meas[i].status = status;
        mt_fmt(c->meas[i].detail, sizeof c->meas[i].detail, "%s", detail);
    }
    c->regs = c->spills = 0;
}

mt_status_t wrk_child_new(const wrk_backend_ops_t *be, const wrk_backend_opts_t *opts, wrk_child_t **out, char *err,
                          size_t errlen) {
    int rc = MT_OK;
    wrk_child_t *c = mt_calloc(1, sizeof *c);
    *out = NULL;
    if (!c) return MT_NOMEM;
    c->be = be;
    c->opts = *opts;
    c->fd = -1;
    c->pid = -1;
    c->state = WRK_CHILD_DEAD;
    if ((opts->sim_faults && !(c->sim_faults = mt_strdup(opts->sim_faults))) ||
        (opts->sim_device && !(c->sim_device = mt_strdup(opts->sim_device))) ||
        (opts->cache_dir && !(c->cache_dir = mt_strdup(opts->cache_dir))) ||
        (opts->python && !(c->python = mt_strdup(opts->python))) ||
        (opts->kernel && !(c->kernel = mt_strdup(opts->kernel)))) {
        rc = MT_NOMEM;
        goto out;
    }
    c->opts.sim_faults = c->sim_faults;
    c->opts.sim_device = c->sim_device;
    c->opts.cache_dir = c->cache_dir;
    c->opts.python = c->python;
    c->opts.kernel = c->kernel;
    rc = spawn(c, err, errlen);
    if (rc) goto out;
    *out = c;
    c = NULL;
out:
    wrk_child_destroy(&c);
    return rc;
}

void wrk_child_destroy(wrk_child_t **pc) {
    if (!pc || !*pc) return;
    wrk_child_t *c = *pc;
    if (c->fd >= 0) {
        close(c->fd);
        c->fd = -1;
    }
    if (c->pid > 0) {
        /* A well-behaved child exits on EOF; one stuck in a kernel does not. */
        int status;
        uint64_t until = mt_now_ms() + 2000;
        pid_t r;
        while ((r = waitpid(c->pid, &status, WNOHANG)) == 0 && mt_now_ms() < until) usleep(5000);
        if (r == 0) {
            kill_child(c->pid);
            while (waitpid(c->pid, &status, 0) < 0 && errno == EINTR) {}
        }
    }
    free(c->rbuf);
    free(c->meas);
    free(c->sim_faults);
    free(c->sim_device);
    free(c->cache_dir);
    free(c->python);
    free(c->kernel);
    free(c);
    *pc = NULL;
}

mt_status_t wrk_child_restart(wrk_child_t *c, char *err, size_t errlen) {
    if (c->state != WRK_CHILD_DEAD) reap(c, 1);
    return spawn(c, err, errlen);
}

int wrk_child_fd(const wrk_child_t *c) { return c->fd; }
wrk_child_state_t wrk_child_state(const wrk_child_t *c) { return c->state; }
pid_t wrk_child_pid(const wrk_child_t *c) { return c->pid; }
unsigned wrk_child_spawns(const wrk_child_t *c) { return c->spawns; }
const wrk_device_t *wrk_child_device(const wrk_child_t *c) { return &c->dev; }
const char *wrk_child_error(const wrk_child_t *c) { return c->error; }
uint64_t wrk_child_deadline_ms(const wrk_child_t *c) { return c->state == WRK_CHILD_BUSY ? c->deadline_ms : 0; }

mt_status_t wrk_child_prepare(wrk_child_t *c, const krn_shape_t *shape, const krn_config_t *cfgs, size_t n) {
    if (c->state != WRK_CHILD_IDLE || n == 0 || n > MAX_PREPARE) return MT_INVAL;
    prep_hdr_t ph;
    memset(&ph, 0, sizeof ph);
    ph.shape = *shape;
    ph.n = (uint32_t)n;
    return send_frame(c->fd, FR_PREPARE, &ph, sizeof ph, cfgs, n * sizeof *cfgs) ? MT_ERR : MT_OK;
}

mt_status_t wrk_child_start(wrk_child_t *c, const krn_shape_t *shape, const krn_config_t *cfg, const uint32_t *bs,
                            size_t n_bs, const wrk_measure_t *m) {
    if (c->state != WRK_CHILD_IDLE || n_bs == 0 || n_bs > WRK_CHILD_MAX_BS) return MT_INVAL;
    if (n_bs > c->cap_meas) {
        wrk_meas_t *grown = mt_realloc(c->meas, n_bs * sizeof *grown);
        if (!grown) return MT_NOMEM;
        c->meas = grown;
        c->cap_meas = n_bs;
    }
    c->n_meas = n_bs;
    req_hdr_t rq;
    memset(&rq, 0, sizeof rq);
    rq.shape = *shape;
    rq.cfg = *cfg;
    rq.m = *m;
    rq.n_bs = (uint32_t)n_bs;
    rq.m.best_us = NULL; /* travels after the batch sizes */
    c->timeout_ms = m->timeout_ms ? m->timeout_ms : WRK_CHILD_DEFAULT_TIMEOUT_MS;
    double *best = mt_calloc(n_bs, sizeof *best);
    if (!best) return MT_NOMEM;
    if (m->best_us) memcpy(best, m->best_us, n_bs * sizeof *best);
    const void *part[3] = {&rq, bs, best};
    size_t len[3] = {sizeof rq, n_bs * sizeof *bs, n_bs * sizeof *best};
    int sent = send_parts(c->fd, FR_MEASURE, part, len, 3);
    free(best);
    if (sent) {
        mt_fmt(c->error, sizeof c->error, "cannot write to the child: %s", strerror(errno));
        return MT_ERR;
    }
    c->state = WRK_CHILD_BUSY;
    c->deadline_ms = mt_now_ms() + c->timeout_ms;
    return MT_OK;
}

/* The child went away (EOF, a broken pipe or a bad frame): turn that into the
 * event its state calls for. */
static void on_gone(wrk_child_t *c, int kill_first, wrk_child_event_t *ev) {
    wrk_child_state_t was = c->state;
    reap(c, kill_first);
    if (was == WRK_CHILD_BUSY) {
        fill_all(c, MOETUNE__STATUS__STATUS_CRASHED, c->error);
        *ev = WRK_CHILD_EV_DONE;
    } else if (was == WRK_CHILD_STARTING) {
        char why[200];
        mt_fmt(why, sizeof why, "%s", c->error);
        mt_fmt(c->error, sizeof c->error, "%s while opening the backend", why);
        *ev = WRK_CHILD_EV_OPEN_FAILED;
    } else {
        *ev = WRK_CHILD_EV_DIED;
    }
}

/* Takes the measurements of a RESULT or FATAL frame (a header, then one wrk_meas_t per
 * batch size) into c; the payload bytes they fill, or 0 when the frame does not hold
 * this request's measurements. */
static size_t take_meas(wrk_child_t *c, const uint8_t *p, uint32_t len) {
    rep_hdr_t rp;
    const size_t need = sizeof rp + c->n_meas * sizeof(wrk_meas_t);
    if (len < need) return 0;
    memcpy(&rp, p, sizeof rp);
    if (rp.n != c->n_meas) return 0;
    memcpy(c->meas, p + sizeof rp, c->n_meas * sizeof(wrk_meas_t));
    for (size_t i = 0; i < c->n_meas; i++) c->meas[i].detail[sizeof c->meas[i].detail - 1] = '\0';
    c->regs = rp.regs;
    c->spills = rp.spills;
    return need;
}

/* Handles one whole frame; sets *ev when it completes something. */
static void on_frame(wrk_child_t *c, uint32_t type, const uint8_t *p, uint32_t len, wrk_child_event_t *ev) {
    if (type == FR_DEVICE && c->state == WRK_CHILD_STARTING && len == sizeof c->dev) {
        memcpy(&c->dev, p, sizeof c->dev);
        c->dev.name[sizeof c->dev.name - 1] = '\0';
        c->dev.uuid[sizeof c->dev.uuid - 1] = '\0';
        c->dev.compiler[sizeof c->dev.compiler - 1] = '\0';
        c->dev.kernel_hash[sizeof c->dev.kernel_hash - 1] = '\0';
        c->dev.driver_version[sizeof c->dev.driver_version - 1] = '\0';
        c->dev.cuda_version[sizeof c->dev.cuda_version - 1] = '\0';
        c->dev.versions[sizeof c->dev.versions - 1] = '\0';
        c->state = WRK_CHILD_IDLE;
        *ev = WRK_CHILD_EV_READY;
        return;
    }
    if (type == FR_OPENERR && c->state == WRK_CHILD_STARTING) {
        size_t n = len < sizeof c->error - 1 ? len : sizeof c->error - 1;
        char why[256];
        memcpy(why, p, n);
        why[n] = '\0';
        reap(c, 0);
        mt_fmt(c->error, sizeof c->error, "%s", why);
        *ev = WRK_CHILD_EV_OPEN_FAILED;
        return;
    }
    if (type == FR_RESULT && c->state == WRK_CHILD_BUSY && take_meas(c, p, len) == len) {
        c->state = WRK_CHILD_IDLE;
        c->deadline_ms = 0;
        *ev = WRK_CHILD_EV_DONE;
        return;
    }
    size_t used = 0;
    if (type == FR_FATAL && c->state == WRK_CHILD_BUSY && (used = take_meas(c, p, len)) > 0) {
        /* The measurements the backend made before it failed stand; the batch sizes it
         * did not reach are launch_error with its reason (the rest of the payload). */
        char why[160];
        size_t n = len - used < sizeof why - 1 ? len - used : sizeof why - 1;
        memcpy(why, p + used, n);
        why[n] = '\0';
        reap(c, 1);
        for (size_t i = 0; i < c->n_meas; i++) {
            wrk_meas_t *m = &c->meas[i];
            if (m->status <= MOETUNE__STATUS__STATUS_UNKNOWN || m->status > MOETUNE__STATUS__STATUS_CRASHED) {
                memset(m, 0, sizeof *m);
                m->status = MOETUNE__STATUS__STATUS_LAUNCH_ERROR;
                mt_fmt(m->detail, sizeof m->detail, "%s", why);
            }
        }
        c->regs = c->spills = 0;
        *ev = WRK_CHILD_EV_DONE;
        return;
    }
    /* Anything else means the two sides disagree: do not trust this child. */
    log_at(MT_LOG_WARN, "child %d sent an unexpected frame (type %u, %u bytes); replacing it", (int)c->pid, type, len);
    on_gone(c, 1, ev);
}

/* Consumes one whole frame from the read buffer; 1 when it did, 0 when none is
 * complete, -1 out of memory. */
static int take_frame(wrk_child_t *c, wrk_child_event_t *ev) {
    uint32_t hdr[2];
    if (c->rlen < FRAME_HDR) return 0;
    memcpy(hdr, c->rbuf, sizeof hdr);
    if (hdr[1] > FRAME_MAX) {
        on_gone(c, 1, ev);
        return 1;
    }
    if (c->rlen < FRAME_HDR + hdr[1]) return 0;
    size_t used = FRAME_HDR + hdr[1];
    uint8_t *copy = mt_malloc(hdr[1] ? hdr[1] : 1);
    if (!copy) return -1;
    memcpy(copy, c->rbuf + FRAME_HDR, hdr[1]);
    memmove(c->rbuf, c->rbuf + used, c->rlen - used);
    c->rlen -= used;
    on_frame(c, hdr[0], copy, hdr[1], ev);
    free(copy);
    return 1;
}

mt_status_t wrk_child_poll(wrk_child_t *c, int wait_ms, wrk_child_event_t *ev) {
    int took;
    *ev = WRK_CHILD_EV_NONE;
    if (c->state == WRK_CHILD_DEAD) return MT_OK;
    took = take_frame(c, ev);
    if (took) return took < 0 ? MT_ERR : MT_OK;
    if (c->state == WRK_CHILD_BUSY) {
        uint64_t now = mt_now_ms();
        if (now >= c->deadline_ms)
            wait_ms = 0;
        else if (wait_ms < 0 || (uint64_t)wait_ms > c->deadline_ms - now)
            wait_ms = (int)(c->deadline_ms - now);
    }
    struct pollfd pfd = {c->fd, POLLIN, 0};
    if (poll(&pfd, 1, wait_ms) > 0) {
        int eof = 0;
        for (;;) {
            if (c->rcap - c->rlen < 65536) {
                size_t cap = c->rcap ? c->rcap * 2 : 131072;
                uint8_t *grown = mt_realloc(c->rbuf, cap);
                if (!grown) return MT_ERR;
                c->rbuf = grown;
                c->rcap = cap;
            }
            ssize_t r = read(c->fd, c->rbuf + c->rlen, c->rcap - c->rlen);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            if (r <= 0) {
                eof = 1;
                break;
            }
            c->rlen += (size_t)r;
        }
        took = take_frame(c, ev);
        if (took) return took < 0 ? MT_ERR : MT_OK;
        if (eof) {
            /* Frames sent before the end were handled on earlier calls. */
            on_gone(c, 0, ev);
            return MT_OK;
        }
    }
    if (c->state == WRK_CHILD_BUSY && mt_now_ms() >= c->deadline_ms) {
        char why[96];
        mt_fmt(why, sizeof why, "timed out after %u ms", c->timeout_ms);
        log_at(MT_LOG_WARN, "child %d: config %s; killing it", (int)c->pid, why);
        reap(c, 1);
        fill_all(c, MOETUNE__STATUS__STATUS_TIMEOUT, why);
        *ev = WRK_CHILD_EV_DONE;
    }
    return MT_OK;
}

void wrk_child_results(const wrk_child_t *c, const wrk_meas_t **meas, size_t *n, uint32_t *regs, uint32_t *spills) {
    *meas = c->meas;
    *n = c->n_meas;
    if (regs) *regs = c->regs;
    if (spills) *spills = c->spills;
}

mt_status_t wrk_child_wait_ready(wrk_child_t *c, int timeout_ms, char *err, size_t errlen) {
    uint64_t until = mt_now_ms() + (uint64_t)timeout_ms;
    while (c->state == WRK_CHILD_STARTING) {
        uint64_t now = mt_now_ms();
        if (now >= until) {
            mt_fmt(err, errlen, "%s backend did not open within %d ms", c->be->name, timeout_ms);
            return MT_AGAIN;
        }
        wrk_child_event_t ev;
        if (wrk_child_poll(c, (int)(until - now), &ev)) return MT_ERR;
    }
    if (c->state == WRK_CHILD_IDLE) return MT_OK;
    mt_fmt(err, errlen, "%s", c->error);
    return MT_ERR;
}

mt_status_t wrk_child_measure(wrk_child_t *c, const krn_shape_t *shape, const krn_config_t *cfg, const uint32_t *bs,
                              size_t n_bs, const wrk_measure_t *m, wrk_meas_t *out, uint32_t *regs, uint32_t *spills,
                              char *err, size_t errlen) {
    int rc = wrk_child_start(c, shape, cfg, bs, n_bs, m);
    if (rc) {
        mt_fmt(err, errlen, "cannot start the measurement: %s",
               c->state == WRK_CHILD_IDLE ? c->error : "child not idle");
        return rc;
    }
    wrk_child_event_t ev = WRK_CHILD_EV_NONE;
    while (ev != WRK_CHILD_EV_DONE) {
        if (wrk_child_poll(c, 1000, &ev)) return MT_ERR;
    }
    memcpy(out, c->meas, n_bs * sizeof *out);
    *regs = c->regs;
    *spills = c->spills;
    if (c->state == WRK_CHILD_DEAD) {
        rc = wrk_child_restart(c, err, errlen);
        if (rc) return rc;
        rc = wrk_child_wait_ready(c, 120000, err, errlen);
    }
    return rc;
}
