-- moetune store, schema version 6. The coordinator applies it through db/store.c
-- (PRAGMA user_version); this file is the readable copy and is embedded at build time.
CREATE TABLE devices (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  uuid TEXT NOT NULL UNIQUE,
  cc_major INTEGER, cc_minor INTEGER, sm_count INTEGER, memory_bytes INTEGER,
  driver_version TEXT, cuda_version TEXT
);
CREATE TABLE workers (
  id INTEGER PRIMARY KEY,
  worker_id TEXT NOT NULL UNIQUE,
  host TEXT, pid INTEGER, backend TEXT,
  device_id INTEGER REFERENCES devices(id),
  compiler TEXT, kernel_hash TEXT,
  first_seen INTEGER, last_seen INTEGER,
  versions TEXT                   -- the backend's versions: 'kernel=.. triton=.. torch=.. python=..'
);
CREATE TABLE sweeps (
  id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  spec BLOB NOT NULL,              -- packed moetune.SweepSpec
  state TEXT NOT NULL CHECK (state IN ('running', 'done', 'cancelled', 'failed')),
  results_planned INTEGER NOT NULL DEFAULT 0,
  created INTEGER NOT NULL,
  finished INTEGER
);
CREATE TABLE shapes (
  id INTEGER PRIMARY KEY,
  e INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL, topk INTEGER NOT NULL,
  dtype TEXT NOT NULL, block_n INTEGER NOT NULL DEFAULT 0, block_k INTEGER NOT NULL DEFAULT 0,
  routing TEXT NOT NULL DEFAULT '', -- sha256 of the captured routing the inputs draw from; '' = uniform
  UNIQUE (e, n, k, topk, dtype, block_n, block_k, routing)
);
CREATE TABLE configs (
  id INTEGER PRIMARY KEY,
  block_m INTEGER NOT NULL, block_n INTEGER NOT NULL, block_k INTEGER NOT NULL,
  group_m INTEGER NOT NULL, num_warps INTEGER NOT NULL, num_stages INTEGER NOT NULL,
  UNIQUE (block_m, block_n, block_k, group_m, num_warps, num_stages)
);
-- configs the static rules rejected when the sweep was planned, with the reason
CREATE TABLE rejected (
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  shape_id INTEGER NOT NULL REFERENCES shapes(id),
  config_id INTEGER NOT NULL REFERENCES configs(id),
  reason TEXT NOT NULL,
  PRIMARY KEY (sweep_id, shape_id, config_id)
);
CREATE TABLE jobs (
  id INTEGER PRIMARY KEY,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  shape_id INTEGER NOT NULL REFERENCES shapes(id),
  state TEXT NOT NULL CHECK (state IN ('pending', 'leased', 'done', 'failed', 'cancelled')),
  attempts INTEGER NOT NULL DEFAULT 0,
  worker_id TEXT,                  -- current or last lease holder
  lease_token INTEGER,             -- current or last lease token
  lease_expires INTEGER,           -- wall-clock ms
  avoid_worker TEXT,               -- a retry of a crashing config runs elsewhere
  created INTEGER NOT NULL,
  finished INTEGER,
  phase INTEGER NOT NULL DEFAULT 1, -- halving: 1 = every config at a few samples, 2 = the finalists
  batch_sizes TEXT                 -- the batch sizes it measures ('1,16,256'); NULL = the sweep's
);
CREATE INDEX jobs_by_state ON jobs (state, sweep_id);
CREATE TABLE job_configs (
  job_id INTEGER NOT NULL REFERENCES jobs(id),
  config_id INTEGER NOT NULL REFERENCES configs(id),
  PRIMARY KEY (job_id, config_id)
);
-- configs that killed a worker's child; a second crash quarantines the config
CREATE TABLE crashes (
  sweep_id INTEGER NOT NULL, shape_id INTEGER NOT NULL, config_id INTEGER NOT NULL,
  count INTEGER NOT NULL, last_worker TEXT,
  PRIMARY KEY (sweep_id, shape_id, config_id)
);
CREATE TABLE results (
  id INTEGER PRIMARY KEY,
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  shape_id INTEGER NOT NULL REFERENCES shapes(id),
  config_id INTEGER NOT NULL REFERENCES configs(id),
  batch_size INTEGER NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'compile_error', 'launch_error',
                                          'wrong_result', 'timeout', 'crashed', 'pruned')),
  median_us REAL, min_us REAL, mean_us REAL, stddev_us REAL, samples INTEGER,
  detail TEXT,
  registers INTEGER, spills INTEGER,
  job_id INTEGER, worker_id TEXT,
  device_id INTEGER REFERENCES devices(id),
  backend TEXT NOT NULL,           -- 'sim' results are simulated, never a measurement
  compiler TEXT NOT NULL,          -- export directory: 'cuda_13_0', 'sim'
  kernel_hash TEXT,
  created INTEGER NOT NULL,
  versions TEXT,                   -- the measuring worker's versions (triton: kernel, triton, torch, python)
  up_us REAL, down_us REAL,        -- GEMM1 and GEMM2 timed alone, medians; 0 = not measured
  timed_us REAL,                   -- GPU time in the timed kernels of this measurement; NULL = not reported
  phase INTEGER NOT NULL DEFAULT 1, -- the job phase that measured it; only a later phase replaces a row
  UNIQUE (sweep_id, shape_id, config_id, batch_size)
);
CREATE TABLE exports (
  id INTEGER PRIMARY KEY,
  created INTEGER NOT NULL,
  out_dir TEXT NOT NULL,
  path TEXT NOT NULL,              -- file written, relative to out_dir
  sweep_ids TEXT,                  -- comma-separated sweeps the entries came from
  entries INTEGER NOT NULL,
  changed_entries INTEGER NOT NULL, -- entries that differ from the file it replaced
  content_hash TEXT NOT NULL
);
CREATE TABLE routings (             -- captured routing files sweeps were planned on
  sha256 TEXT PRIMARY KEY,
  source TEXT NOT NULL,             -- the path the sweep was given
  tokens INTEGER NOT NULL, topk INTEGER NOT NULL,
  created INTEGER NOT NULL
);
-- The ship guard: per (sweep, shape, batch size) the configs the engine runs without the tuned
-- file (its default for that M) or with the file it would otherwise load (the incumbent), measured
-- beside the finalists so that export never ships a config slower than either.
CREATE TABLE guard (
  sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
  shape_id INTEGER NOT NULL REFERENCES shapes(id),
  batch_size INTEGER NOT NULL,
  role TEXT NOT NULL CHECK (role IN ('default', 'incumbent', 'nearest', 'other')), -- between two keys
                                   -- (a batch size of no key): the config the engine takes there
                                   -- (nearest key's) and the other neighbour's
  engine TEXT NOT NULL,            -- whose rule or file: 'sglang', 'vllm'
  config_id INTEGER NOT NULL REFERENCES configs(id),
  searched INTEGER NOT NULL,       -- 1 when the config is in the sweep's searched space for the shape
  source TEXT NOT NULL,            -- 'get_default_config (M <= E)', or the incumbent file and its key
  PRIMARY KEY (sweep_id, shape_id, batch_size, role, engine)
);
