/* test_cuda_gpu.c - the cuda backend on a real GPU (run by tests/gpu/run.sh).
 *
 * 1. Fault, hang and wrong-result injection: in child processes (as the worker's parent runs
 *    them), a config injected to fault reports LAUNCH_ERROR and a lost context, one injected to
 *    hang reports TIMEOUT (or is killed by this parent at its deadline), and a fresh child then
 *    still measures a normal config OK; one whose layer is injected 5 % off reports
 *    WRONG_RESULT at batch sizes 64 and 4096, the context kept.
 * 2. Racing: a config whose first sample loses against a best far below it (3x) is PRUNED
 *    after that 1 sample, one 1.3x a best after 2 samples, neither verified; one racing against a best far above it stays, is verified
 *    (rel_err in its detail) and sampled to the RSD rule like a config measured without a race;
 *    one 1.15x a best, with settling on and a deviation target never met, settles at
 *    min_samples, verified.
 * 3. Every config of the default space the static rules accept is correct at batch sizes
 *    1, 64 and 4096 for Qwen3-30B-A3B TP1 and Mixtral-8x7B TP2.
 *
 * MT_GPU_STRIDE=S checks every S-th accepted config only (default 1), starting at the
 * MT_GPU_OFFSET-th (default 0): two processes with stride 2 and offsets 0 and 1 on two GPUs
 * (CUDA_VISIBLE_DEVICES) check every accepted config between them. Exit 0 when all pass. */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend_cuda.h"
#include "mt.h"

static const char *status_name(int s) {
    static const char *names[] = {"unknown",      "ok",      "invalid", "compile_error", "launch_error",
                                  "wrong_result", "timeout", "crashed", "pruned"};
    return s >= 0 && s <= 8 ? names[s] : "?";
}

/* Measures cfg at batch bs in a child process; returns its status, TIMEOUT when the child
 * had to be killed at deadline_s, CRASHED when it died without reporting. *rc_out is the
 * measure() return code the child saw (MT_ERR when it reported a lost context). */
static int run_child(const krn_shape_t *shape, krn_config_t cfg, uint32_t bs, uint32_t timeout_ms, int deadline_s,
                     int *rc_out, char *detail, size_t dlen) {
    int fd[2];
    if (pipe(fd) != 0) return WCU_ST_CRASHED;
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        wrk_backend_opts_t opts = {.gpu_index = 0, .compile_threads = 2};
        void *st = NULL;
        wrk_device_t dev;
        char err[256] = "", line[512];
        wrk_meas_t meas;
        uint32_t regs, spills;
        wrk_measure_t m = {.warmup = 1,
                           .min_samples = 3,
                           .max_samples = 10,
                           .rsd_target = 0.05,
                           .budget_ms = 500,
                           .timeout_ms = timeout_ms,
                           .seed = 1};
        if (wrk_backend_cuda.open(&opts, &st, &dev, err, sizeof err) != MT_OK) {
            mt_fmt(line, sizeof line, "%d %d open: %s\n", WCU_ST_LAUNCH_ERROR, MT_ERR, err);
        } else {
            int rc = wrk_backend_cuda.measure(st, shape, &cfg, &bs, 1, &m, &meas, &regs, &spills, err, sizeof err);
            mt_fmt(line, sizeof line, "%d %d %s | %s\n", meas.status, rc, meas.detail, err);
        }
        if (write(fd[1], line, strlen(line)) < 0) _exit(3);
        _exit(0);
    }
    close(fd[1]);
    char buf[512] = "";
    size_t got = 0;
    time_t end = time(NULL) + deadline_s;
    int status = WCU_ST_CRASHED, killed = 0;
    for (;;) {
        int ws;
        pid_t w = waitpid(pid, &ws, WNOHANG);
        if (w == pid) break;
        if (time(NULL) > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &ws, 0);
            killed = 1;
            break;
        }
        usleep(50000);
    }
    ssize_t n;
    while (!killed && got < sizeof buf - 1 && (n = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)n;
    close(fd[0]);
    buf[got] = '\0';
    *rc_out = MT_ERR;
    if (killed) {
        mt_fmt(detail, dlen, "killed after %d s", deadline_s);
        return WCU_ST_TIMEOUT;
    }
    if (sscanf(buf, "%d %d", &status, rc_out) != 2) {
        mt_fmt(detail, dlen, "child died without a report");
        return WCU_ST_CRASHED;
    }
    mt_fmt(detail, dlen, "%s", buf);
    detail[strcspn(detail, "\n")] = '\0';
    return status;
}

