/* mt.c - logging, clocks, parsing and small helpers shared by every module. */
#define _POSIX_C_SOURCE 200809L
#include "mt.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <limits.h>
#include <time.h>
#include <unistd.h>

mt_log_level_t mt_log_level = MT_LOG_INFO;
static char g_tag[96] = "moetune";
volatile int mt_stop_requested = 0;

void mt_log_init(const char *tag, mt_log_level_t level) {
    mt_log_level = level;
    if (tag) snprintf(g_tag, sizeof g_tag, "%s", tag);
}

mt_status_t mt_log_parse_level(const char *name, mt_log_level_t *out) {
    static const struct {
        const char *name;
        mt_log_level_t level;
    } table[] = {{"error", MT_LOG_ERROR}, {"warn", MT_LOG_WARN}, {"info", MT_LOG_INFO}, {"debug", MT_LOG_DEBUG}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(name, table[i].name) == 0) {
            *out = table[i].level;
            return MT_OK;
        }
    }
    return MT_INVAL;
}

void mt_log_write(mt_log_level_t level, const char *fmt, ...) {
    static const char *names[] = {"ERROR", "WARN", "INFO", "DEBUG"};
    char stamp[32];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One write per line so lines of concurrent processes do not interleave. */
    fprintf(stderr, "%s.%03ldZ %-5s [%s] %s\n", stamp, ts.tv_nsec / 1000000L, names[level], g_tag, line);
}

uint64_t mt_now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000ULL + (uint64_t)ts.tv_nsec / 1000ULL;
}

uint64_t mt_now_ms(void) { return mt_now_us() / 1000ULL; }

int64_t mt_wall_s(void) { return (int64_t)time(NULL); }

char *mt_fmt(char *buf, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return buf;
}

mt_status_t mt_parse_u64(const char *s, uint64_t *out) {
    if (!s || !*s || *s == '-' || *s == '+') return MT_INVAL;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || *end != '\0') return MT_INVAL;
    *out = (uint64_t)v;
    return MT_OK;
}

mt_status_t mt_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out) {
    uint64_t v;
    if (mt_parse_u64(s, &v) != MT_OK || v < min || v > max) return MT_INVAL;
    *out = (uint32_t)v;
    return MT_OK;
}

mt_status_t mt_parse_double(const char *s, double *out) {
    if (!s || !*s) return MT_INVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end != '\0' || v != v) return MT_INVAL;
    *out = v;
    return MT_OK;
}

mt_status_t mt_parse_u32_list(const char *s, uint32_t min, uint32_t max, uint32_t **out, size_t *n, char *err,
                              size_t errlen) {
    int rc = MT_OK;
    char *copy = NULL;
    uint32_t *vals = NULL;
    size_t count = 0, cap = 0;
    *out = NULL;
    *n = 0;
    if (!s || !*s) {
        mt_fmt(err, errlen, "empty list");
        return MT_INVAL;
    }
    copy = strdup(s);
    if (!copy) return MT_NOMEM;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        uint32_t v;
        if (mt_parse_u32(tok, min, max, &v) != MT_OK) {
            mt_fmt(err, errlen, "'%s' is not an integer in %u..%u", tok, min, max);
            rc = MT_INVAL;
            goto out;
        }
        if (mt_grow((void **)&vals, &cap, count + 1, sizeof *vals, 16) != MT_OK) {
            rc = MT_NOMEM;
            goto out;
        }
        vals[count++] = v;
    }
    if (count == 0) {
        mt_fmt(err, errlen, "empty list");
        rc = MT_INVAL;
        goto out;
    }
    *out = vals;
    *n = count;
    vals = NULL;
out:
    free(vals);
    free(copy);
    return rc;
}

