/* metrics.c - the Prometheus endpoint (see metrics.h). */
#include "metrics.h"

#include <arpa/inet.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt.h"
#include "states.h"

/* Commit latency buckets, seconds (upper bounds; +Inf is implied). */
static const double k_buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define N_BUCKETS (sizeof k_buckets / sizeof k_buckets[0])

/* Clients: a scrape takes milliseconds, so a connection that has waited METRICS_CLIENT_MS for
 * its request (since it opened or since its last one) is closed, and over METRICS_CLIENTS the oldest are closed to make room for a new one; slow or
 * silent clients can never hold every slot (libmicrohttpd's own cap is METRICS_CONN_CAP). */
#define METRICS_CLIENTS 32
#define METRICS_CLIENT_MS 5000
#define METRICS_CONN_CAP 128u
#define METRICS_IDLE_S 3u /* a connection silent this long is closed by libmicrohttpd */

typedef struct {
    const struct MHD_Connection *conn; /* which connection: found again by it when it closes */
    int fd;                            /* open until its CLOSED notice (libmicrohttpd closes it after) */
    uint64_t start_ms;
    bool closing; /* shut down by us, not yet closed by libmicrohttpd */
} client_t;

struct metrics {
    struct MHD_Daemon *d;
    client_t clients[METRICS_CONN_CAP]; /* touched only on libmicrohttpd's thread */
    size_t n_clients;
    uint64_t evicted;
    uint16_t port;
    pthread_mutex_t mu;
    metrics_snapshot_t snap;
    uint64_t bucket[N_BUCKETS + 1]; /* not cumulative; the last is +Inf */
    uint64_t commits;
    double commit_sum_s;
};

typedef struct {
    char *buf;
    size_t len, cap;
    int oom;
} sbuf_t;

static void put(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf_t *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = 1;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)n;
        char *p = mt_realloc(b->buf, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->buf = p;
        b->cap = cap;
    }
}

