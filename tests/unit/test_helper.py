"""Unit tests of the triton helper (worker/moetune_helper.py) that need no GPU, torch or triton:
the line protocol and its error paths, and the one-line failures when parts are missing.

Run by ctest as `python3 -m unittest tests/unit/test_helper.py` (unit/test_helper)."""
import io
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER = os.path.join(ROOT, "worker", "moetune_helper.py")
sys.path.insert(0, os.path.join(ROOT, "worker"))
import moetune_helper as mh  # noqa: E402

SHAPE = {"e": 8, "n": 64, "k": 128, "topk": 2, "dtype": "bf16"}
CFG = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4,
       "num_stages": 3}


class FakeSession:
    """Answers every batch size ok with latency = batch size, except 3 (invalid)."""

    def __init__(self):
        self.prepared = []
        self.measured = []

    def prepare(self, shape, cfgs, bss):
        self.prepared.append((shape, cfgs, bss))

    def measure(self, shape, cfg, bss, m, split):
        self.measured.append((cfg, bss, m, split))
        for bs in bss:
            if bs == 3:
                yield {"status": "invalid", "detail": "OutOfResources: shared memory"}
            else:
                yield {"status": "ok", "median_us": float(bs), "min_us": float(bs), "mean_us": float(bs),
                       "stddev_us": 0.0, "samples": 5, "up_us": 0.6 * bs, "down_us": 0.4 * bs}

    def peak_rss_kb(self):
        return 1234

    def gpu_s(self):
        return 0.5


def run_serve(lines):
    out = io.StringIO()
    old = mh.PROTO_OUT
    mh.PROTO_OUT = out
    try:
        session = FakeSession()
        rc = mh.serve(iter(lines), session)
    finally:
        mh.PROTO_OUT = old
    return rc, [json.loads(x) for x in out.getvalue().splitlines()], session


def measure_req(**over):
    r = {"op": "measure", "id": 7, "shape": SHAPE, "config": CFG, "batch_sizes": [1, 3, 8],
         "measure": {"warmup": 1, "min_samples": 3, "max_samples": 9, "rsd_target": 0.01, "budget_ms": 100,
                     "seed": 5}, "split": True}
    r.update(over)
    return json.dumps(r)


class Protocol(unittest.TestCase):
    def test_measure_replies_per_batch_size_then_done(self):
        rc, out, s = run_serve([measure_req()])
        self.assertEqual(rc, 0)
        self.assertEqual([o.get("bs") for o in out[:3]], [1, 3, 8])
        self.assertEqual([o["status"] for o in out[:3]], ["ok", "invalid", "ok"])
        self.assertTrue(all(o["id"] == 7 for o in out))
        self.assertEqual(out[2]["median_us"], 8.0)
        self.assertAlmostEqual(out[2]["up_us"], 4.8)
        self.assertEqual(out[1]["detail"], "OutOfResources: shared memory")
        self.assertEqual(out[3], {"id": 7, "done": True, "regs": 0, "spills": 0, "peak_rss_kb": 1234, "gpu_s": 0.5})
        self.assertEqual(len(out), 4)
        cfg, bss, m, split = s.measured[0]
        self.assertEqual((cfg, bss, m["max_samples"], m["seed"], split), (CFG, [1, 3, 8], 9, 5, True))

    def test_prepare_has_no_reply(self):
        rc, out, s = run_serve([json.dumps({"op": "prepare", "shape": SHAPE, "configs": [CFG, CFG],
                                            "batch_sizes": [1, 2]})])
        self.assertEqual(out, [])
        self.assertEqual(len(s.prepared), 1)
        self.assertEqual(len(s.prepared[0][1]), 2)

    def test_bad_lines_are_answered_and_serving_goes_on(self):
        bad = ["not json", "[1, 2]", json.dumps({"op": "launch"}), measure_req(id="seven"),
               measure_req(config=dict(CFG, BLOCK_SIZE_M=-16)), measure_req(config=dict(CFG, num_warps=True)),
               measure_req(batch_sizes=[]), measure_req(batch_sizes=[0]),
               measure_req(shape=dict(SHAPE, dtype="int4_w4a16")),
               measure_req(measure={"rsd_target": "tight"}),
               measure_req(measure={"best_us": [1.0, -2.0, 3.0]}),
               measure_req(measure={"best_us": [1.0, 2.0]}),
               measure_req(measure={"race_margin": float("inf")})]
        rc, out, s = run_serve(bad + [measure_req(id=9, batch_sizes=[2])])
        self.assertEqual(rc, 0)
        self.assertEqual(len(out), len(bad) + 2)
        for o in out[:len(bad)]:
            self.assertEqual(list(o), ["error"])
            self.assertTrue(o["error"])
        self.assertIn("BLOCK_SIZE_M", out[4]["error"])
        self.assertIn("int4_w4a16", out[8]["error"])
        self.assertEqual(out[-2]["bs"], 2)
        self.assertEqual(out[-1]["done"], True)
        self.assertEqual(len(s.measured), 1)

    def test_prepare_without_batch_sizes_is_no_error(self):
        rc, out, s = run_serve([json.dumps({"op": "prepare", "shape": SHAPE, "configs": [CFG],
                                            "batch_sizes": []})])
        self.assertEqual(out, [])
        self.assertEqual(s.prepared[0][2], [1])

    def test_quit_stops_before_later_requests(self):
        rc, out, s = run_serve([json.dumps({"op": "quit"}), measure_req()])
        self.assertEqual((rc, out, s.measured), (0, [], []))

    def test_non_finite_latency_is_never_written(self):
        with self.assertRaises(ValueError):
            mh.emit({"median_us": float("nan")})


