/* cmd_report.c - moetune report: one self-contained HTML file per sweep (inline SVG, no
 * script, nothing loaded from the network). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "compare.h"
#include "lock.h"
#include "moetune.pb-c.h"
#include "mt.h"
#include "shipguard.h"
#include "states.h"

#define MAX_BS 64
#define MAX_SHAPES 64
/* The status chart's bars: every status of states.h's table, in its order, by Moetune__Status
 * value (0, unknown, has no bar). */
static const char *const k_status_color[WIRE_N_STATUS] = {
    [MOETUNE__STATUS__STATUS_OK] = "#2ca02c",
    [MOETUNE__STATUS__STATUS_INVALID] = "#7f7f7f",
    [MOETUNE__STATUS__STATUS_COMPILE_ERROR] = "#9467bd",
    [MOETUNE__STATUS__STATUS_LAUNCH_ERROR] = "#8c564b",
    [MOETUNE__STATUS__STATUS_WRONG_RESULT] = "#d62728",
    [MOETUNE__STATUS__STATUS_TIMEOUT] = "#bcbd22",
    [MOETUNE__STATUS__STATUS_CRASHED] = "#e377c2",
    [MOETUNE__STATUS__STATUS_PRUNED] = "#17becf",
};
static const uint32_t k_bm[] = {16, 32, 64, 128, 256}, k_bn[] = {32, 64, 128, 256};
#define N_BM (sizeof k_bm / sizeof k_bm[0])
#define N_BN (sizeof k_bn / sizeof k_bn[0])

/* The colours the charts use; tests/integration/test_report.sh looks for them in the PNG. */
#define COLOR_BEST "#1f77b4"
#define COLOR_DEFAULT "#ff7f0e"
#define COLOR_INCUMBENT "#2ca02c"

typedef struct {
    uint64_t shape_id;
    krn_shape_t shape;
    uint32_t bs[MAX_BS];
    size_t n_bs;
    double best[MAX_BS], def[MAX_BS]; /* 0 = none */
    double inc[MAX_BS];               /* the incumbent file's entry (the ship guard's); 0 = none */
    krn_config_t best_cfg[MAX_BS];
    double heat[N_BM][N_BN];        /* best over the other parameters at heat_m; 0 = none */
    uint64_t status[WIRE_N_STATUS]; /* rows by Moetune__Status value */
} rshape_t;

typedef struct {
    rshape_t *s;
    size_t n;
    uint32_t heat_m;
    char device[128], driver[32], toolkit[32], backend[16], compiler[48], kernel[80], versions[256], uuid[96];
    uint64_t rows;
    int oom;
    shipguard_t *guard; /* the sweep's ship-guard rows (shipguard.h) */
} rctx_t;

/* The config SGLang and vLLM run without a file (docs/engines.md): bf16 16x32x64 GROUP 1
 * when M <= E, else 64x64x32 GROUP 8; num_warps and num_stages are Triton's launch defaults
 * (4, 3). Other dtypes: none known here. */
static bool engine_default(const krn_shape_t *s, uint32_t m, krn_config_t *c) {
    if (strcmp(s->dtype, "bf16") != 0 && *s->dtype) return false;
    if (m <= s->e)
        *c = (krn_config_t){16, 32, 64, 1, 4, 3};
    else
        *c = (krn_config_t){64, 64, 32, 8, 4, 3};
    return true;
}

static size_t bs_index(rshape_t *s, uint32_t m) {
    for (size_t i = 0; i < s->n_bs; i++)
        if (s->bs[i] == m) return i;
    if (s->n_bs == MAX_BS) return MAX_BS;
    size_t i = s->n_bs++;
    while (i > 0 && s->bs[i - 1] > m) {
        s->bs[i] = s->bs[i - 1];
        s->best[i] = s->best[i - 1];
        s->def[i] = s->def[i - 1];
        s->inc[i] = s->inc[i - 1];
        s->best_cfg[i] = s->best_cfg[i - 1];
        i--;
    }
    s->bs[i] = m;
    s->best[i] = s->def[i] = s->inc[i] = 0;
    return i;
}

