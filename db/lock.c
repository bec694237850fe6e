/* lock.c - the database's writer lock. See lock.h. */
#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "mt.h"

struct db_lock {
    int fd;
};

/* The holder's line from the lock file, without its newline; "" when unreadable. */
static void read_holder(int fd, char *buf, size_t len) {
    ssize_t n = pread(fd, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

mt_status_t db_lock_acquire(const char *db_path, db_lock_t **out, char *err, size_t errlen) {
    char path[4096], host[256] = "", since[32] = "", holder[512];
    *out = NULL;
    if (snprintf(path, sizeof path, "%s.lock", db_path) >= (int)sizeof path) {
        mt_fmt(err, errlen, "database path too long");
        return MT_INVAL;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        mt_fmt(err, errlen, "cannot open lock file %s: %s", path, strerror(errno));
        return MT_IO;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e != EWOULDBLOCK) {
            mt_fmt(err, errlen, "cannot lock %s: %s", path, strerror(e));
            close(fd);
            return MT_IO;
        }
        /* the holder writes its line right after taking the lock: a reader that comes
         * in between sees it a moment later */
        for (int i = 0; i < 20; i++) {
            read_holder(fd, holder, sizeof holder);
            if (holder[0]) break;
            usleep(10000);
        }
        close(fd);
        mt_fmt(err, errlen, "database %s is in use by %s (lock file %s); one coordinator per database", db_path,
               holder[0] ? holder : "another process", path);
        return MT_BUSY;
    }
    db_lock_t *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        mt_fmt(err, errlen, "out of memory");
        return MT_NOMEM;
    }
    l->fd = fd;
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(holder, sizeof holder, "pid %ld on host %s since %s\n", (long)getpid(), host, since);
    if (ftruncate(fd, 0) != 0 || pwrite(fd, holder, (size_t)n, 0) != n)
        log_at(MT_LOG_WARN, "lock file %s: holder not recorded: %s", path, strerror(errno));
    *out = l;
    return MT_OK;
}

void db_lock_release(db_lock_t **pl) {
    if (!pl || !*pl) return;
    db_lock_t *l = *pl;
    /* empty first, so a reader never names a process that no longer holds it */
    if (ftruncate(l->fd, 0) != 0) { /* nothing to do: the lock goes with the descriptor */
    }
    flock(l->fd, LOCK_UN);
    close(l->fd);
    free(l);
    *pl = NULL;
}