uint64_t mt_fnv1a(uint64_t h, const void *data, size_t len) {
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

uint64_t mt_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

const char *mt_u32_problem(const char *s, uint32_t min, uint32_t max, char *buf, size_t len) {
    bool digits = s && *s;
    for (const char *p = s; digits && *p; p++) digits = *p >= '0' && *p <= '9';
    if (digits)
        mt_fmt(buf, len, "out of range (%u..%u)", min, max);
    else
        mt_fmt(buf, len, "%s", min ? "not a positive integer" : "not a whole number");
    return buf;
}

mt_status_t mt_mkdirs(const char *path, char *err, size_t errlen) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp) {
        mt_fmt(err, errlen, "path too long: %s", path);
        return MT_INVAL;
    }
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
            mt_fmt(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
            return MT_IO;
        }
        *p = '/';
    }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) {
        mt_fmt(err, errlen, "cannot create %s: %s", tmp, strerror(errno));
        return MT_IO;
    }
    return MT_OK;
}

static const char *file_kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a plain file";
}

mt_status_t mt_open_regular(const char *path, int *fd, char *err, size_t errlen) {
    struct stat st;
    *fd = -1;
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; O_NOCTTY: a terminal given
     * by name must not become the controlling one. */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0) {
        int e = errno;
        mt_fmt(err, errlen, "%s: %s", path, strerror(e));
        return e == ENOENT ? MT_NOTFOUND : e == EISDIR ? MT_INVAL : MT_IO;
    }
    if (fstat(f, &st) != 0) {
        mt_fmt(err, errlen, "%s: %s", path, strerror(errno));
        close(f);
        return MT_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        mt_fmt(err, errlen, "%s: not a regular file (%s)", path, file_kind(st.st_mode));
        close(f);
        return MT_INVAL;
    }
    int fl = fcntl(f, F_GETFL);
    if (fl >= 0) fcntl(f, F_SETFL, fl & ~O_NONBLOCK);
    *fd = f;
    return MT_OK;
}

mt_status_t mt_fopen_regular(const char *path, FILE **out, char *err, size_t errlen) {
    int fd = -1;
    *out = NULL;
    int rc = mt_open_regular(path, &fd, err, errlen);
    if (rc != MT_OK) return rc;
    *out = fdopen(fd, "rb");
    if (!*out) {
        mt_fmt(err, errlen, "%s: %s", path, strerror(errno));
        close(fd);
        return MT_IO;
    }
    return MT_OK;
}

mt_status_t mt_read_regular(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen) {
    int fd = -1, rc = MT_OK;
    size_t n = 0;
    char *buf = NULL;
    *out = NULL;
    if (len) *len = 0;
    rc = mt_open_regular(path, &fd, err, errlen);
    if (rc != MT_OK) return rc;
    buf = malloc(max + 2);
    if (!buf) {
        mt_fmt(err, errlen, "%s: out of memory", path);
        rc = MT_NOMEM;
        goto out;
    }
    /* one byte past max tells a file of exactly max from a longer one */
    while (n <= max) {
        ssize_t r = read(fd, buf + n, max + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            mt_fmt(err, errlen, "%s: %s", path, strerror(errno));
            rc = MT_IO;
            goto out;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    if (n > max) {
        mt_fmt(err, errlen, "%s: larger than %zu bytes", path, max);
        rc = MT_INVAL;
        goto out;
    }
    buf[n] = '\0';
    *out = buf;
    buf = NULL;
    if (len) *len = n;
out:
    free(buf);
    close(fd);
    return rc;
}

bool mt_triton_dir(const char *path, char *dir, size_t len) {
    const char *end = strrchr(path, '/'), *start = end;
    if (len) dir[0] = '\0';
    if (!end) return false;
    while (start > path && start[-1] != '/') start--;
    if (end - start <= 7 || strncmp(start, "triton_", 7) != 0) return false;
    snprintf(dir, len, "%.*s", (int)(end - start), start);
    return true;
}

mt_status_t mt_check_regular(const char *path, bool missing_ok, char *err, size_t errlen) {
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        if (e == ENOENT && missing_ok) return MT_OK;
        mt_fmt(err, errlen, "%s: %s", path, strerror(e));
        return e == ENOENT ? MT_NOTFOUND : MT_IO;
    }
    if (!S_ISREG(st.st_mode)) {
        mt_fmt(err, errlen, "%s: not a regular file (%s)", path, file_kind(st.st_mode));
        return MT_INVAL;
    }
    return MT_OK;
}

static void on_stop_signal(int sig) {
    (void)sig;
    mt_stop_requested = 1;
}

void mt_install_stop_handlers(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL); /* a closed terminal or SSH session: stop in order, not die */
    signal(SIGPIPE, SIG_IGN);
}