static mt_status_t on_row(void *vctx, const dbq_result_t *r) {
    rctx_t *c = vctx;
    rshape_t *s = NULL;
    for (size_t i = 0; i < c->n; i++)
        if (c->s[i].shape_id == r->shape_id) s = &c->s[i];
    if (!s) {
        if (c->n == MAX_SHAPES) return 0;
        s = &c->s[c->n++];
        memset(s, 0, sizeof *s);
        s->shape_id = r->shape_id;
        s->shape = r->shape;
    }
    if (c->rows++ == 0) {
        snprintf(c->device, sizeof c->device, "%s", r->device_name);
        snprintf(c->uuid, sizeof c->uuid, "%s", r->device_uuid);
        snprintf(c->driver, sizeof c->driver, "%s", r->driver_version);
        snprintf(c->toolkit, sizeof c->toolkit, "%s", r->cuda_version);
        snprintf(c->backend, sizeof c->backend, "%s", r->backend);
        snprintf(c->compiler, sizeof c->compiler, "%s", r->compiler);
        snprintf(c->kernel, sizeof c->kernel, "%s", r->kernel_hash);
        snprintf(c->versions, sizeof c->versions, "%s", r->versions);
    }
    int st;
    if (wire_status_parse(r->status, &st) == MT_OK) s->status[st]++;
    size_t i = bs_index(s, r->batch_size);
    if (i == MAX_BS || strcmp(r->status, "ok") != 0 || !(r->median_us > 0)) return 0;
    if (!s->best[i] || r->median_us < s->best[i]) {
        s->best[i] = r->median_us;
        s->best_cfg[i] = r->config;
    }
    krn_config_t d;
    if (engine_default(&r->shape, r->batch_size, &d) && memcmp(&d, &r->config, sizeof d) == 0) s->def[i] = r->median_us;
    const char *role = shipguard_role(c->guard, r); /* the ship guard's rows: any dtype's default, the incumbent */
    if (role && strcmp(role, "default") == 0) s->def[i] = r->median_us;
    if (role && strcmp(role, "incumbent") == 0) s->inc[i] = r->median_us;
    if (r->batch_size == c->heat_m) {
        for (size_t a = 0; a < N_BM; a++)
            for (size_t b = 0; b < N_BN; b++)
                if (k_bm[a] == r->config.block_m && k_bn[b] == r->config.block_n &&
                    (!s->heat[a][b] || r->median_us < s->heat[a][b]))
                    s->heat[a][b] = r->median_us;
    }
    return 0;
}

/* The characters HTML text escapes, and their entities. */
static const char *const k_html_entity[256] = {['<'] = "&lt;", ['>'] = "&gt;", ['&'] = "&amp;", ['"'] = "&quot;"};

/* HTML-escapes text into f. */
static void esc(FILE *f, const char *t) {
    for (; t && *t; t++) {
        const char *entity = k_html_entity[(unsigned char)*t];
        if (entity)
            fputs(entity, f);
        else
            fputc(*t, f);
    }
}

/* green (fastest) -> yellow -> red over t in [0, 1] */
static void heat_color(double t, char *buf, size_t len) {
    static const int stops[3][3] = {{0x1a, 0x98, 0x50}, {0xfe, 0xe0, 0x8b}, {0xd7, 0x30, 0x27}};
    if (t < 0) t = 0;
    if (t > 1) t = 1;
    int seg = t < 0.5 ? 0 : 1;
    double u = t < 0.5 ? t * 2 : (t - 0.5) * 2;
    int rgb[3];
    for (int k = 0; k < 3; k++) rgb[k] = (int)lround(stops[seg][k] + (stops[seg + 1][k] - stops[seg][k]) * u);
    snprintf(buf, len, "#%02x%02x%02x", rgb[0], rgb[1], rgb[2]);
}