/* Opens the backend on GPU 0, compiling on the measuring thread, into *st and *dev; MT_OK, or
 * its code with the reason printed. */
static int open_gpu(void **st, wrk_device_t *dev) {
    wrk_backend_opts_t opts = {.gpu_index = 0, .compile_threads = 0};
    char err[256];
    int rc = wrk_backend_cuda.open(&opts, st, dev, err, sizeof err);
    if (rc != MT_OK) printf("open failed: %s\n", err);
    return rc;
}

static int injection_tests(void) {
    krn_shape_t shape;
    char err[200], detail[512];
    int fails = 0, rc;
    krn_shape_parse("E=128,N=768,K=2048,topk=8", &shape, err, sizeof err);
    krn_config_t good = {64, 64, 64, 1, 4, 3}, bad = {32, 64, 64, 1, 4, 3}, hang = {32, 64, 128, 1, 4, 3},
                 wrong = {64, 128, 64, 1, 4, 3};
    setenv("MOETUNE_CUDA_INJECT", "fault:32x64x64x1x4x3,hang:32x64x128x1x4x3,wrong:64x128x64x1x4x3", 1);
    int s = run_child(&shape, bad, 64, 5000, 60, &rc, detail, sizeof detail);
    printf("inject fault: status=%s rc=%d: %s\n", status_name(s), rc, detail);
    if (s != WCU_ST_LAUNCH_ERROR || rc != MT_ERR) fails++;
    s = run_child(&shape, hang, 64, 3000, 60, &rc, detail, sizeof detail);
    printf("inject hang:  status=%s rc=%d: %s\n", status_name(s), rc, detail);
    if (s != WCU_ST_TIMEOUT) fails++;
    s = run_child(&shape, good, 64, 5000, 120, &rc, detail, sizeof detail);
    printf("next config:  status=%s rc=%d: %s\n", status_name(s), rc, detail);
    if (s != WCU_ST_OK || rc != MT_OK) fails++;
    static const uint32_t wrong_bs[] = {64, 4096};
    for (int i = 0; i < 2; i++) {
        s = run_child(&shape, wrong, wrong_bs[i], 5000, 120, &rc, detail, sizeof detail);
        printf("inject wrong M=%u: status=%s rc=%d: %s\n", wrong_bs[i], status_name(s), rc, detail);
        if (s != WCU_ST_WRONG_RESULT || rc != MT_OK || !strstr(detail, "relative error")) fails++;
    }
    unsetenv("MOETUNE_CUDA_INJECT");
    return fails;
}

