/*
 * mt.h - what every moetune module shares: the status codes, logging, clocks and
 * small string helpers. Nothing else is shared sideways between folders.
 */
#ifndef MT_H
#define MT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One status type for the whole project: 0 is success, errors are negative. */
typedef enum {
    MT_OK = 0,
    MT_ERR = -1,   /* generic failure; detail is in the owner's error buffer */
    MT_AGAIN = -2, /* a socket would block; try again later */
    MT_BUSY = -3,  /* the database is locked; try again later */
    MT_NOMEM = -4,
    MT_INVAL = -5, /* bad input: a spec, a message, a file */
    MT_NOTFOUND = -6,
    MT_IO = -7, /* disk or file error */
} mt_status_t;

/* Exit codes of the command-line programs. */
enum { MT_EXIT_OK = 0, MT_EXIT_FAIL = 1, MT_EXIT_USAGE = 2 };

typedef enum { MT_LOG_ERROR = 0, MT_LOG_WARN, MT_LOG_INFO, MT_LOG_DEBUG } mt_log_level_t;

/* Sets the process-wide log level and the tag printed in every line (e.g. "coord",
 * "worker host-123-0"). The tag is copied. */
void mt_log_init(const char *tag, mt_log_level_t level);
/* Parses "error", "warn", "info", "debug"; returns MT_INVAL for anything else. */
mt_status_t mt_log_parse_level(const char *name, mt_log_level_t *out);
extern mt_log_level_t mt_log_level;
void mt_log_write(mt_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Logs at a level; the level check runs before the arguments are formatted. */
#define log_at(level, ...)                                                                                             \
    do {                                                                                                               \
        if ((level) <= mt_log_level) mt_log_write((level), __VA_ARGS__);                                               \
    } while (0)

/* Monotonic milliseconds / microseconds, for timers and durations. */
uint64_t mt_now_ms(void);
uint64_t mt_now_us(void);
/* Wall-clock seconds since the epoch, for stored timestamps. */
int64_t mt_wall_s(void);

/* Formats into buf (always NUL-terminated, truncated to len). Returns buf. */
char *mt_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Parses a whole decimal unsigned integer in [min, max]; MT_INVAL otherwise. */
mt_status_t mt_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out);
mt_status_t mt_parse_u64(const char *s, uint64_t *out);
/* Why s failed mt_parse_u32(s, min, max): "out of range (MIN..MAX)" for a whole decimal
 * number outside the bounds (however many digits), else "not a positive integer" (or
 * "not a whole number" when min is 0). Returns buf. */
const char *mt_u32_problem(const char *s, uint32_t min, uint32_t max, char *buf, size_t len);
mt_status_t mt_parse_double(const char *s, double *out);

/* Parses a comma-separated list of unsigned integers in [min, max] into a newly allocated
 * array (caller frees *out). Returns MT_INVAL with a reason in err on a bad element. */
mt_status_t mt_parse_u32_list(const char *s, uint32_t min, uint32_t max, uint32_t **out, size_t *n, char *err,
                              size_t errlen);

/* 64-bit FNV-1a over bytes, continuing from h (start with MT_FNV_INIT). */
#define MT_FNV_INIT 1469598103934665603ULL
uint64_t mt_fnv1a(uint64_t h, const void *data, size_t len);

/* splitmix64's finaliser: every bit of z moves about half the bits of the result. A splitmix64
 * stream is mt_mix64(state += MT_GOLDEN64). */
#define MT_GOLDEN64 0x9E3779B97F4A7C15ULL
uint64_t mt_mix64(uint64_t z);

/* Creates a directory and its parents (mode 0755); MT_IO with errno text in err. */
mt_status_t mt_mkdirs(const char *path, char *err, size_t errlen);

/* Every file a user names as input is opened through these: without blocking (a FIFO
 * or a device would hold the caller forever, or never end) and regular files only.
 *
 * mt_open_regular opens path read-only and returns its descriptor (close-on-exec) in
 * *fd; MT_NOTFOUND when it does not exist, MT_INVAL when it is not a regular file
 * ("PATH: not a regular file (a FIFO)"), MT_IO with errno's text; one line in err. */
mt_status_t mt_open_regular(const char *path, int *fd, char *err, size_t errlen);
/* The same as a stdio stream opened "rb" (caller fcloses *out). */
mt_status_t mt_fopen_regular(const char *path, FILE **out, char *err, size_t errlen);
/* Reads the whole regular file at path into a new NUL-terminated buffer (caller frees
 * *out; *len, when not NULL, is its length). A file over max bytes is MT_INVAL
 * ("PATH: larger than MAX bytes"); otherwise mt_open_regular's answers. */