static void latency_chart(FILE *f, const rshape_t *s) {
    const double W = 640, H = 300, L = 70, R = 20, T = 20, B = 45;
    double ymax = 0;
    for (size_t i = 0; i < s->n_bs; i++) ymax = fmax(ymax, fmax(s->best[i], fmax(s->def[i], s->inc[i])));
    if (ymax <= 0) ymax = 1;
    ymax *= 1.08;
    double x0 = log2(s->bs[0]), x1 = log2(s->bs[s->n_bs - 1]);
    if (x1 <= x0) x1 = x0 + 1;
#define PX(m) (L + (log2(m) - x0) / (x1 - x0) * (W - L - R))
#define PY(v) (T + (1 - (v) / ymax) * (H - T - B))
    fprintf(f,
            "<svg class=\"chart latency\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\"><title>latency against batch size</title>\n",
            W, H, W, H);
    fprintf(f, "<rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"none\" stroke=\"#999\"/>\n", L, T,
            W - L - R, H - T - B);
    for (int k = 0; k <= 4; k++) {
        double v = ymax * k / 4;
        fprintf(f, "<text x=\"%.0f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">%.0f</text>\n", L - 6, PY(v) + 4,
                v);
    }
    for (size_t i = 0; i < s->n_bs; i++)
        fprintf(f, "<text x=\"%.1f\" y=\"%.0f\" font-size=\"10\" text-anchor=\"middle\">%u</text>\n", PX(s->bs[i]),
                H - B + 15, s->bs[i]);
    fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"12\" text-anchor=\"middle\">batch size M (tokens)</text>\n",
            (W + L) / 2, H - 8);
    fprintf(f,
            "<text x=\"14\" y=\"%.0f\" font-size=\"12\" transform=\"rotate(-90 14 %.0f)\" text-anchor=\"middle\">"
            "latency (us)</text>\n",
            (H - B + T) / 2, (H - B + T) / 2);
    const struct {
        const double *v;
        const char *color, *name, *dash;
        const char *cls;
    } series[] = {{s->best, COLOR_BEST, "best", "", "best"},
                  {s->def, COLOR_DEFAULT, "engine default", " stroke-dasharray=\"6 4\"", "default"},
                  {s->inc, COLOR_INCUMBENT, "incumbent file", " stroke-dasharray=\"2 3\"", "incumbent"}};
    bool any_inc = false;
    for (size_t i = 0; i < s->n_bs; i++) any_inc = any_inc || s->inc[i] > 0;
    for (size_t k = 0; k < (any_inc ? 3u : 2u); k++) {
        fprintf(f, "<polyline class=\"series %s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"",
                series[k].cls, series[k].color, series[k].dash);
        for (size_t i = 0; i < s->n_bs; i++)
            if (series[k].v[i] > 0) fprintf(f, "%.1f,%.1f ", PX(s->bs[i]), PY(series[k].v[i]));
        fprintf(f, "\"/>\n");
        for (size_t i = 0; i < s->n_bs; i++)
            if (series[k].v[i] > 0)
                fprintf(f,
                        "<circle class=\"point %s\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"%s\"><title>M=%u: %.2f "
                        "us</title></circle>\n",
                        series[k].cls, PX(s->bs[i]), PY(series[k].v[i]), series[k].color, s->bs[i], series[k].v[i]);
        fprintf(f,
                "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"%.0f\" "
                "font-size=\"11\">%s</text>\n",
                L + 10, T + 8 + 16.0 * k, series[k].color, L + 30, T + 17 + 16.0 * k, series[k].name);
    }
    fprintf(f, "</svg>\n");
#undef PX
#undef PY
}