mt_status_t mt_helper_path(char *buf, size_t len, char *err, size_t errlen) {
    const char *env = getenv("MOETUNE_HELPER");
    if (env && *env) {
        if (access(env, R_OK) != 0) {
            mt_fmt(err, errlen, "MOETUNE_HELPER=%s: %s", env, strerror(errno));
            return MT_NOTFOUND;
        }
        mt_fmt(buf, len, "%s", env);
        return MT_OK;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        mt_fmt(buf, len, "%s/moetune_helper.py", exe);
        if (access(buf, R_OK) == 0) return MT_OK;
    }
#ifdef MT_SOURCE_DIR
    mt_fmt(buf, len, "%s/worker/moetune_helper.py", MT_SOURCE_DIR);
    if (access(buf, R_OK) == 0) return MT_OK;
#endif
    mt_fmt(err, errlen, "moetune_helper.py is neither beside %s nor in the source tree; set MOETUNE_HELPER=PATH",
           n > 0 ? exe : "this binary");
    return MT_NOTFOUND;
}

/* ---- allocation with a failure hook (tests only arm it; one thread at a time) */

static unsigned long g_alloc_countdown;
static int g_alloc_fired;

void mt_alloc_fail_at(unsigned long n) {
    g_alloc_countdown = n;
    g_alloc_fired = 0;
}

int mt_alloc_failed(void) { return g_alloc_fired; }

static int alloc_should_fail(void) {
    if (!g_alloc_countdown || --g_alloc_countdown) return 0;
    g_alloc_fired = 1;
    return 1;
}

void *mt_malloc(size_t n) { return alloc_should_fail() ? NULL : malloc(n); }
void *mt_calloc(size_t count, size_t n) { return alloc_should_fail() ? NULL : calloc(count, n); }
void *mt_realloc(void *p, size_t n) { return alloc_should_fail() ? NULL : realloc(p, n); }
char *mt_strdup(const char *s) { return alloc_should_fail() ? NULL : strdup(s); }

mt_status_t mt_grow(void **arr, size_t *cap, size_t need, size_t elem, size_t first) {
    if (need <= *cap) return MT_OK;
    size_t n = *cap ? *cap * 2 : first;
    while (n < need) n *= 2;
    void *p = mt_realloc(*arr, n * elem);
    if (!p) return MT_NOMEM;
    memset((char *)p + *cap * elem, 0, (n - *cap) * elem);
    *arr = p;
    *cap = n;
    return MT_OK;
}

mt_status_t mt_parse_kv_list(const char *text, const char *prefix, mt_kv_fn fn, void *ctx, char *err, size_t errlen) {
    int rc = MT_OK;
    char *copy = strdup(text ? text : "");
    if (!copy) return MT_NOMEM;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && rc == MT_OK; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            mt_fmt(err, errlen, "%s'%s' is not key=value", prefix, tok);
            rc = MT_INVAL;
            break;
        }
        *eq = '\0';
        rc = fn(ctx, tok, eq + 1, err, errlen);
    }
    free(copy);
    return rc;
}

/* Keeps the last line of text in last (trailing newlines dropped). */
static void last_line(const char *text, char *last, size_t len) {
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r')) n--;
    size_t start = n;
    while (start && text[start - 1] != '\n') start--;
    snprintf(last, len, "%.*s", (int)(n - start), text + start);
}

/* Reads what is ready on fd into buf[*used..cap - 1) (past it: read and dropped, so the
 * child never blocks); false at end of file. */
