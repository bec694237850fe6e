/* mt_seeds.c - writes the wire-message seed corpus for fuzz_wire: one real message of every
 * body the peers exchange.   mt_seeds DIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mt.h"
#include "wire.h"

/* Writes body, in an envelope, to DIR/<body's name>.bin (hello.bin, result.bin, ...). Returns 1
 * when it cannot. */
static int write_seed(const char *dir, ProtobufCMessage *body) {
    wire_env_t env;
    uint8_t *buf = NULL;
    size_t len = 0;
    char path[512];
    wire_env_wrap(&env, body);
    if (wire_pack(&env, &buf, &len) != MT_OK) return 1;
    snprintf(path, sizeof path, "%s/%s.bin", dir, wire_body_name(env.body_case));
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(buf);
        return 1;
    }
    fwrite(buf, 1, len, f);
    fclose(f);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: mt_seeds DIR\n");
        return MT_EXIT_USAGE;
    }
    const char *dir = argv[1];
    int bad = 0;
    Moetune__Gpu gpu = MOETUNE__GPU__INIT;
    gpu.name = "NVIDIA H200";
    gpu.uuid = "GPU-0000";
    gpu.cc_major = 9;
    gpu.sm_count = 132;
    Moetune__Hello hello = MOETUNE__HELLO__INIT;
    hello.worker_id = "host-1-gpu0";
    hello.host = "host";
    hello.pid = 1;
    hello.backend = "cuda";
    hello.gpu = &gpu;
    hello.compiler = "cuda_13_0";
    bad |= write_seed(dir, &hello.base);

    Moetune__Measurement m[2] = {MOETUNE__MEASUREMENT__INIT, MOETUNE__MEASUREMENT__INIT};
    Moetune__Measurement *pm[2] = {&m[0], &m[1]};
    m[0].batch_size = 1;
    m[0].status = MOETUNE__STATUS__STATUS_OK;
    m[0].median_us = m[0].min_us = m[0].mean_us = 12.5;
    m[0].samples = 10;
    m[1].batch_size = 64;
    m[1].status = MOETUNE__STATUS__STATUS_WRONG_RESULT;
    m[1].detail = "relative error 0.3";
    Moetune__Result res = MOETUNE__RESULT__INIT;
    res.job_id = 3;
    res.lease_token = 77;
    res.seq = 1;
    res.config_id = 9;
    res.n_measurements = 2;
    res.measurements = pm;
    bad |= write_seed(dir, &res.base);

    Moetune__Shape shape = MOETUNE__SHAPE__INIT;
    shape.e = 128;
    shape.n = 768;
    shape.k = 2048;
    shape.topk = 8;
    shape.dtype = "bf16";
    Moetune__Config cfg = MOETUNE__CONFIG__INIT;
    cfg.block_m = 16;
    cfg.block_n = 64;
    cfg.block_k = 128;
    cfg.group_m = 1;
    cfg.num_warps = 4;
    cfg.num_stages = 3;
    Moetune__JobConfig jc = MOETUNE__JOB_CONFIG__INIT;
    Moetune__JobConfig *pjc = &jc;
    jc.config_id = 9;
    jc.config = &cfg;
    Moetune__Measure meas = MOETUNE__MEASURE__INIT;
    meas.min_samples = 10;
    meas.max_samples = 100;
    meas.rsd_target = 0.01;
    uint32_t bs[3] = {1, 64, 4096};
    Moetune__Job job = MOETUNE__JOB__INIT;
    job.job_id = 3;
    job.lease_token = 77;
    job.sweep_id = 1;
    job.shape = &shape;
    job.n_configs = 1;
    job.configs = &pjc;
    job.n_batch_sizes = 3;
    job.batch_sizes = bs;
    job.measure = &meas;
    bad |= write_seed(dir, &job.base);

    Moetune__SweepSpec spec = MOETUNE__SWEEP_SPEC__INIT;
    Moetune__Shape *pshape = &shape;
    spec.name = "seed";
    spec.n_shapes = 1;
    spec.shapes = &pshape;
    spec.n_batch_sizes = 3;
    spec.batch_sizes = bs;
    spec.strategy = "exhaustive";
    spec.measure = &meas;
    Moetune__Submit sub = MOETUNE__SUBMIT__INIT;
    sub.spec = &spec;
    bad |= write_seed(dir, &sub.base);

    Moetune__Ready ready = MOETUNE__READY__INIT;
    ready.credits = 1;
    bad |= write_seed(dir, &ready.base);

    uint64_t seqs[3] = {1, 2, 3};
    Moetune__Ack ack = MOETUNE__ACK__INIT;
    ack.n_seqs = 3;
    ack.seqs = seqs;
    bad |= write_seed(dir, &ack.base);

    Moetune__Heartbeat hb = MOETUNE__HEARTBEAT__INIT;
    uint64_t jobs[1] = {3};
    hb.sent_ms = 1000;
    hb.n_job_ids = 1;
    hb.job_ids = jobs;
    bad |= write_seed(dir, &hb.base);

    Moetune__StatusRequest sr = MOETUNE__STATUS_REQUEST__INIT;
    bad |= write_seed(dir, &sr.base);
    if (bad) fprintf(stderr, "mt_seeds: cannot write into %s\n", dir);
    return bad ? MT_EXIT_FAIL : 0;
}