static void heat_chart(FILE *f, const rshape_t *s, uint32_t m) {
    const double cw = 90, ch = 40, L = 90, T = 30;
    double lo = 0, hi = 0;
    for (size_t a = 0; a < N_BM; a++)
        for (size_t b = 0; b < N_BN; b++) {
            double v = s->heat[a][b];
            if (!v) continue;
            if (!lo || v < lo) lo = v;
            if (v > hi) hi = v;
        }
    double W = L + cw * N_BN + 10, H = T + ch * N_BM + 10;
    fprintf(f,
            "<svg class=\"chart heatmap\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\"><title>best latency by BLOCK_SIZE_M x BLOCK_SIZE_N at "
            "M=%u</title>\n",
            W, H, W, H, m);
    fprintf(f, "<text x=\"%.0f\" y=\"14\" font-size=\"12\" text-anchor=\"middle\">BLOCK_SIZE_N</text>\n",
            L + cw * N_BN / 2);
    fprintf(f, "<text x=\"4\" y=\"%.0f\" font-size=\"11\">BLOCK_SIZE_M</text>\n", T - 4);
    for (size_t b = 0; b < N_BN; b++)
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"middle\">%u</text>\n",
                L + cw * b + cw / 2, T - 4, k_bn[b]);
    for (size_t a = 0; a < N_BM; a++) {
        fprintf(f, "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"end\">%u</text>\n", L - 8,
                T + ch * a + ch / 2 + 4, k_bm[a]);
        for (size_t b = 0; b < N_BN; b++) {
            double v = s->heat[a][b];
            char color[16] = "#eeeeee", label[32] = "-";
            if (v) {
                /* colour by log(v / fastest), red at the slowest cell */
                double t = hi > lo ? log(v / lo) / log(hi / lo) : 0;
                heat_color(t, color, sizeof color);
                snprintf(label, sizeof label, "%.1f", v);
            }
            fprintf(f,
                    "<rect class=\"cell%s\" x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"%s\" "
                    "stroke=\"#fff\"/>"
                    "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n",
                    v ? "" : " empty", L + cw * b, T + ch * a, cw, ch, color, L + cw * b + cw / 2,
                    T + ch * a + ch / 2 + 4, label);
        }
    }
    fprintf(f, "</svg>\n");
}

static void status_chart(FILE *f, const rshape_t *s) {
    const double W = 640, bar_h = 18, L = 110, R = 80;
    uint64_t max = 1;
    for (size_t k = 0; k < WIRE_N_STATUS; k++)
        if (s->status[k] > max) max = s->status[k];
    double H = bar_h * 1.4 * (WIRE_N_STATUS - 1) + 10;
    fprintf(f,
            "<svg class=\"chart status\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
            "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\"><title>results by status</title>\n",
            W, H, W, H);
    for (int k = 1; k < WIRE_N_STATUS; k++) {
        const char *name = wire_status_name(k);
        double y = 5 + bar_h * 1.4 * (k - 1), w = (W - L - R) * (double)s->status[k] / (double)max;
        if (s->status[k] && w < 4) w = 4; /* a handful of failures stays visible */
        fprintf(f,
                "<text x=\"%.0f\" y=\"%.0f\" font-size=\"11\" text-anchor=\"end\">%s</text>"
                "<rect class=\"bar %s\" x=\"%.0f\" y=\"%.0f\" width=\"%.1f\" height=\"%.0f\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.0f\" font-size=\"11\">%llu</text>\n",
                L - 6, y + 13, name, name, L, y, w, bar_h, k_status_color[k], L + w + 6, y + 13,
                (unsigned long long)s->status[k]);
    }
    fprintf(f, "</svg>\n");
}

typedef struct {
    uint64_t id;
    bool found;
    dbq_sweep_t row;
    Moetune__SweepSpec *spec;
} sweep_ctx_t;

static mt_status_t on_sweep(void *vctx, const dbq_sweep_t *s) {
    sweep_ctx_t *c = vctx;
    if (s->id != c->id) return 0;
    c->found = true;
    c->row = *s;
    c->row.spec = NULL;
    c->spec = moetune__sweep_spec__unpack(NULL, s->spec_len, s->spec);
    return 0;
}