static bool drain(int fd, char *buf, size_t *used, size_t cap) {
    char chunk[8192];
    ssize_t got = read(fd, chunk, sizeof chunk);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return true;
    if (got <= 0) return false;
    size_t room = cap - 1 - *used, take = (size_t)got < room ? (size_t)got : room;
    memcpy(buf + *used, chunk, take);
    *used += take;
    return true;
}

void mt_exec_child(char *const argv[], int out_fd, int err_fd) {
    int nul = open("/dev/null", O_RDONLY);
    if (nul >= 0) dup2(nul, STDIN_FILENO);
    dup2(out_fd, STDOUT_FILENO);
    dup2(err_fd, STDERR_FILENO);
    execvp(argv[0], argv);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* The child's side of mt_run_capture: a process group of its own, then mt_exec_child. */
static void run_child(char *const argv[], int out_fd, int err_fd) {
    setpgid(0, 0);
    mt_exec_child(argv, out_fd, err_fd);
}

mt_status_t mt_run_capture(char *const argv[], int timeout_ms, char *out, size_t outlen, char *tail, size_t taillen,
                           int *status, char *err, size_t errlen) {
    int po[2] = {-1, -1}, pe[2] = {-1, -1};
    mt_status_t rc = MT_OK;
    size_t n_out = 0, n_err = 0;
    char errbuf[16384];
    out[0] = '\0';
    if (tail && taillen) tail[0] = '\0';
    *status = -1;
    if (pipe(po) != 0 || pipe(pe) != 0) {
        mt_fmt(err, errlen, "pipe: %s", strerror(errno));
        rc = MT_IO;
        goto out;
    }
    pid_t pid = fork();
    if (pid < 0) {
        mt_fmt(err, errlen, "fork: %s", strerror(errno));
        rc = MT_IO;
        goto out;
    }
    if (pid == 0) run_child(argv, po[1], pe[1]);
    close(po[1]);
    close(pe[1]);
    po[1] = pe[1] = -1;
    uint64_t deadline = mt_now_ms() + (uint64_t)timeout_ms;
    bool open_out = true, open_err = true;
    while (open_out || open_err) {
        struct pollfd fds[2] = {{po[0], open_out ? POLLIN : 0, 0}, {pe[0], open_err ? POLLIN : 0, 0}};
        uint64_t now = mt_now_ms();
        int r = now >= deadline ? 0 : poll(fds, 2, (int)(deadline - now));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            kill(-pid, SIGKILL);
            if (r == 0)
                mt_fmt(err, errlen, "%s did not answer within %d s", argv[0], timeout_ms / 1000);
            else
                mt_fmt(err, errlen, "poll: %s", strerror(errno));
            rc = r == 0 ? MT_AGAIN : MT_IO;
            break;
        }
        if (open_out && (fds[0].revents & (POLLIN | POLLHUP | POLLERR))) open_out = drain(po[0], out, &n_out, outlen);
        if (open_err && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            if (n_err > sizeof errbuf / 2) { /* keep the newest quarter: the last line is what counts */
                memmove(errbuf, errbuf + n_err - sizeof errbuf / 4, sizeof errbuf / 4);
                n_err = sizeof errbuf / 4;
            }
            open_err = drain(pe[0], errbuf, &n_err, sizeof errbuf);
        }
    }
    out[n_out] = '\0';
    errbuf[n_err] = '\0';
    if (tail && taillen) last_line(errbuf, tail, taillen);
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {}
    *status = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + (WIFSIGNALED(ws) ? WTERMSIG(ws) : 0);
out:
    for (int i = 0; i < 2; i++) {
        if (po[i] >= 0) close(po[i]);
        if (pe[i] >= 0) close(pe[i]);
    }
    return rc;
}

void mt_describe_wait(int status, char *buf, size_t len) {
    if (WIFSIGNALED(status))
        mt_fmt(buf, len, "signal %d", WTERMSIG(status));
    else if (WIFEXITED(status))
        mt_fmt(buf, len, "exit status %d", WEXITSTATUS(status));
    else
        mt_fmt(buf, len, "status 0x%x", status);
}