static int space_tests(void) {
    static const char *shapes[] = {"E=128,N=768,K=2048,topk=8", "E=8,N=7168,K=4096,topk=2"};
    static const uint32_t bss[] = {1, 64, 4096};
    const char *stride_env = getenv("MT_GPU_STRIDE");
    size_t stride = stride_env ? strtoul(stride_env, NULL, 10) : 1;
    if (stride < 1) stride = 1;
    const char *offset_env = getenv("MT_GPU_OFFSET");
    size_t offset = offset_env ? strtoul(offset_env, NULL, 10) % stride : 0;
    void *st = NULL;
    wrk_device_t dev;
    char err[256];
    if (open_gpu(&st, &dev) != MT_OK) return 1;
    printf("device %s (%s) cc %u.%u, %u SMs, driver %s, CUDA %s, compiler %s, kernels %s\n", dev.name, dev.uuid,
           dev.cc_major, dev.cc_minor, dev.sm_count, dev.driver_version, dev.cuda_version, dev.compiler,
           dev.kernel_hash);
    int fails = 0;
    krn_space_t space;
    krn_space_default(&space);
    krn_limits_t lim;
    krn_limits_default(&lim);
    lim.smem_per_block = dev.smem_per_block;
    for (size_t si = 0; si < 2; si++) {
        krn_shape_t shape;
        krn_shape_parse(shapes[si], &shape, err, sizeof err);
        size_t total = krn_space_size(&space), n = 0, checked = 0, counts[8] = {0};
        krn_config_t *cfgs = calloc(total, sizeof *cfgs);
        char why[160];
        size_t acc = 0;
        for (size_t i = 0; i < total; i++) {
            krn_config_t c;
            krn_space_at(&space, i, &c);
            if (krn_check(&shape, &c, &lim, why, sizeof why) != MT_OK) continue;
            if (acc++ % stride == offset) cfgs[n++] = c;
        }
        wrk_backend_cuda.prepare(st, &shape, cfgs, n);
        wrk_measure_t m = {.warmup = 1,
                           .min_samples = 1,
                           .max_samples = 1,
                           .rsd_target = 1,
                           .budget_ms = 100,
                           .timeout_ms = 20000,
                           .seed = 42};
        uint64_t t0 = mt_now_ms();
        double worst_us[3] = {0, 0, 0};
        double worst_err = 0;
        for (size_t i = 0; i < n; i++) {
            wrk_meas_t out[3];
            uint32_t regs, spills;
            if (wrk_backend_cuda.measure(st, &shape, &cfgs[i], bss, 3, &m, out, &regs, &spills, err, sizeof err) !=
                MT_OK) {
                printf("%s: backend lost at config %zu: %s\n", shapes[si], i, err);
                fails++;
                break;
            }
            for (int b = 0; b < 3; b++) {
                counts[out[b].status & 7]++;
                checked++;
                if (out[b].status != WCU_ST_OK) {
                    fails++;
                    printf("FAIL %s M=%u %ux%ux%u g%u w%u s%u: %s %s\n", shapes[si], bss[b], cfgs[i].block_m,
                           cfgs[i].block_n, cfgs[i].block_k, cfgs[i].group_m, cfgs[i].num_warps, cfgs[i].num_stages,
                           status_name(out[b].status), out[b].detail);
                } else {
                    if (out[b].median_us > worst_us[b]) worst_us[b] = out[b].median_us;
                    const char *re = strstr(out[b].detail, "rel_err=");
                    double e = re ? atof(re + 8) : 0;
                    if (e > worst_err) worst_err = e;
                }
            }
        }
        printf("%s: %zu accepted configs, %zu checked (stride %zu, offset %zu) x 3 batch sizes = %zu checks: ok %zu, "
               "wrong %zu, launch_error %zu, compile_error %zu, timeout %zu; largest rel_err %.2e; %.1f s\n",
               shapes[si], acc, n, stride, offset, checked, counts[WCU_ST_OK], counts[WCU_ST_WRONG_RESULT],
               counts[WCU_ST_LAUNCH_ERROR], counts[WCU_ST_COMPILE_ERROR], counts[WCU_ST_TIMEOUT], worst_err,
               (double)(mt_now_ms() - t0) / 1000.0);
        free(cfgs);
    }
    wrk_backend_cuda.close(&st);
    return fails;
}

