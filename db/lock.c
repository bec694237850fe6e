/* lock.c - the database's writer lock. See lock.h. */
#include "lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "mt.h"

struct db_lock {
    int fd;    /* the .lock file: who holds it */
    int db_fd; /* the database file itself: the lock that counts */
};

/* The holder's line from the lock file, without its newline; "" when unreadable. */
static void read_holder(int fd, char *buf, size_t len) {
    ssize_t n = pread(fd, buf, len - 1, 0);
    buf[n > 0 ? n : 0] = '\0';
    buf[strcspn(buf, "\n")] = '\0';
}

/* The pid holding an flock on the file (dev, ino), from /proc/locks; 0 when unknown. */
static long flock_holder(dev_t dev, ino_t ino) {
    long pid = 0;
    FILE *f = fopen("/proc/locks", "r");
    if (!f) return 0;
    char line[256];
    while (!pid && fgets(line, sizeof line, f)) {
        long p = 0;
        unsigned int maj = 0, min = 0;
        unsigned long long in = 0;
        char kind[16] = "";
        if (sscanf(line, "%*d: %15s %*s %*s %ld %x:%x:%llu", kind, &p, &maj, &min, &in) == 5 &&
            strcmp(kind, "FLOCK") == 0 && maj == major(dev) && min == minor(dev) && in == (unsigned long long)ino)
            pid = p;
    }
    fclose(f);
    return pid;
}

/* Opens the database file itself (created empty when missing: SQLite takes an empty file
 * for an empty database) without blocking; a FIFO or a device is refused. */
static int open_db_file(const char *db_path, int *fd, char *err, size_t errlen) {
    struct stat st;
    *fd = open(db_path, O_RDWR | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
    if (*fd < 0) {
        int e = errno;
        mt_fmt(err, errlen, "cannot open database %s: %s", db_path, strerror(e));
        return e == EISDIR ? MT_INVAL : MT_IO;
    }
    if (fstat(*fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        mt_fmt(err, errlen, "database %s: not a regular file", db_path);
        close(*fd);
        *fd = -1;
        return MT_INVAL;
    }
    return MT_OK;
}

/* The refusal of a database some process holds: its holder line from the lock file when
 * there is one, else the pid that holds the file (another path to the same file). */
static int busy(const char *db_path, const char *lock_path, int lock_fd, int db_fd, char *err, size_t errlen) {
    char holder[512] = "";
    struct stat st;
    /* the holder writes its line right after taking the lock: a reader that comes in
     * between sees it a moment later */
    for (int i = 0; lock_fd >= 0 && i < 20; i++) {
        read_holder(lock_fd, holder, sizeof holder);
        if (holder[0]) break;
        usleep(10000);
    }
    if (!holder[0] && fstat(db_fd, &st) == 0) {
        long pid = flock_holder(st.st_dev, st.st_ino);
        if (pid > 0) mt_fmt(holder, sizeof holder, "pid %ld through another path to the same file", pid);
    }
    mt_fmt(err, errlen, "database %s is in use by %s (lock file %s); one coordinator per database file", db_path,
           holder[0] ? holder : "another process", lock_path);
    return MT_BUSY;
}

mt_status_t db_lock_acquire(const char *db_path, db_lock_t **out, char *err, size_t errlen) {
    char path[4096], host[256] = "", since[32] = "", holder[512];
    int rc = MT_OK, fd = -1, db_fd = -1;
    *out = NULL;
    if (snprintf(path, sizeof path, "%s.lock", db_path) >= (int)sizeof path) {
        mt_fmt(err, errlen, "database path too long");
        return MT_INVAL;
    }
    /* The lock that counts is on the database file itself: a symlink or a hard link to it
     * from another folder names the same file, so it meets the same lock. The .lock
     * file beside the path records who holds it. */
    rc = open_db_file(db_path, &db_fd, err, errlen);
    if (rc) return rc;
    fd = open(path, O_RDWR | O_CREAT | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0644);
    if (fd < 0) {
        mt_fmt(err, errlen, "cannot open lock file %s: %s", path, strerror(errno));
        rc = MT_IO;
        goto out;
    }
    if (flock(db_fd, LOCK_EX | LOCK_NB) != 0 || flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        if (e != EWOULDBLOCK) {
            mt_fmt(err, errlen, "cannot lock %s: %s", db_path, strerror(e));
            rc = MT_IO;
            goto out;
        }
        rc = busy(db_path, path, fd, db_fd, err, errlen);
        goto out;
    }
    db_lock_t *l = calloc(1, sizeof *l);
    if (!l) {
        mt_fmt(err, errlen, "out of memory");
        rc = MT_NOMEM;
        goto out;
    }
    l->fd = fd;
    l->db_fd = db_fd;
    fd = db_fd = -1;
    gethostname(host, sizeof host - 1);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm)) strftime(since, sizeof since, "%Y-%m-%dT%H:%M:%SZ", &tm);
    int n = snprintf(holder, sizeof holder, "pid %ld on host %s since %s\n", (long)getpid(), host, since);
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, holder, (size_t)n, 0) != n)
        log_at(MT_LOG_WARN, "lock file %s: holder not recorded: %s", path, strerror(errno));
    *out = l;
out:
    if (fd >= 0) close(fd);
    if (db_fd >= 0) close(db_fd);
    return rc;
}

void db_lock_release(db_lock_t **pl) {
    if (!pl || !*pl) return;
    db_lock_t *l = *pl;
    /* empty first, so a reader never names a process that no longer holds it */
    if (ftruncate(l->fd, 0) != 0) { /* nothing to do: the lock goes with the descriptor */
    }
    flock(l->fd, LOCK_UN);
    close(l->fd);
    flock(l->db_fd, LOCK_UN);
    close(l->db_fd);
    free(l);
    *pl = NULL;
}
