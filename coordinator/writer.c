/* writer.c - the database writer thread. See writer.h. */
#include "writer.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mt.h"

enum { W_IDLE, W_QUEUED, W_RUNNING, W_DONE };

struct writer {
    store_t *db;
    pthread_t th;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int fds[2];         /* [0] read by the loop, [1] written by the thread */
    int state;          /* under mu */
    bool quit;          /* under mu */
    writer_fn prep, fn; /* prep: outside the transaction, may be NULL */
    void *arg;
    int rc;
    char why[256];
    uint64_t last_us;
};

static void *writer_main(void *p) {
    writer_t *w = p;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->state != W_QUEUED && !w->quit) pthread_cond_wait(&w->cv, &w->mu);
        if (w->state != W_QUEUED) break;
        w->state = W_RUNNING;
        pthread_mutex_unlock(&w->mu);
        uint64_t t0 = mt_now_us();
        char why[sizeof w->why] = "";
        int rc = w->prep ? w->prep(w->db, w->arg) : MT_OK;
        bool prepped = rc == MT_OK;
        if (prepped) rc = store_begin(w->db);
        if (!rc) rc = w->fn(w->db, w->arg);
        if (!rc) rc = store_commit(w->db);
        if (rc && prepped) {
            mt_fmt(why, sizeof why, "%s", store_errmsg(w->db));
            store_rollback(w->db);
        }
        uint64_t took = mt_now_us() - t0;
        pthread_mutex_lock(&w->mu);
        w->rc = rc;
        memcpy(w->why, why, sizeof why);
        w->last_us = took;
        w->state = W_DONE;
        ssize_t n;
        do n = write(w->fds[1], "x", 1);
        while (n < 0 && errno == EINTR);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

mt_status_t writer_new(const char *db_path, writer_t **out, char *err, size_t errlen) {
    int rc = MT_OK;
    *out = NULL;
    writer_t *w = mt_calloc(1, sizeof *w);
    if (!w) {
        mt_fmt(err, errlen, "out of memory");
        return MT_NOMEM;
    }
    w->fds[0] = w->fds[1] = -1;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    rc = store_open(db_path, &w->db, err, errlen);
    if (rc) {
        rc = MT_IO;
        goto out;
    }
    /* a locked database fails the batch after a while (kept and retried by the
     * loop, reported in status) rather than hiding the condition in a long wait */
    store_set_busy_ms(w->db, WRITER_BUSY_MS);
    if (pipe2(w->fds, O_CLOEXEC | O_NONBLOCK) != 0) {
        mt_fmt(err, errlen, "pipe: %s", strerror(errno));
        rc = MT_ERR;
        goto out;
    }
    if (pthread_create(&w->th, NULL, writer_main, w) != 0) {
        mt_fmt(err, errlen, "cannot start the writer thread");
        rc = MT_ERR;
        goto out;
    }
    w->started = true;
out:
    if (rc) {
        writer_destroy(&w);
        return rc;
    }
    *out = w;
    return MT_OK;
}

int writer_fd(const writer_t *w) { return w->fds[0]; }

mt_status_t writer_submit(writer_t *w, writer_fn fn, void *arg) { return writer_submit_prep(w, NULL, fn, arg); }

mt_status_t writer_submit_prep(writer_t *w, writer_fn prep, writer_fn fn, void *arg) {
    int rc = MT_OK;
    pthread_mutex_lock(&w->mu);
    if (w->state != W_IDLE) {
        rc = MT_BUSY;
    } else {
        w->prep = prep;
        w->fn = fn;
        w->arg = arg;
        w->state = W_QUEUED;
        pthread_cond_signal(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return rc;
}

bool writer_busy(const writer_t *w) {
    writer_t *m = (writer_t *)w;
    pthread_mutex_lock(&m->mu);
    bool busy = m->state != W_IDLE;
    pthread_mutex_unlock(&m->mu);
    return busy;
}

mt_status_t writer_poll(writer_t *w, int timeout_ms, void **arg, int *rc, char *why, size_t whylen) {
    for (;;) {
        char buf[16];
        while (read(w->fds[0], buf, sizeof buf) > 0) {}
        pthread_mutex_lock(&w->mu);
        bool done = w->state == W_DONE, idle = w->state == W_IDLE;
        if (done) {
            *arg = w->arg;
            *rc = w->rc;
            if (why && whylen) mt_fmt(why, whylen, "%s", w->why);
            w->arg = NULL;
            w->state = W_IDLE;
        }
        pthread_mutex_unlock(&w->mu);
        if (done) return MT_OK;
        if (idle || timeout_ms == 0) return MT_AGAIN;
        struct pollfd pfd = {.fd = w->fds[0], .events = POLLIN};
        int n = poll(&pfd, 1, timeout_ms);
        if (n == 0) return MT_AGAIN;
        if (n < 0 && errno != EINTR) return MT_ERR;
    }
}

uint64_t writer_last_us(const writer_t *w) {
    writer_t *m = (writer_t *)w;
    pthread_mutex_lock(&m->mu);
    uint64_t us = m->last_us;
    pthread_mutex_unlock(&m->mu);
    return us;
}

void writer_destroy(writer_t **pw) {
    if (!pw || !*pw) return;
    writer_t *w = *pw;
    if (w->started) {
        pthread_mutex_lock(&w->mu);
        w->quit = true;
        pthread_cond_signal(&w->cv);
        pthread_mutex_unlock(&w->mu);
        pthread_join(w->th, NULL);
    }
    if (w->fds[0] >= 0) close(w->fds[0]);
    if (w->fds[1] >= 0) close(w->fds[1]);
    store_close(&w->db);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    free(w);
    *pw = NULL;
}
