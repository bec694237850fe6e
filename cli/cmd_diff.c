/* cmd_diff.c - moetune diff A B: per (shape, batch size) the old and new best config and
 * latency, the change, and whether it is beyond the two sweeps' measured noise. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "compare.h"
#include "mt.h"

mt_status_t cli_parse_threshold(const char *text, double *out, char *err, size_t errlen) {
    *out = 3.0;
    if (!text) return MT_OK;
    double v;
    if (mt_parse_double(text, &v) != MT_OK || !isfinite(v) || v < 0 || v > 1000) {
        mt_fmt(err, errlen, "--threshold %s: not a percentage in 0..1000", text);
        return MT_INVAL;
    }
    *out = v;
    return MT_OK;
}

int cmd_diff(const cli_cmd_t *cmd, cli_opts_t *o) {
    char err[400];
    dbq_t *q = NULL;
    double threshold;
    uint64_t a = 0, b = 0;
    cmp_diff_t d;
    if (!o->db) return cli_usage(cmd, "--db FILE is required");
    if (cli_parse_threshold(o->threshold, &threshold, err, sizeof err) != MT_OK) return cli_usage(cmd, err);
    if (dbq_open(o->db, &q, err, sizeof err) != MT_OK) return cli_fail(cmd, err);
    int rc = cmp_resolve(q, o->pos[0], &a, err, sizeof err);
    if (!rc) rc = cmp_resolve(q, o->pos[1], &b, err, sizeof err);
    if (!rc) rc = cmp_diff(q, a, b, threshold, o->device, &d, err, sizeof err);
    dbq_close(&q);
    if (rc == MT_INVAL && strstr(err, "is not a sweep id")) return cli_usage(cmd, err);
    if (rc) return cli_fail(cmd, err);
    cmp_diff_print(&d, o->json, stdout);
    int code = d.regressions ? CLI_EXIT_REGRESSION : MT_EXIT_OK;
    cmp_diff_clear(&d);
    return code;
}