static void metric(sbuf_t *b, const char *name, const char *type, const char *help) {
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

char *metrics_render(metrics_t *m) {
    sbuf_t b = {mt_malloc(4096), 0, 4096, 0};
    if (!b.buf) return NULL;
    pthread_mutex_lock(&m->mu);
    metrics_snapshot_t s = m->snap;
    uint64_t bucket[N_BUCKETS + 1], commits = m->commits;
    double sum = m->commit_sum_s;
    memcpy(bucket, m->bucket, sizeof bucket);
    pthread_mutex_unlock(&m->mu);

    metric(&b, "moetune_workers", "gauge", "Workers known to the coordinator, by state (alive: connected).");
    put(&b, "moetune_workers{state=\"alive\"} %llu\n", (unsigned long long)s.workers_alive);
    put(&b, "moetune_workers{state=\"away\"} %llu\n", (unsigned long long)s.workers_away);
    put(&b, "moetune_workers{state=\"dead\"} %llu\n", (unsigned long long)s.workers_dead);
    metric(&b, "moetune_workers_busy", "gauge", "Connected workers holding at least one job lease.");
    put(&b, "moetune_workers_busy %llu\n", (unsigned long long)s.workers_busy);
    metric(&b, "moetune_jobs", "gauge", "Jobs of every sweep in memory, by state.");
    for (int i = 0; i < WIRE_JOB_NSTATES; i++)
        put(&b, "moetune_jobs{state=\"%s\"} %llu\n", wire_job_state_name(i), (unsigned long long)s.jobs[i]);
    metric(&b, "moetune_sweeps_running", "gauge", "Sweeps still running.");
    put(&b, "moetune_sweeps_running %llu\n", (unsigned long long)s.sweeps_running);
    if (s.gpu_busy_known) {
        metric(&b, "moetune_gpu_busy_ratio", "gauge",
               "Running sweeps: GPU time in timed kernels over their wall time and GPUs.");
        put(&b, "moetune_gpu_busy_ratio %.4f\n", s.gpu_busy);
    }
    metric(&b, "moetune_results_committed_total", "counter", "Result rows committed to the database since start.");
    put(&b, "moetune_results_committed_total %llu\n", (unsigned long long)s.c.results_committed);
    metric(&b, "moetune_results_total", "counter",
           "Result rows committed since start, by status (pruned rows are racing's, the rest but ok are failures).");
    for (int k = 1; k < WIRE_N_STATUS; k++)
        put(&b, "moetune_results_total{status=\"%s\"} %llu\n", wire_status_name(k),
            (unsigned long long)s.c.committed_by_status[k]);
    if (s.c.committed_by_status[0])
        put(&b, "moetune_results_total{status=\"unknown\"} %llu\n", (unsigned long long)s.c.committed_by_status[0]);
    metric(&b, "moetune_results_unacked", "gauge", "Results received and waiting for a commit.");
    put(&b, "moetune_results_unacked %llu\n", (unsigned long long)s.results_unacked);
    metric(&b, "moetune_results_rejected_total", "counter", "Results refused (no valid lease, bad content).");
    put(&b, "moetune_results_rejected_total %llu\n", (unsigned long long)s.c.rejected_results);
    metric(&b, "moetune_jobs_requeued_total", "counter", "Jobs returned to pending after a lost lease.");
    put(&b, "moetune_jobs_requeued_total %llu\n", (unsigned long long)s.c.requeued_jobs);
    metric(&b, "moetune_workers_dead_total", "counter", "Workers declared dead after silent heartbeats.");
    put(&b, "moetune_workers_dead_total %llu\n", (unsigned long long)s.c.dead_workers);
    metric(&b, "moetune_storage_errors_total", "counter", "Commits that failed (kept and retried).");
    put(&b, "moetune_storage_errors_total %llu\n", (unsigned long long)s.c.commit_failures);
    metric(&b, "moetune_storage_error", "gauge", "1 while the last commit failed.");
    put(&b, "moetune_storage_error %d\n", s.storage_error ? 1 : 0);
    metric(&b, "moetune_bad_messages_total", "counter",
           "Messages refused: undecodable, too large, wrong version or body.");
    put(&b, "moetune_bad_messages_total %llu\n", (unsigned long long)s.c.bad_messages);
    metric(&b, "moetune_connections_refused_total", "counter",
           "Connections refused: by CURVE authentication, or closed over the worker or control socket's cap.");
    put(&b, "moetune_connections_refused_total{reason=\"curve\"} %llu\n", (unsigned long long)s.auth_refused);
    put(&b, "moetune_connections_refused_total{reason=\"worker_cap\"} %llu\n", (unsigned long long)s.cap_refused[0]);
    put(&b, "moetune_connections_refused_total{reason=\"control_cap\"} %llu\n", (unsigned long long)s.cap_refused[1]);
    metric(&b, "moetune_commit_duration_seconds", "histogram",
           "Duration of one result batch commit (transaction included).");
    uint64_t cum = 0;
    for (size_t i = 0; i < N_BUCKETS; i++) {
        cum += bucket[i];
        put(&b, "moetune_commit_duration_seconds_bucket{le=\"%g\"} %llu\n", k_buckets[i], (unsigned long long)cum);
    }
    cum += bucket[N_BUCKETS];
    put(&b, "moetune_commit_duration_seconds_bucket{le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    put(&b, "moetune_commit_duration_seconds_sum %.6f\n", sum);
    put(&b, "moetune_commit_duration_seconds_count %llu\n", (unsigned long long)commits);
    if (b.oom) {
        free(b.buf);
        return NULL;
    }
    return b.buf;
}

/* A request arrived whole on conn: its client's clock starts again, so a keep-alive scraper
 * gets METRICS_CLIENT_MS per request, and only a client that never finishes one runs out. */
static void client_served(metrics_t *m, const struct MHD_Connection *conn) {
    for (size_t i = 0; i < m->n_clients; i++)
        if (m->clients[i].conn == conn) m->clients[i].start_ms = mt_now_ms();
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_len, void **con_cls) {
    metrics_t *m = cls;
    client_served(m, conn);
    struct MHD_Response *resp;
    unsigned code = MHD_HTTP_OK;
    char *page = NULL;
    static char not_found[] = "not found: try /metrics\n", bad_method[] = "only GET\n", oom[] = "out of memory\n";
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
        code = MHD_HTTP_METHOD_NOT_ALLOWED;
        resp = MHD_create_response_from_buffer(strlen(bad_method), bad_method, MHD_RESPMEM_PERSISTENT);
    } else if (strcmp(url, "/metrics") != 0) {
        code = MHD_HTTP_NOT_FOUND;
        resp = MHD_create_response_from_buffer(strlen(not_found), not_found, MHD_RESPMEM_PERSISTENT);
    } else if (!(page = metrics_render(m))) {
        code = MHD_HTTP_INTERNAL_SERVER_ERROR;
        resp = MHD_create_response_from_buffer(strlen(oom), oom, MHD_RESPMEM_PERSISTENT);
    } else {
        resp = MHD_create_response_from_buffer(strlen(page), page, MHD_RESPMEM_MUST_FREE);
    }
    if (!resp) {
        free(page);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", code == MHD_HTTP_OK ? "text/plain; version=0.0.4" : "text/plain");
    enum MHD_Result r = MHD_queue_response(conn, code, resp);
    MHD_destroy_response(resp);
    return r;
}

/* libmicrohttpd's error lines, through the project's logger (one line each). */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    char line[512];
    (void)cls;
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = '\0';
    for (char *p = line; *p; p++)
        if ((unsigned char)*p < 0x20) *p = ' ';
    log_at(MT_LOG_WARN, "metrics http: %s", line);
}

/* Shuts a client's socket down: libmicrohttpd sees it closed and releases the connection. */
static void evict(metrics_t *m, client_t *c, const char *why) {
    c->closing = true;
    shutdown(c->fd, SHUT_RDWR);
    if (m->evicted++ % 100 == 0)
        log_at(MT_LOG_WARN, "metrics http: a client closed: %s (%llu so far)", why, (unsigned long long)m->evicted);
}

/* Connection start and end (libmicrohttpd's thread): a new client closes those that have
 * lasted too long, and the oldest while more than METRICS_CLIENTS are open. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    metrics_t *m = cls;
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    int fd = info ? info->connect_fd : -1;
    (void)socket_context;
    if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
        for (size_t i = 0; i < m->n_clients; i++) {
            if (m->clients[i].conn != conn) continue;
            m->clients[i] = m->clients[--m->n_clients];
            break;
        }
        return;
    }
    uint64_t now = mt_now_ms();
    size_t open = 0;
    for (size_t i = 0; i < m->n_clients; i++) {
        client_t *c = &m->clients[i];
        if (!c->closing && now - c->start_ms >= METRICS_CLIENT_MS) evict(m, c, "open too long");
        open += !c->closing;
    }
    while (open >= METRICS_CLIENTS) {
        client_t *old = NULL;
        for (size_t i = 0; i < m->n_clients; i++)
            if (!m->clients[i].closing && (!old || m->clients[i].start_ms < old->start_ms)) old = &m->clients[i];
        if (!old) break;
        evict(m, old, "too many clients, the oldest goes");
        open--;
    }
    if (fd >= 0 && m->n_clients < METRICS_CONN_CAP) m->clients[m->n_clients++] = (client_t){conn, fd, now, false};
}

mt_status_t metrics_new(const char *hostport, metrics_t **out, char *err, size_t errlen) {
    *out = NULL;
    const char *colon = hostport ? strrchr(hostport, ':') : NULL;
    uint32_t port;
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof sa);
    sa.sin_family = AF_INET;
    char host[64];
    if (!colon || (size_t)(colon - hostport) >= sizeof host || mt_parse_u32(colon + 1, 0, 65535, &port) != MT_OK) {
        mt_fmt(err, errlen, "--metrics '%s': not HOST:PORT", hostport ? hostport : "");
        return MT_INVAL;
    }
    snprintf(host, sizeof host, "%.*s", (int)(colon - hostport), hostport);
    if (strcmp(host, "*") == 0 || strcmp(host, "0.0.0.0") == 0 || !*host)
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
    else if (strcmp(host, "localhost") == 0)
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        mt_fmt(err, errlen, "--metrics '%s': '%s' is not an IPv4 address, localhost or *", hostport, host);
        return MT_INVAL;
    }
    sa.sin_port = htons((uint16_t)port);
    metrics_t *m = mt_calloc(1, sizeof *m);
    if (!m) return MT_NOMEM;
    pthread_mutex_init(&m->mu, NULL);
    m->d =
        MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)port, NULL, NULL, on_request, m,
                         MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa, MHD_OPTION_CONNECTION_LIMIT, METRICS_CONN_CAP,
                         MHD_OPTION_CONNECTION_TIMEOUT, METRICS_IDLE_S, MHD_OPTION_NOTIFY_CONNECTION, on_connection, m,
                         MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    if (!m->d) {
        mt_fmt(err, errlen, "--metrics %s: cannot listen (address in use or not local?)", hostport);
        pthread_mutex_destroy(&m->mu);
        free(m);
        return MT_ERR;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(m->d, MHD_DAEMON_INFO_BIND_PORT);
    m->port = info ? info->port : (uint16_t)port;
    *out = m;
    return MT_OK;
}

uint16_t metrics_port(const metrics_t *m) { return m->port; }

void metrics_publish(metrics_t *m, const metrics_snapshot_t *snap) {
    pthread_mutex_lock(&m->mu);
    m->snap = *snap;
    pthread_mutex_unlock(&m->mu);
}

void metrics_observe_commit(metrics_t *m, uint64_t us) {
    double s = (double)us / 1e6;
    size_t i = 0;
    while (i < N_BUCKETS && s > k_buckets[i]) i++;
    pthread_mutex_lock(&m->mu);
    m->bucket[i]++;
    m->commits++;
    m->commit_sum_s += s;
    pthread_mutex_unlock(&m->mu);
}

void metrics_destroy(metrics_t **pm) {
    if (!pm || !*pm) return;
    metrics_t *m = *pm;
    MHD_stop_daemon(m->d);
    pthread_mutex_destroy(&m->mu);
    free(m);
    *pm = NULL;
}
