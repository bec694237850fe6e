/* cmd_nightly.c - the end of `moetune submit --wait --compare-to last|ID`: diff the
 * finished sweep against the previous sweep of the same spec on the same device, and
 * export its config files only when nothing regressed (or --force). */
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "compare.h"
#include "guard_counts.h"
#include "mt.h"
#include "states.h"

typedef struct {
    uint64_t id;
    char state[16];
} state_ctx_t;

static mt_status_t on_state(void *vctx, const dbq_sweep_t *s) {
    state_ctx_t *c = vctx;
    if (s->id == c->id) snprintf(c->state, sizeof c->state, "%s", s->state);
    return 0;
}

/* The coordinator reports a sweep done when its last results are committed; the
 * sweep row's own state follows in the next commit. Waits for it (up to 10 s). */
static int wait_stored_done(const char *db, uint64_t id, char *err, size_t errlen) {
    for (int i = 0; i < 100; i++) {
        dbq_t *q = NULL;
        state_ctx_t c = {id, ""};
        int rc = dbq_open(db, &q, err, errlen);
        if (!rc) rc = dbq_sweeps(q, NULL, on_state, &c, err, errlen);
        dbq_close(&q);
        if (rc) return rc;
        if (wire_sweep_is(c.state, WIRE_SWEEP_DONE)) return MT_OK;
        usleep(100 * 1000);
    }
    mt_fmt(err, errlen, "sweep %llu is not stored as done in %s (is --db the coordinator's database?)",
           (unsigned long long)id, db);
    return MT_ERR;
}

/* The first sweep of its spec: one line on what the ship guard does to its files. */
static int say_guard(dbq_t *q, uint64_t sweep, char *err, size_t errlen) {
    shipguard_counts_t c;
    char text[200];
    int rc = guard_counts_get(q, sweep, NULL, &c, err, errlen);
    if (rc) return rc;
    shipguard_counts_text(&c, text, sizeof text);
    printf("guard: sweep %llu: %s\n", (unsigned long long)sweep, text);
    return MT_OK;
}

int cli_nightly_check(const cli_cmd_t *cmd, const cli_opts_t *o) {
    char err[200];
    double t;
    if (!o->compare_to) {
        if (o->db || o->out || o->force_export || o->threshold)
            return cli_usage(cmd, "--db, --out, --force and --threshold go with --compare-to");
        return MT_EXIT_OK;
    }
    if (!o->wait) return cli_usage(cmd, "--compare-to needs --wait");
    if (!o->db) return cli_usage(cmd, "--compare-to needs --db FILE (the coordinator's database)");
    if (o->force_export && !o->out) return cli_usage(cmd, "--force needs --out DIR");
    if (strcmp(o->compare_to, "last") != 0) {
        uint64_t id;
        if (mt_parse_u64(o->compare_to, &id) != MT_OK || id == 0)
            return cli_usage(cmd, "--compare-to: not 'last' or a sweep id");
    }
    if (cli_parse_threshold(o->threshold, &t, err, sizeof err) != MT_OK) return cli_usage(cmd, err);
    return MT_EXIT_OK;
}

int cli_nightly_finish(const cli_cmd_t *cmd, const cli_opts_t *o, uint64_t sweep) {
    char err[400];
    dbq_t *q = NULL;
    uint64_t prev = 0;
    double threshold;
    cmp_diff_t d;
    memset(&d, 0, sizeof d);
    cli_parse_threshold(o->threshold, &threshold, err, sizeof err);
    int rc = wait_stored_done(o->db, sweep, err, sizeof err);
    if (rc) return cli_fail(cmd, err);
    if (dbq_open(o->db, &q, err, sizeof err) != MT_OK) return cli_fail(cmd, err);
    if (strcmp(o->compare_to, "last") == 0)
        rc = cmp_previous(q, sweep, &prev, err, sizeof err);
    else
        rc = mt_parse_u64(o->compare_to, &prev);
    bool first = rc == MT_NOTFOUND && strcmp(o->compare_to, "last") == 0 && strstr(err, "no earlier");
    if (first) {
        printf("compare: %s; nothing to compare, sweep %llu is the first\n", err, (unsigned long long)sweep);
        rc = say_guard(q, sweep, err, sizeof err);
    } else if (!rc) {
        rc = cmp_diff(q, prev, sweep, threshold, NULL, &d, err, sizeof err);
    }
    dbq_close(&q);
    if (rc) return cli_fail(cmd, err);
    size_t common = 0;
    for (size_t i = 0; i < d.n; i++) common += d.e[i].a && d.e[i].b;
    if (!first && common == 0) {
        /* nothing was compared: neither "no regression" nor grounds to export */
        cmp_diff_clear(&d);
        return cli_fail(cmd, mt_fmt(err, sizeof err,
                                    "sweeps %llu and %llu have no (shape, batch size) in common: nothing compared, "
                                    "nothing exported",
                                    (unsigned long long)prev, (unsigned long long)sweep));
    }
    if (!first) cmp_diff_print(&d, o->json, stdout);
    size_t regressions = d.regressions;
    cmp_diff_clear(&d);
    int code = MT_EXIT_OK;
    if (regressions && !o->force_export) {
        printf("not exported: %zu regressions against sweep %llu (--force exports anyway)\n", regressions,
               (unsigned long long)prev);
    } else if (o->out) {
        if (regressions) printf("exporting despite %zu regressions (--force)\n", regressions);
        fflush(stdout);
        /* the diff above already judged the new sweep against the last: entries measured
         * slower within noise replace the file's (export's own --force rule) */
        code = cli_run_export(cmd, o->db, o->out, sweep, o->engine, o->json, true);
    }
    fflush(stdout);
    if (regressions) return CLI_EXIT_REGRESSION;
    return code;
}