static int racing_tests(void) {
    void *st = NULL;
    wrk_device_t dev;
    char err[256];
    if (open_gpu(&st, &dev) != MT_OK) return 1;
    krn_shape_t shape;
    krn_shape_parse("E=128,N=768,K=2048,topk=8", &shape, err, sizeof err);
    krn_config_t cfg;
    krn_config_parse("64x128x64x1x8x4", &cfg);
    static const uint32_t bss[] = {64, 4096};
    int fails = 0;
    uint32_t regs, spills;
    wrk_meas_t plain[2], lost[2], kept[2];
    wrk_measure_t m = {.warmup = 5,
                       .min_samples = 10,
                       .max_samples = 100,
                       .rsd_target = 0.01,
                       .budget_ms = 1000,
                       .timeout_ms = 20000,
                       .seed = 42};
    if (wrk_backend_cuda.measure(st, &shape, &cfg, bss, 2, &m, plain, &regs, &spills, err, sizeof err) != MT_OK) {
        printf("racing: measure failed: %s\n", err);
        wrk_backend_cuda.close(&st);
        return 1;
    }
    double low[2] = {plain[0].median_us / 3, plain[1].median_us / 3},
           high[2] = {plain[0].median_us * 3, plain[1].median_us * 3};
    m.race_margin = 0.2;
    m.best_us = low;
    int rc1 = wrk_backend_cuda.measure(st, &shape, &cfg, bss, 2, &m, lost, &regs, &spills, err, sizeof err);
    /* 1.3x a best: beyond the margin, not beyond WRK_RACE_FAR margins: both racing samples */
    double near[2] = {plain[0].median_us / 1.3, plain[1].median_us / 1.3};
    wrk_meas_t lost2[2];
    m.best_us = near;
    int rc4 = wrk_backend_cuda.measure(st, &shape, &cfg, bss, 2, &m, lost2, &regs, &spills, err, sizeof err);
    m.best_us = high;
    int rc2 = wrk_backend_cuda.measure(st, &shape, &cfg, bss, 2, &m, kept, &regs, &spills, err, sizeof err);
    /* settling: 1.15x a best stays in the race (margin 0.2) and, with a deviation target no
     * sample set meets, stops at min_samples, verified */
    double mid[2] = {plain[0].median_us / 1.15, plain[1].median_us / 1.15};
    wrk_meas_t settled[2];
    m.best_us = mid;
    m.settle_margin = WRK_SETTLE_MARGIN;
    m.rsd_target = 1e-9;
    int rc3 = wrk_backend_cuda.measure(st, &shape, &cfg, bss, 2, &m, settled, &regs, &spills, err, sizeof err);
    for (int b = 0; b < 2; b++) {
        printf("racing M=%u: plain %s %.2f us (%u samples, %s); lost %s %u samples (%s); kept %s %.2f us (%u "
               "samples, %s)\n",
               bss[b], status_name(plain[b].status), plain[b].median_us, plain[b].samples, plain[b].detail,
               status_name(lost[b].status), lost[b].samples, lost[b].detail, status_name(kept[b].status),
               kept[b].median_us, kept[b].samples, kept[b].detail);
        if (plain[b].status != WCU_ST_OK || !strstr(plain[b].detail, "rel_err=")) fails++;
        printf("racing M=%u: 1.3x the best %s %u samples (%s)\n", bss[b], status_name(lost2[b].status),
               lost2[b].samples, lost2[b].detail);
        /* a third of the best: at the first batch size its first replay decides, at the second
         * the check's layer alone (wrk_check_lost) */
        if (rc1 != MT_OK || lost[b].status != WCU_ST_PRUNED || lost[b].samples != 1 ||
            !strstr(lost[b].detail, "not verified") ||
            !strstr(lost[b].detail, b == 0 ? "fastest of 1 samples" : "the check's layer"))
            fails++;
        if (rc4 != MT_OK || lost2[b].status != WCU_ST_PRUNED || lost2[b].samples != 2 ||
            !strstr(lost2[b].detail, "not verified"))
            fails++;
        /* the timed check layer of a winner, and how it compares with its graph's layers */
        const char *chk = strstr(kept[b].detail, "; check ");
        if (chk) printf("racing M=%u: check layer / graph median %.3f\n", bss[b], atof(chk + 8) / kept[b].median_us);
        if ((b > 0) != (chk != NULL)) fails++;
        if (rc2 != MT_OK || kept[b].status != WCU_ST_OK || !strstr(kept[b].detail, "rel_err=") ||
            kept[b].samples < m.min_samples || fabs(kept[b].median_us / plain[b].median_us - 1) > 0.05)
            fails++;
        printf("settling M=%u: %s %u samples (%s)\n", bss[b], status_name(settled[b].status), settled[b].samples,
               settled[b].detail);
        if (rc3 != MT_OK || settled[b].status != WCU_ST_OK || settled[b].samples != m.min_samples ||
            !strstr(settled[b].detail, "rel_err=") || !strstr(settled[b].detail, "settled: mean"))
            fails++;
    }
    wrk_backend_cuda.close(&st);
    return fails;
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int fails = 0;
    if (!getenv("MT_GPU_SKIP_INJECT")) fails += injection_tests();
    fails += racing_tests();
    fails += space_tests();
    printf("%s: %d failure(s)\n", fails ? "FAILED" : "PASSED", fails);
    return fails ? 1 : 0;
}