mt_status_t mt_read_regular(const char *path, size_t max, char **out, size_t *len, char *err, size_t errlen);
/* For a file another library opens by name (SQLite): MT_OK when path is a regular file,
 * or is missing and missing_ok; else mt_open_regular's answer. */
mt_status_t mt_check_regular(const char *path, bool missing_ok, char *err, size_t errlen);

/* Two timings are a near tie, within the noise of each other, when the slower trails by less than
 * this many of their combined deviations, sqrt(sd_a^2 + sd_b^2): export's pick and ship guard
 * (cli/export.h) and the coordinator's prediction of it (coordinator/guard.c) share it. */
#define MT_NEAR_TIE_SD 1.0

/* The folder right above path's last part when it is one of SGLang's per-Triton config folders
 * ("triton_3_4_0" of ".../triton_3_4_0/E=...json") into dir; false, dir "", for any other. */
bool mt_triton_dir(const char *path, char *dir, size_t len);

/* The triton backend's helper script: $MOETUNE_HELPER when set (it must be readable), else
 * moetune_helper.py beside the running binary, else the source tree's worker/ copy. Writes the
 * path into buf; MT_NOTFOUND with a one-line reason in err. Used by the worker and by doctor. */
mt_status_t mt_helper_path(char *buf, size_t len, char *err, size_t errlen);

/* Allocation with a failure hook for tests (as SQLite's): the same as the libc calls, except
 * that after mt_alloc_fail_at(n), n > 0, the n-th of these calls from then returns NULL (once;
 * the others succeed). mt_alloc_fail_at(0) turns the hook off; mt_alloc_failed() says whether
 * the armed failure happened. Modules whose failure paths are tested allocate through these. */
void *mt_malloc(size_t n);
void *mt_calloc(size_t count, size_t n);
void *mt_realloc(void *p, size_t n);
char *mt_strdup(const char *s);
void mt_alloc_fail_at(unsigned long n);
int mt_alloc_failed(void);

/* Makes room for need elements of elem bytes in the growing array *arr of *cap: nothing
 * when need <= *cap, else the capacity doubles (from first, > 0, when 0) until need fits and the
 * array is reallocated (mt_realloc, so the failure hook above covers it), the new part zeroed;
 * *arr and *cap change only on success. MT_NOMEM when out of memory (the array is kept as it was). */
mt_status_t mt_grow(void **arr, size_t *cap, size_t need, size_t elem, size_t first);

/* Called by mt_parse_kv_list for each key=value of its list, split at the first '=' (val may
 * be changed in place). An error stops the list and is mt_parse_kv_list's answer. */
typedef mt_status_t (*mt_kv_fn)(void *ctx, const char *key, char *val, char *err, size_t errlen);

/* Hands each key=value of the comma-separated list text (NULL: an empty one) to fn, in order;
 * empty items are skipped. An item without '=' is MT_INVAL with "<prefix>'ITEM' is not
 * key=value" in err; else fn's first error, or MT_NOMEM. */
mt_status_t mt_parse_kv_list(const char *text, const char *prefix, mt_kv_fn fn, void *ctx, char *err, size_t errlen);

/* In a forked child: stdin on /dev/null, stdout on out_fd, stderr on err_fd, then argv (argv[0]
 * looked up on PATH); never returns: where argv cannot run, says so on err_fd and exits 127. */
_Noreturn void mt_exec_child(char *const argv[], int out_fd, int err_fd);

/* Runs argv (argv[0] looked up on PATH) in a process group of its own with stdin on /dev/null,
 * for at most timeout_ms: its stdout into out (NUL-terminated; past outlen - 1 read and
 * dropped, so the child never blocks), the last line of its stderr into tail (NULL: dropped),
 * its exit status (128 + signal when killed; 127 when it could not be run) into *status.
 * MT_OK when it ran; MT_AGAIN when it timed out (the group is killed) or MT_IO, with a reason. */
mt_status_t mt_run_capture(char *const argv[], int timeout_ms, char *out, size_t outlen, char *tail, size_t taillen,
                           int *status, char *err, size_t errlen);

/* How a process ended, from waitpid's status, into buf: "signal N", "exit status N", or
 * "status 0xN" for anything else. */
void mt_describe_wait(int status, char *buf, size_t len);

/* Sends a signal-safe flag: the daemons' loops check it. */
extern volatile int mt_stop_requested;
/* Installs SIGINT/SIGTERM/SIGHUP handlers that set mt_stop_requested, and ignores SIGPIPE. */
void mt_install_stop_handlers(void);

#endif