static void date_text(int64_t t, char *buf, size_t len) {
    time_t tt = (time_t)t;
    struct tm tm;
    if (t <= 0 || !gmtime_r(&tt, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M UTC", &tm)) snprintf(buf, len, "-");
}

static void prov_row(FILE *f, const char *k, const char *v) {
    fprintf(f, "<tr><th>%s</th><td>", k);
    esc(f, v && *v ? v : "-");
    fprintf(f, "</td></tr>\n");
}

static void write_html(FILE *f, const sweep_ctx_t *sw, const rctx_t *c) {
    char buf[256], created[64], finished[64];
    date_text(sw->row.created, created, sizeof created);
    date_text(sw->row.finished, finished, sizeof finished);
    fprintf(f, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>moetune sweep %llu: ",
            (unsigned long long)sw->id);
    esc(f, sw->row.name);
    fprintf(f, "</title>\n<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1100px}"
               "table{border-collapse:collapse;margin:8px 0 16px}th,td{border:1px solid #ccc;padding:3px 8px;"
               "font-size:13px;text-align:left}td.n{text-align:right}h2{margin-top:32px;border-top:2px solid #ddd;"
               "padding-top:12px}.sim{background:#fff3cd;padding:6px 10px;border:1px solid #e0c36b}"
               ".charts{display:flex;flex-wrap:wrap;gap:24px;align-items:flex-start}</style>\n</head><body>\n");
    fprintf(f, "<h1>moetune sweep %llu: ", (unsigned long long)sw->id);
    esc(f, sw->row.name);
    fprintf(f, "</h1>\n");
    if (strcmp(c->backend, "sim") == 0)
        fprintf(f, "<p class=\"sim\">Simulated results (sim backend): not measurements of a GPU.</p>\n");
    fprintf(f, "<h3>Provenance</h3>\n<table class=\"provenance\">\n");
    prov_row(f, "sweep", mt_fmt(buf, sizeof buf, "%llu (%s)", (unsigned long long)sw->id, sw->row.state));
    prov_row(f, "created", created);
    prov_row(f, "finished", finished);
    prov_row(f, "results",
             mt_fmt(buf, sizeof buf, "%llu stored of %llu planned", (unsigned long long)c->rows,
                    (unsigned long long)sw->row.results_planned));
    prov_row(f, "device", c->device);
    prov_row(f, "device uuid", c->uuid);
    prov_row(f, "driver", c->driver);
    prov_row(f, "toolkit", c->toolkit);
    prov_row(f, "backend", c->backend);
    prov_row(f, "compiler", c->compiler);
    prov_row(f, "kernel source", c->kernel);
    prov_row(f, "versions", c->versions);
    if (sw->spec) {
        prov_row(f, "strategy", sw->spec->strategy && *sw->spec->strategy ? sw->spec->strategy : "exhaustive");
        prov_row(f, "device filter",
                 sw->spec->device_filter && *sw->spec->device_filter ? sw->spec->device_filter : "any");
        uint64_t seed = sw->spec->measure ? sw->spec->measure->seed : 0;
        prov_row(f, "seed", seed ? mt_fmt(buf, sizeof buf, "%llu", (unsigned long long)seed) : "default");
    }
    fprintf(f, "</table>\n");
    fprintf(f,
            "<p>Engine default: the config SGLang and vLLM run when no tuned file exists (bf16: 16x32x64 "
            "GROUP_SIZE_M 1 when M &lt;= E, else 64x64x32 GROUP_SIZE_M 8, num_warps 4, num_stages 3 as "
            "Triton's defaults). It is shown where this sweep measured that config; elsewhere "
            "<em>not measured</em>. Configs are BLOCK_SIZE_M x N x K x GROUP_SIZE_M x num_warps x num_stages.</p>\n");
    for (size_t i = 0; i < c->n; i++) {
        const rshape_t *s = &c->s[i];
        char shape[128], cfg[64];
        cmp_shape_text(&s->shape, shape, sizeof shape);
        fprintf(
            f,
            "<section class=\"shape\"><h2>%s</h2>\n<div class=\"charts\">\n<div><h4>Latency against batch size</h4>\n",
            shape);
        if (s->n_bs) latency_chart(f, s);
        fprintf(f, "</div>\n<div><h4>Best latency (us) by BLOCK_SIZE_M x BLOCK_SIZE_N at M=%u</h4>\n", c->heat_m);
        heat_chart(f, s, c->heat_m);
        fprintf(f, "</div>\n<div><h4>Results by status</h4>\n");
        status_chart(f, s);
        fprintf(f, "</div>\n</div>\n<table class=\"speedup\"><tr><th>M</th><th>best config</th><th>best (us)</th>"
                   "<th>engine default (us)</th><th>speed-up</th></tr>\n");
        for (size_t k = 0; k < s->n_bs; k++) {
            if (!s->best[k]) {
                fprintf(f, "<tr><td class=\"n\">%u</td><td colspan=\"4\">no ok result</td></tr>\n", s->bs[k]);
                continue;
            }
            krn_config_format(&s->best_cfg[k], cfg, sizeof cfg);
            fprintf(f, "<tr><td class=\"n\">%u</td><td>%s</td><td class=\"n\">%.2f</td>", s->bs[k], cfg, s->best[k]);
            if (s->def[k] > 0)
                fprintf(f, "<td class=\"n\">%.2f</td><td class=\"n\">%.2fx</td></tr>\n", s->def[k],
                        s->def[k] / s->best[k]);
            else
                fprintf(f, "<td class=\"n\">not measured</td><td class=\"n\">-</td></tr>\n");
        }
        fprintf(f, "</table>\n</section>\n");
    }
    if (c->n == 0) fprintf(f, "<p>This sweep has no results.</p>\n");
    fprintf(f, "</body></html>\n");
}

int cmd_report(const cli_cmd_t *cmd, cli_opts_t *o) {
    char err[400];
    dbq_t *q = NULL;
    sweep_ctx_t sw = {0};
    rctx_t c;
    FILE *f = NULL;
    int code = MT_EXIT_OK;
    memset(&c, 0, sizeof c);
    if (!o->db) return cli_usage(cmd, "--db FILE is required");
    if (!o->sweep) return cli_usage(cmd, "--sweep ID is required");
    if (!o->out) return cli_usage(cmd, "-o FILE is required");
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", o->out);
    if (db_lock_refuse_overwrite(o->db, o->out, err, sizeof err) != MT_OK ||
        db_lock_refuse_overwrite(o->db, tmp, err, sizeof err) != MT_OK)
        return cli_usage(cmd, err);
    c.s = mt_calloc(MAX_SHAPES, sizeof *c.s);
    if (!c.s) return cli_fail(cmd, "out of memory");
    if (dbq_open(o->db, &q, err, sizeof err) != MT_OK) {
        code = cli_fail(cmd, err);
        goto out;
    }
    sw.id = o->sweep;
    if (dbq_sweeps(q, NULL, on_sweep, &sw, err, sizeof err) != MT_OK) {
        code = cli_fail(cmd, err);
        goto out;
    }
    if (!sw.found) {
        code = cli_fail(cmd, mt_fmt(err, sizeof err, "no sweep %llu", (unsigned long long)o->sweep));
        goto out;
    }
    /* the heat map's batch size: --heatmap-m, else the sweep's nearest 256 */
    c.heat_m = o->heatmap_m;
    if (!c.heat_m && sw.spec) {
        for (size_t i = 0; i < sw.spec->n_batch_sizes; i++) {
            uint32_t m = sw.spec->batch_sizes[i];
            if (!c.heat_m || fabs(log2(m) - 8) < fabs(log2(c.heat_m) - 8)) c.heat_m = m;
        }
    }
    if (!c.heat_m) c.heat_m = 256;
    dbq_filter_t flt;
    memset(&flt, 0, sizeof flt);
    flt.sweep_id = o->sweep;
    uint64_t one = o->sweep;
    dbq_select_t gsel = {.ids = &one, .n_ids = 1};
    if (shipguard_load(q, &gsel, EXP_ENGINE_NONE, &c.guard, err, sizeof err) != MT_OK ||
        dbq_results(q, &flt, on_row, &c, err, sizeof err) != MT_OK) {
        code = cli_fail(cmd, err);
        goto out;
    }
    f = fopen(tmp, "w");
    if (!f) {
        code = cli_fail(cmd, mt_fmt(err, sizeof err, "%s: %s", tmp, strerror(errno)));
        goto out;
    }
    write_html(f, &sw, &c);
    if (ferror(f) | fclose(f)) {
        f = NULL;
        remove(tmp);
        code = cli_fail(cmd, mt_fmt(err, sizeof err, "%s: write failed", tmp));
        goto out;
    }
    f = NULL;
    if (rename(tmp, o->out) != 0) {
        remove(tmp);
        code = cli_fail(cmd, mt_fmt(err, sizeof err, "%s: %s", o->out, strerror(errno)));
        goto out;
    }
    printf("%s: sweep %llu, %zu shapes, %llu results, heat map at M=%u\n", o->out, (unsigned long long)o->sweep, c.n,
           (unsigned long long)c.rows, c.heat_m);
out:
    if (sw.spec) moetune__sweep_spec__free_unpacked(sw.spec, NULL);
    dbq_close(&q);
    shipguard_free(&c.guard);
    free(c.s);
    return code;
}
