/* mt_facts - prints what the C side compiled from worker/helper/engines.json and measure.json, as
 * one JSON object, for tests/unit/test_facts.py to hold against the triton helper: the engine
 * table (krn_engine_get),
 * the WRK_* measurement rules, and the rules' verdicts (wrk_race_lost, wrk_check_lost,
 * wrk_precise, wrk_settled) on a fixed grid of cases the test replays in Python. */
#include <stdio.h>

#include "backend.h"
#include "engines.h"

static const double margins[] = {0.05, 0.2, 0.5};
static const double ratios[] = {1.0, 1.03, 1.1, 1.25, 1.45, 1.6, 2.2, 3.0};

int main(void) {
    printf("{\"engines\": [");
    for (size_t i = 0; i < KRN_ENGINE_COUNT; i++) {
        const krn_engine_t *e = krn_engine_get(i);
        printf("%s{\"id\": %d, \"name\": \"%s\", \"display\": \"%s\", \"config_env\": \"%s\"}", i ? ", " : "",
               (int)e->id, e->name, e->display, e->config_env);
    }
    printf("], \"names\": \"%s\", \"all\": \"%s\",\n", KRN_ENGINE_NAMES, KRN_ENGINE_ALL);
    printf(" \"rules\": {\"WRK_RACE_SAMPLES\": %d, \"WRK_RACE_FAR\": %.17g, \"WRK_CHECK_FAR\": %.17g, "
           "\"WRK_CHECK_FLOOR\": %.17g, \"WRK_SEM_FRACTION\": %.17g, \"WRK_SETTLE_MARGIN\": %.17g, "
           "\"WRK_SETTLE_Z\": %.17g, \"WRK_SETTLE_SAMPLES\": %d, \"WRK_SETTLE_EARLY\": %.17g},\n",
           WRK_RACE_SAMPLES, WRK_RACE_FAR, WRK_CHECK_FAR, WRK_CHECK_FLOOR, WRK_SEM_FRACTION, WRK_SETTLE_MARGIN,
           WRK_SETTLE_Z, WRK_SETTLE_SAMPLES, WRK_SETTLE_EARLY);
    /* [margin, ratio, n, race_lost, check_lost, precise, settled]: best 100 us; the fastest (or the
     * check layer, or the mean) at ratio x best; sd 3 % of the mean; rsd_target 1 %. */
    printf(" \"cases\": [");
    const char *sep = "";
    for (size_t a = 0; a < sizeof margins / sizeof *margins; a++)
        for (size_t b = 0; b < sizeof ratios / sizeof *ratios; b++)
            for (uint32_t n = 1; n <= 6; n++) {
                double best[2] = {100.0, 100.0}, us = 100.0 * ratios[b];
                wrk_measure_t m = {
                    .race_margin = margins[a], .best_us = best, .rsd_target = 0.01, .settle_margin = WRK_SETTLE_MARGIN,
                    .min_samples = 4};
                printf("%s[%g, %g, %u, %d, %d, %d, %d]", sep, margins[a], ratios[b], n, wrk_race_lost(&m, 1, us, n),
                       wrk_check_lost(&m, 1, us), wrk_precise(&m, us, 0.03 * us / (double)n, n),
                       wrk_settled(&m, 1, us, 0.03 * us, n));
                sep = ", ";
            }
    printf("]}\n");
    return 0;
}
