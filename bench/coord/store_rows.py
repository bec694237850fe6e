#!/usr/bin/env python3
"""What one result row costs the store: db/schema.sql's results table (WAL, synchronous=NORMAL,
foreign keys on, as db/store.c opens it), the coordinator's INSERT .. ON CONFLICT DO NOTHING,
one transaction per 256 Results x 18 batch sizes (the writer's batch), 8 shapes x 1152 configs
x 18 batch sizes, a config's 18 rows together and the configs in a shuffled order (Results
arrive interleaved across shapes). Variants, run alternately in one process:
  schema       db/schema.sql as it is
  +best_index  plus schema 4's index results_best (shape, batch size, status, median)
Prints microseconds per row (Python's sqlite3 adds its own per-row cost to both alike).
  python3 bench/coord/store_rows.py [ROUNDS]"""
import os
import random
import sqlite3
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = open(os.path.join(ROOT, "db", "schema.sql")).read()
BEST = "CREATE INDEX results_best ON results (shape_id, batch_size, status, median_us);"
BS = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]
SQL = ("INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, mean_us,"
       " stddev_us, samples, detail, registers, spills, job_id, worker_id, device_id, backend, compiler,"
       " kernel_hash, created, versions, up_us, down_us, timed_us, phase) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?,"
       " ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
       " ON CONFLICT (sweep_id, shape_id, config_id, batch_size) DO NOTHING")


def rows(shapes=8, configs=1152):
    rnd = random.Random(1)
    groups = []
    for sh in range(1, shapes + 1):
        for c in range(1, configs + 1):
            groups.append([(1, sh, c, b, "ok" if rnd.random() < 0.66 else "pruned", rnd.random() * 100, 1.0, 1.0,
                            0.5, 10, None, 0, 0, c // 16 + 1, "worker-%d" % (c % 256), 1, "sim", "sim", "ab" * 32,
                            1764979200, None, 0.0, 0.0, 12.5, 1) for b in BS])
    rnd.shuffle(groups)
    return [r for g in groups for r in g]


def run(variant, data, d):
    path = os.path.join(d, variant + ".db")
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA foreign_keys = ON")
    db.executescript(SCHEMA + (BEST if variant == "+best_index" else ""))
    db.execute("INSERT INTO sweeps (id, name, spec, state, created) VALUES (1, 's', x'00', 'running', 0)")
    db.execute("INSERT INTO devices (id, name, uuid) VALUES (1, 'sim', 'u')")
    for sh in range(1, 9):
        db.execute("INSERT INTO shapes (id, e, n, k, topk, dtype) VALUES (?, 8, ?, 4096, 2, 'bf16')", (sh, 64 * sh))
    db.executemany("INSERT INTO configs VALUES (?, ?, 1, 1, 1, 1, 1)", [(c, c) for c in range(1, 1153)])
    batch = 256 * len(BS)
    t0 = time.perf_counter()
    for i in range(0, len(data), batch):
        db.execute("BEGIN")
        db.executemany(SQL, data[i:i + batch])
        db.execute("COMMIT")
    took = time.perf_counter() - t0
    db.close()  # the last connection: the WAL goes into the file
    size = os.path.getsize(path)
    for f in (path, path + "-wal", path + "-shm"):
        if os.path.exists(f):
            os.remove(f)
    return took, size


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    data = rows()
    with tempfile.TemporaryDirectory() as d:
        for r in range(rounds):
            for v in ("+best_index", "schema"):
                took, size = run(v, data, d)
                print(f"round {r + 1} {v:12s} rows {len(data)}  {took:.2f} s  {took / len(data) * 1e6:.2f} us/row"
                      f"  file {size / 1e6:.1f} MB", flush=True)