class Racing(unittest.TestCase):
    """Measurer.time_graph against scripted event timings (no GPU needed)."""

    class Ev:
        def __init__(self, times):
            self.times = times

        def record(self):
            pass

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return self.times.pop(0)

    class Flush:
        def fill_(self, v):
            pass

    class Graph:
        def __init__(self):
            self.replays = 0

        def replay(self):
            self.replays += 1

    def measurer(self, times_ms):
        m = object.__new__(mh.Measurer)
        m.torch = None
        m.flush = self.Flush()
        m.ev = [self.Ev(times_ms), self.Ev([])]
        m.timed_s = 0.0
        return m

    M = {"warmup": 1, "min_samples": 5, "max_samples": 9, "rsd_target": 1e-9, "budget_ms": 1000, "seed": 1,
         "race_margin": 0.2}

    def test_slow_config_stops_after_race_samples(self):
        # graph of 10 layers: 1.5 ms per replay = 150 us per layer, against a best of 100 us
        m, g = self.measurer([1.5, 1.6, 1.4, 1.5, 1.5, 1.5]), self.Graph()
        st, pruned = m.time_graph(g, self.M, 1.0, best_us=100.0)
        self.assertTrue(pruned)
        self.assertEqual(st["samples"], mh.RACE_SAMPLES)
        self.assertEqual(g.replays, 1 + mh.RACE_SAMPLES)
        self.assertAlmostEqual(st["min_us"], 150.0)
        self.assertAlmostEqual(m.timed_s, 3.1e-3)

    def test_close_config_unknown_best_or_racing_off_is_sampled_fully(self):
        for best, margin in ((140.0, 0.2), (0.0, 0.2), (50.0, 0.0)):
            m, g = self.measurer([1.5] * 9), self.Graph()
            st, pruned = m.time_graph(g, dict(self.M, race_margin=margin), 1.0, best_us=best)
            self.assertFalse(pruned, (best, margin))
            self.assertEqual(st["samples"], 5)  # identical samples meet the RSD rule at min_samples

    def test_one_outlier_does_not_prune(self):
        # the first sample is a 30 % outlier, the second is not: the fastest of two decides
        m, g = self.measurer([1.3, 1.0] + [1.0] * 7), self.Graph()
        st, pruned = m.time_graph(g, self.M, 1.0, best_us=100.0)
        self.assertFalse(pruned)


class Classify(unittest.TestCase):
    def test_statuses(self):
        class OutOfResources(Exception):
            pass

        class CompilationError(Exception):
            pass
        self.assertEqual(mh.classify(OutOfResources("shared memory, Required: 1310720"))[0], "invalid")
        self.assertEqual(mh.classify(CompilationError("at 3:4"))[0], "compile_error")
        self.assertEqual(mh.classify(RuntimeError("CUDA error: an illegal memory access"))[0], "launch_error")

    def test_stats(self):
        st = mh.stats([3.0, 1.0, 2.0, 10.0])
        self.assertEqual((st["median_us"], st["min_us"], st["mean_us"], st["samples"]), (2.5, 1.0, 4.0, 4))


def fake_modules(tmp, torch_src=None, triton_src=None, extra=None):
    for name, src in (("torch", torch_src), ("triton", triton_src)):
        if src is not None:
            os.makedirs(os.path.join(tmp, name), exist_ok=True)
            with open(os.path.join(tmp, name, "__init__.py"), "w") as f:
                f.write(textwrap.dedent(src))
    for path, src in (extra or {}).items():
        os.makedirs(os.path.dirname(os.path.join(tmp, path)), exist_ok=True)
        with open(os.path.join(tmp, path), "w") as f:
            f.write(textwrap.dedent(src))


BROKEN = "raise ImportError('No module named torch (fake)')\n"
TORCH_NO_GPU = """
__version__ = '2.11.0+cpu'
class cuda:
    @staticmethod
    def is_available():
        return False
"""
TRITON = "__version__ = '3.6.0'\n"


def run_helper(args, modules):
    env = dict(os.environ, PYTHONPATH=modules, PYTHONNOUSERSITE="1")
    return subprocess.run([sys.executable, "-S", HELPER] + args, env=env, capture_output=True, text=True,
                          input="", timeout=60)


