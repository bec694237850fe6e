/* lock.c - the database's writer lock. See lock.h. */
#include "lock.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
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
    /* through a symlink: the holder's line is beside the file it points to */
    char real[PATH_MAX], real_lock[PATH_MAX + 8];
    if (!holder[0] && realpath(db_path, real) && snprintf(real_lock, sizeof real_lock, "%s.lock", real) > 0 &&
        strcmp(real_lock, lock_path) != 0) {
        int rfd = open(real_lock, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
        if (rfd >= 0 && fstat(rfd, &st) == 0 && S_ISREG(st.st_mode)) read_holder(rfd, holder, sizeof holder);
        if (rfd >= 0) close(rfd);
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
    db_lock_t *l = mt_calloc(1, sizeof *l);
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

/* path with its folder resolved (and the file itself when it exists): two names of one
 * file, or of one file to be, give the same text. False when the folder does not exist. */
static bool canonical(const char *path, char *buf, size_t len) {
    char dir[4096], real[PATH_MAX];
    if (realpath(path, real)) return snprintf(buf, len, "%s", real) < (int)len;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == path)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    if (!realpath(dir, real)) return false;
    return snprintf(buf, len, "%s/%s", strcmp(real, "/") == 0 ? "" : real, base) < (int)len;
}

mt_status_t db_lock_refuse_overwrite(const char *db_path, const char *out_path, char *err, size_t errlen) {
    static const struct {
        const char *suffix, *what;
    } companions[] = {{"", "the database"},
                      {"-wal", "the database's -wal file"},
                      {"-shm", "the database's -shm file"},
                      {"-journal", "the database's -journal file"},
                      {".lock", "the database's lock file"}};
    char out_c[4200], real_db[PATH_MAX];
    struct stat so, sc;
    bool out_exists = stat(out_path, &so) == 0, have_out = canonical(out_path, out_c, sizeof out_c);
    /* SQLite names the -wal and -shm after the database's resolved path; the .lock goes
     * beside the path as given: both count */
    const char *bases[2] = {db_path, realpath(db_path, real_db) ? real_db : db_path};
    for (int b = 0; b < 2; b++) {
        for (size_t i = 0; i < sizeof companions / sizeof *companions; i++) {
            char cand[4200], cand_c[4200];
            if (snprintf(cand, sizeof cand, "%s%s", bases[b], companions[i].suffix) >= (int)sizeof cand) continue;
            bool same = out_exists && stat(cand, &sc) == 0 && so.st_dev == sc.st_dev && so.st_ino == sc.st_ino;
            same = same || (have_out && canonical(cand, cand_c, sizeof cand_c) && strcmp(out_c, cand_c) == 0);
            if (same) {
                mt_fmt(err, errlen, "%s is %s (%s); refusing to write over it", out_path, companions[i].what, db_path);
                return MT_INVAL;
            }
        }
    }
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
    flock(l->db_fd, LOCK_UN);
    close(l->db_fd);
    free(l);
    *pl = NULL;
}