class Missing(unittest.TestCase):
    def check_fatal(self, r, *words):
        self.assertEqual(r.returncode, 1, r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 1, r.stdout)
        msg = json.loads(lines[0])["fatal"]
        self.assertNotIn("\n", msg)
        self.assertNotIn("Traceback", msg)
        for w in words:
            self.assertIn(w, msg)
        return msg

    def test_no_torch(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake_modules(tmp, torch_src=BROKEN)
            r = run_helper(["--kernel", "moetune"], tmp)
            self.check_fatal(r, "torch is not importable", sys.executable)

    def test_no_triton(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake_modules(tmp, torch_src=TORCH_NO_GPU, triton_src="raise ImportError('no triton (fake)')\n")
            r = run_helper(["--kernel", "moetune"], tmp)
            self.check_fatal(r, "triton is not importable", sys.executable, "2.11.0")

    def test_no_gpu(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake_modules(tmp, torch_src=TORCH_NO_GPU, triton_src=TRITON)
            r = run_helper(["--kernel", "sglang"], tmp)
            self.check_fatal(r, "no CUDA GPU", sys.executable)

    def test_probe_reports_each_missing_part(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake_modules(tmp, torch_src=BROKEN)
            r = run_helper(["--probe", "--engine", "vllm"], tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            p = json.loads(r.stdout)["probe"]
            self.assertIsNone(p["torch"])
            self.assertIn("torch is not importable", p["error"])
            self.assertIsNone(p["engine"]["version"])
            self.assertIn("vllm is not installed", p["engine"]["error"])
            self.assertIn("VLLM_TUNED_CONFIG_FOLDER", p["engine"]["env"])

    def test_probe_finds_engine_config_folder(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake_modules(tmp, torch_src=TORCH_NO_GPU, triton_src=TRITON, extra={
                "sglang/__init__.py": "__version__ = '0.5.4'\n",
                "sglang/srt/__init__.py": "", "sglang/srt/layers/__init__.py": "",
                "sglang/srt/layers/moe/__init__.py": "",
                "sglang/srt/layers/moe/fused_moe_triton/__init__.py": ""})
            r = run_helper(["--probe", "--engine", "sglang"], tmp)
            p = json.loads(r.stdout)["probe"]
            self.assertEqual((p["torch"], p["triton"], p["engine"]["version"]), ("2.11.0", "3.6.0", "0.5.4"))
            self.assertEqual(p["engine"]["config_dir"],
                             os.path.join(tmp, "sglang", "srt", "layers", "moe", "fused_moe_triton"))
            self.assertIn("no CUDA GPU", p["error"])


class EngineLookup(unittest.TestCase):
    """EngineKernel names a missing function or an unknown launcher parameter in one line."""

    def load(self, kernels_src):
        tmp = tempfile.mkdtemp()
        fake_modules(tmp, extra={
            "triton/__init__.py": TRITON, "triton/language/__init__.py": "bfloat16 = 'bf16'\n",
            "vllm/__init__.py": "__version__ = '0.0.1test'\n",
            "vllm/model_executor/__init__.py": "", "vllm/model_executor/layers/__init__.py": "",
            "vllm/model_executor/layers/fused_moe/__init__.py": "",
            "vllm/model_executor/layers/fused_moe/fused_moe.py": kernels_src})
        code = ("import sys; sys.path[:0] = [%r, %r]; import moetune_helper as mh\n"
                "try:\n    mh.EngineKernel('vllm', None, __import__('triton')); print('OK', file=sys.__stdout__)\n"
                "except mh.Fatal as e:\n    print('FATAL', e, file=sys.__stdout__)\n" % (tmp, os.path.join(ROOT, "worker")))
        r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
        return r.stdout.strip()

    def test_missing_function(self):
        out = self.load("def fused_experts(): pass\n")
        self.assertTrue(out.startswith("FATAL vllm 0.0.1test: no invoke_fused_moe_kernel"), out)

    def test_unknown_required_parameter(self):
        out = self.load("def invoke_fused_moe_kernel(A, B, C, new_thing, config=None): pass\n"
                        "def moe_align_block_size(topk_ids, block_size, num_experts): pass\n")
        self.assertIn("required parameter 'new_thing'", out)

    def test_known_signature_loads(self):
        out = self.load("def invoke_fused_moe_kernel(A, B, C, A_scale, B_scale, B_zp, topk_weights, "
                        "sorted_token_ids, expert_ids, num_tokens_post_padded, mul_routed_weight, top_k, config, "
                        "compute_type, use_fp8_w8a8=False, block_shape=None): pass\n"
                        "def moe_align_block_size(topk_ids, block_size, num_experts): pass\n")
        self.assertEqual(out, "OK")


if __name__ == "__main__":
    unittest.main()
