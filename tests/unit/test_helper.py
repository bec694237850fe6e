"""Unit tests of the triton helper (worker/moetune_helper.py and worker/helper/) that need no GPU, torch or triton:
the line protocol and its error paths, and the one-line failures when parts are missing.

Run by ctest as `python3 -m unittest tests/unit/test_helper.py` (unit/test_helper)."""
import io
import json
import math
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from contextlib import redirect_stdout
from unittest import mock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HELPER = os.path.join(ROOT, "worker", "moetune_helper.py")
sys.path.insert(0, os.path.join(ROOT, "worker"))
import moetune_helper as mh  # noqa: E402
from helper import kernels, measure, protocol, reference, routing  # noqa: E402
from helper import pool as hpool  # noqa: E402

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

    def measure(self, shape, cfg, bss, m, split, routing=None):
        self.measured.append((cfg, bss, m, split))
        self.routing = routing
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

    def stats(self):
        return {"verified": 2, "split_margin": 0.1}


def run_serve(lines):
    out = io.StringIO()
    old = protocol.PROTO_OUT
    protocol.PROTO_OUT = out
    try:
        session = FakeSession()
        rc = protocol.serve(iter(lines), session)
    finally:
        protocol.PROTO_OUT = old
    return rc, [json.loads(x) for x in out.getvalue().splitlines()], session


def measure_req(**over):
    r = {"op": "measure", "id": 7, "shape": SHAPE, "config": CFG, "batch_sizes": [1, 3, 8],
         "measure": {"warmup": 1, "min_samples": 3, "max_samples": 9, "rsd_target": 0.01, "budget_ms": 100,
                     "seed": 5}, "split": True}
    r.update(over)
    return json.dumps(r)


class Streams(unittest.TestCase):
    """Importing the helper changes no stream; main() points sys.stdout at stderr and keeps the real
    stdout for protocol lines only."""

    def test_import_leaves_stdout_alone_and_main_moves_it(self):
        code = ("import sys; real = sys.stdout; sys.path.insert(0, %r)\n"
                "import moetune_helper as mh\n"
                "print('import-kept' if sys.stdout is real else 'import-moved', file=sys.__stderr__)\n"
                "mh.main(['--probe', '--engine', 'vllm'])\n"
                "print('library text')\n" % os.path.join(ROOT, "worker"))
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertIn("import-kept", r.stderr)
        self.assertIn("library text", r.stderr)
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 1, r.stdout)
        self.assertIn("probe", json.loads(lines[0]))


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
        self.assertEqual(set(out[3].pop("phases")), set(protocol.PHASE_KEYS) | {"wall"})
        self.assertEqual(out[3], {"id": 7, "done": True, "regs": 0, "spills": 0, "peak_rss_kb": 1234, "gpu_s": 0.5,
                                  "stats": {"verified": 2, "split_margin": 0.1}})
        self.assertEqual(len(out), 4)
        cfg, bss, m, split = s.measured[0]
        self.assertEqual((cfg, bss, m["max_samples"], m["seed"], split), (CFG, [1, 3, 8], 9, 5, True))

    def test_start_up_marks_are_set_once_in_order(self):
        protocol.START.clear()
        prep = json.dumps({"op": "prepare", "shape": SHAPE, "configs": [CFG], "batch_sizes": [1]})
        run_serve([prep, measure_req(), measure_req(id=8)])
        marks = dict(protocol.START)
        self.assertEqual(sorted(marks), ["first_done", "first_measure", "first_prepare"])
        self.assertTrue(0 <= marks["first_prepare"] <= marks["first_measure"] <= marks["first_done"])
        run_serve([prep, measure_req()])  # later requests move no mark
        self.assertEqual(protocol.START, marks)
        protocol.START.clear()

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
            protocol.emit({"median_us": float("nan")})


class Clock:
    """A monotonic clock the test moves: each read returns now, then now += step."""

    def __init__(self, step=0.0):
        self.now = 100.0
        self.step = step

    def __call__(self):
        t = self.now
        self.now += self.step
        return t


class Phases(unittest.TestCase):
    """The measuring process's wall as a partition into named phases (protocol.Phases, HELPER.md
    "phases"): every second between two marks is booked once, the GPU time of timed kernels is
    moved out of the phase it ran in into "timed", and done carries the seconds since the
    previous done."""

    def test_marks_partition_the_wall_and_carve_out_the_timed_kernels(self):
        clock = Clock()
        ph = protocol.Phases(clock)
        clock.now += 2.0
        ph.mark("idle")
        clock.now += 0.5
        ph.mark("compile_wait")
        clock.now += 1.0
        ph.timed(0.75)  # GPU time of timed replays inside the next phase
        ph.mark("samples")
        clock.now += 0.25
        ph.timed(9.0)   # more than the phase lasted: never more than its wall
        ph.mark("check_layer")
        got = ph.take()
        self.assertEqual(set(got), set(protocol.PHASE_KEYS) | {"wall"})
        self.assertAlmostEqual(got["idle"], 2.0)
        self.assertAlmostEqual(got["compile_wait"], 0.5)
        self.assertAlmostEqual(got["samples"], 0.25)
        self.assertAlmostEqual(got["check_layer"], 0.0)
        self.assertAlmostEqual(got["timed"], 1.0)
        self.assertAlmostEqual(got["wall"], 3.75)
        self.assertAlmostEqual(sum(v for k, v in got.items() if k != "wall"), got["wall"])
        # take() starts afresh; the pending timed seconds went with the mark
        clock.now += 1.0
        ph.mark("other")
        got = ph.take()
        self.assertEqual((got["other"], got["timed"], got["wall"], got["idle"]), (1.0, 0.0, 1.0, 0.0))

    def test_done_carries_the_request_s_phases_and_idle_is_the_wait_for_it(self):
        clock = Clock()
        old = protocol.PHASES
        protocol.PHASES = protocol.Phases(clock)
        try:
            def lines():
                clock.now += 3.0  # the worker takes 3 s to send the first request
                yield measure_req()
                clock.now += 5.0
                yield measure_req(id=8)
            rc, out, s = run_serve(lines())
        finally:
            protocol.PHASES = old
        dones = [o for o in out if o.get("done")]
        self.assertEqual(len(dones), 2)
        self.assertAlmostEqual(dones[0]["phases"]["idle"], 3.0)
        self.assertAlmostEqual(dones[0]["phases"]["wall"], 3.0)
        self.assertAlmostEqual(dones[1]["phases"]["idle"], 5.0)
        self.assertAlmostEqual(dones[1]["phases"]["wall"], 5.0)

    def test_one_books_each_step_to_its_phase(self):
        # a survivor, checked and split, with a clock that moves 1 s per read: every step of
        # Measurer._one shows in its phase, the timed replays' GPU time in "timed", and nothing
        # is booked twice (the phases sum to the wall)
        v = VerifyAfterRace()
        v.setUp()
        clock = Clock(step=1.0)
        old = protocol.PHASES
        protocol.PHASES = protocol.Phases(clock)
        try:
            res = v.run_one([1.01] * 5 + [0.6] * 3 + [0.4] * 3, 100.0)
            protocol.PHASES.mark("other")
            got = protocol.PHASES.take()
        finally:
            protocol.PHASES = old
        self.assertEqual(res["status"], "ok")
        for k in ("inputs", "launch", "capture", "samples", "warmup", "check", "split", "timed"):
            self.assertGreater(got[k], 0, k)
        self.assertEqual(got["compile_wait"], 0)
        self.assertAlmostEqual(got["timed"], res["timed_us"] * 1e-6)
        self.assertAlmostEqual(sum(v for k, v in got.items() if k != "wall"), got["wall"])


class LayerPair(unittest.TestCase):
    """Kernel.layer: one layer with one config, or with SGLang's pair (the second GEMM's config from
    the _down entry, on the align and first GEMM of the first)."""

    def run_layer(self, *cfgs):
        log = []

        class Sum:
            @staticmethod
            def sum(x, dim, out):
                log.append("sum")

        class C3:
            def view(self, *shape):
                return self

        class K(kernels.Kernel):
            torch = Sum()

            def start_layer(self, L, cfg):
                log.append(("align", cfg))

            def up(self, L, cfg):
                log.append(("up", cfg))

            def act(self, L):
                log.append("act")

            def down(self, L, cfg):
                log.append(("down", cfg))
        K().layer(kernels.Layer(m=1, topk=1, c3=C3()), *cfgs)
        return log

    def test_one_config_runs_both_gemms(self):
        self.assertEqual(self.run_layer("a"), [("align", "a"), ("up", "a"), "act", ("down", "a"), "sum"])

    def test_a_pair_runs_the_second_gemm_with_its_down_config(self):
        self.assertEqual(self.run_layer("a", "d"), [("align", "a"), ("up", "a"), "act", ("down", "d"), "sum"])


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
        layers = measure.LAYERS_PER_GRAPH  # the scripts time 10-layer replays

        def __init__(self):
            self.replays = 0

        def replay(self):
            self.replays += 1

    def measurer(self, times_ms):
        m = object.__new__(measure.Measurer)
        m.torch = None
        m.flush = self.Flush()
        m.ev = [self.Ev(times_ms), self.Ev([])]
        m._pairs = lambda n: [tuple(m.ev)] * n  # samples queued together read the same script
        m.timed_s = 0.0
        return m

    M = {"warmup": 1, "min_samples": 5, "max_samples": 9, "rsd_target": 1e-9, "budget_ms": 1000, "seed": 1,
         "race_margin": 0.2}

    def test_slow_config_stops_after_race_samples(self):
        # graph of 10 layers: 1.3 ms per replay = 130 us per layer, against a best of 100 us:
        # beyond the margin (120 us), not far beyond (140 us), so both racing replays decide
        m, g = self.measurer([1.3, 1.35, 1.4, 1.5, 1.5, 1.5]), self.Graph()
        st, how = m.time_graph(g, self.M, 1.0, best_us=100.0)
        self.assertEqual(how, "pruned")
        self.assertEqual(st["samples"], measure.RACE_SAMPLES)
        self.assertEqual(g.replays, measure.RACE_SAMPLES)  # the warmup replay is not paid by a loser
        self.assertAlmostEqual(st["min_us"], 130.0)
        self.assertAlmostEqual(m.timed_s, 2.65e-3)

    def test_far_first_replay_prunes_alone(self):
        # 150 us per layer against a best of 100 us at margin 0.2: beyond 1 + 2 x 0.2, the first
        # replay decides (race_lost, wrk_race_lost in C); 139 us is not, and the second replay is taken
        m, g = self.measurer([1.5, 1.0]), self.Graph()
        st, how = m.time_graph(g, self.M, 1.0, best_us=100.0)
        self.assertEqual((how, st["samples"], g.replays, st["min_us"]), ("pruned", 1, 1, 150.0))
        self.assertAlmostEqual(m.timed_s, 1.5e-3)
        m, g = self.measurer([1.39, 1.0] + [1.0] * 7), self.Graph()
        st, how = m.time_graph(g, self.M, 1.0, best_us=100.0)
        self.assertEqual((how, st["samples"]), ("", 5))

    def test_one_reports_the_timed_gpu_time(self):
        m = self.measurer([])
        def fake(shape, cfg, bs, meas, split, best_us, judge):
            m.timed_s += 0.25e-3
            return {"status": "pruned" if best_us else "ok", "median_us": 1.0}
        m._one = fake
        self.assertAlmostEqual(m.one({}, {}, 1, self.M, False)["timed_us"], 250.0)
        self.assertAlmostEqual(m.one({}, {}, 1, self.M, False, 5.0)["timed_us"], 250.0)
        m._one = lambda *a: {"status": "invalid", "detail": "x"}
        self.assertNotIn("timed_us", m.one({}, {}, 1, self.M, False))

    def test_close_config_unknown_best_or_racing_off_is_sampled_fully(self):
        for best, margin in ((140.0, 0.2), (0.0, 0.2), (50.0, 0.0)):
            m, g = self.measurer([1.5] * 9), self.Graph()
            st, how = m.time_graph(g, dict(self.M, race_margin=margin), 1.0, best_us=best)
            self.assertEqual(how, "", (best, margin))
            self.assertEqual(st["samples"], 5)  # identical samples meet the RSD rule at min_samples

    def test_samples_are_per_layer_of_the_graph(self):
        # a graph of 2 layers: 0.5 ms a replay is 250 us a layer, queued or one by one
        m, g = self.measurer([0.5] * 9), self.Graph()
        g.layers = 2
        st, how = m.time_graph(g, dict(self.M, race_margin=0.0), 1.0)
        self.assertEqual((how, st["samples"], st["median_us"]), ("", 5, 250.0))
        self.assertAlmostEqual(m.timed_s, 2.5e-3)

    def test_one_outlier_does_not_prune(self):
        # the first sample is a 30 % outlier, the second is not: the fastest of two decides
        m, g = self.measurer([1.3, 1.0] + [1.0] * 7), self.Graph()
        st, how = m.time_graph(g, self.M, 1.0, best_us=100.0)
        self.assertEqual(how, "")

    def test_racing_times_the_warmup_replays(self):
        # warmup 5 with racing: the first two replays are timed and judged; a loser stops after
        # those 2 replays (7 without racing), with both samples
        m, g = self.measurer([1.3, 1.35]), self.Graph()
        st, how = m.time_graph(g, dict(self.M, warmup=5), 1.0, best_us=100.0)
        self.assertEqual(how, "pruned")
        self.assertEqual(g.replays, 2)
        self.assertEqual((st["samples"], st["min_us"]), (measure.RACE_SAMPLES, 130.0))
        # a survivor: the timed replays (here a slow first one) stay out of its statistics, and
        # it gets as many replays before its samples as without racing
        m, g = self.measurer([1.35, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]), self.Graph()
        st, how = m.time_graph(g, dict(self.M, warmup=5), 1.0, best_us=100.0)
        self.assertEqual(how, "")
        self.assertEqual((st["samples"], st["median_us"], st["mean_us"]), (5, 100.0, 100.0))
        self.assertEqual(g.replays, 5 + 5)
        m2, g2 = self.measurer([1.0] * 5), self.Graph()
        st2, _ = m2.time_graph(g2, dict(self.M, warmup=5, race_margin=0.0), 1.0, best_us=100.0)
        self.assertEqual((g2.replays, st2), (g.replays, st))
        self.assertAlmostEqual(m.timed_s, (1.35 + 1.0 + 5.0) * 1e-3)


class QueuedSamples(unittest.TestCase):
    """The samples the stop rule cannot refuse (the first min_samples) are queued on the GPU
    together and waited for once; the racing replays before them and the samples after them
    are waited for one by one, as the rule looks at each."""

    class Ev:
        def __init__(self, log, name, times=None):
            self.log, self.name, self.times = log, name, times

        def record(self):
            self.log.append("rec " + self.name)

        def synchronize(self):
            self.log.append("wait")

        def elapsed_time(self, other):
            return self.times.pop(0)

    def run_graph(self, times_ms, meas, best_us=0.0):
        log, times = [], list(times_ms)
        m = object.__new__(measure.Measurer)
        m.timed_s = 0.0

        class Flush:
            def fill_(self, v):
                log.append("flush %d" % v)

        class Graph:
            layers = measure.LAYERS_PER_GRAPH

            def replay(self):
                log.append("replay")
        m.flush = Flush()
        m.ev = [self.Ev(log, "a", times), self.Ev(log, "b")]
        m._pairs = lambda n: [(self.Ev(log, "a%d" % i, times), self.Ev(log, "b%d" % i)) for i in range(n)]
        st, how = m.time_graph(Graph(), meas, 1.0, best_us=best_us)
        return st, how, log

    def test_first_min_samples_wait_once(self):
        meas = {"warmup": 1, "min_samples": 3, "max_samples": 9, "rsd_target": 1e-9, "budget_ms": 1000, "seed": 1,
                "race_margin": 0.0}
        # three samples queued, then one wait; unsteady, so two more, each waited for
        st, how, log = self.run_graph([1.0, 1.2, 1.0, 1.1, 1.0], dict(meas, max_samples=5))
        self.assertEqual(log[:14], ["replay", "flush 1", "rec a0", "replay", "rec b0", "flush 2", "rec a1", "replay",
                                    "rec b1", "flush 3", "rec a2", "replay", "rec b2", "wait"])
        self.assertEqual(log[14:], ["flush 4", "rec a", "replay", "rec b", "wait",
                                    "flush 5", "rec a", "replay", "rec b", "wait"])
        self.assertEqual((st["samples"], how), (5, ""))
        self.assertAlmostEqual(st["mean_us"], 106.0)

    def test_racing_replays_are_waited_for_one_by_one(self):
        meas = {"warmup": 2, "min_samples": 3, "max_samples": 3, "rsd_target": 1e-9, "budget_ms": 1000, "seed": 1,
                "race_margin": 0.2}
        st, how, log = self.run_graph([1.5], meas, best_us=100.0)  # far beyond: the first replay decides
        self.assertEqual(log, ["flush 0", "rec a", "replay", "rec b", "wait"])
        self.assertEqual(how, "pruned")

    def test_flush_is_twice_the_l2_the_device_reports(self):
        class Props:
            L2_cache_size = 50 << 20
        self.assertEqual(measure.flush_bytes(Props()), 100 << 20)
        Props.L2_cache_size = 0
        self.assertEqual(measure.flush_bytes(Props()), measure.FLUSH_BYTES)
        self.assertEqual(measure.flush_bytes(object()), measure.FLUSH_BYTES)
        # done's stats say which flush the samples followed
        m = object.__new__(measure.Measurer)
        m.flush_bytes, m.counts, m.split_margin = 100 << 20, measure.new_counts(), 0.1
        self.assertEqual(measure.Session(None, m, None).stats()["flush_bytes"], 100 << 20)


class Settling(unittest.TestCase):
    """Racing's second check: a survivor whose mean is clearly beyond the best stops at
    min_samples (Measurer.time_graph, settled(); the C side's wrk_settled)."""

    # replays alternate 1.00 and 1.10 ms: RSD about 5 %, never the 1 % target (2 racing replays + 40)
    WIDE = [1.0, 1.1] * 21
    M = dict(Racing.M, max_samples=40, rsd_target=0.01, settle_margin=0.02)

    def run_graph(self, times, m, best):
        r = Racing()
        meas, g = r.measurer(list(times)), Racing.Graph()
        st, how = meas.time_graph(g, m, 60.0, best_us=best)
        return st, how, g.replays

    def test_clearly_slower_config_stops_at_settle_samples(self):
        # in the race (100 us is not above 90 x 1.2); then mean 105 us (SETTLE_SAMPLES = 4
        # samples, before min_samples 5), standard error about 2.9 us: 105 - 2 x 2.9 > 90 x 1.02
        self.assertEqual(measure.SETTLE_SAMPLES, 4)
        st, how, replays = self.run_graph(self.WIDE, self.M, 90.0)
        self.assertEqual((how, st["samples"], replays), ("settled", 4, measure.RACE_SAMPLES + 4))
        # with min_samples under SETTLE_SAMPLES, settling looks at min_samples
        st, how, replays = self.run_graph(self.WIDE, dict(self.M, min_samples=3), 90.0)
        self.assertEqual((how, st["samples"]), ("settled", 3))
        # 4 samples that do not settle are followed by the rest of min_samples, queued together
        r = Racing()
        meas, g = r.measurer([1.0, 1.0] + [1.0, 1.1] * 10), Racing.Graph()
        queued = []
        pairs = meas._pairs
        meas._pairs = lambda n: queued.append(n) or pairs(n)
        st, how = meas.time_graph(g, dict(self.M, min_samples=10), 60.0, best_us=100.0)
        self.assertEqual(queued[:2], [4, 6])
        self.assertGreaterEqual(st["samples"], 10)

    def test_close_or_unknown_or_off_samples_to_the_budget(self):
        # within the margin of the best (103 us: the mean never passes 105.06), no best known,
        # settling off, racing off: the RSD rule (never met here) runs to max_samples
        for best, m in ((103.0, self.M), (0.0, self.M), (90.0, dict(self.M, settle_margin=0.0)),
                        (90.0, dict(self.M, race_margin=0.0))):
            st, how, _ = self.run_graph(self.WIDE, m, best)
            self.assertEqual((how, st["samples"]), ("", 40), (best, m))

    def test_settles_once_the_error_is_small_enough(self):
        # a mean of about 105 us against a best of 100: 5 % beyond, but settling needs 2 % plus two
        # standard errors; at 5 samples that is not yet proved, at 14 it is
        st, how, _ = self.run_graph(self.WIDE, self.M, 100.0)
        self.assertEqual((how, st["samples"]), ("settled", 14))
        self.assertGreater(st["mean_us"] - 2 * st["stddev_us"] / st["samples"] ** 0.5, 102.0)

    def test_halves_rule_asks_the_mean_known(self):
        # of_mean (the up/down halves): stops once the standard error of the mean is under the
        # target, which a 5 % spread reaches at some sample count the spread itself never does
        st, how, _ = self.run_graph(self.WIDE, dict(self.M, race_margin=0.0), 0.0)
        self.assertEqual(st["samples"], 40)
        r = Racing()
        meas, g = r.measurer(list(self.WIDE)), Racing.Graph()
        st, how = meas.time_graph(g, dict(self.M, race_margin=0.0), 60.0, of_mean=True)
        times = [100.0, 110.0] * 20
        want = next(n for n in range(5, 41) if measure.stats(times[:n])["stddev_us"] / n ** 0.5 <
                    0.01 * measure.stats(times[:n])["mean_us"])
        self.assertEqual((how, st["samples"]), ("", want))
        self.assertTrue(5 < want < 40)

    def test_stop_rule_ends_an_unsteady_config_once_its_mean_is_known(self):
        # replays alternate 1.00 and 1.04 ms: RSD about 2 %, never under the 1 % target; the
        # rule's second arm stops at the first count whose standard error is under 0.5 %, the
        # same count wrk_precise gives (worker/backend.h)
        times = [1.0, 1.04] * 30
        st, how, _ = self.run_graph(times, dict(self.M, race_margin=0.0, max_samples=60), 0.0)
        us = [t * 100.0 for t in times]
        want = next(n for n in range(5, 61) if measure.stats(us[:n])["stddev_us"] / n ** 0.5 <
                    0.005 * measure.stats(us[:n])["mean_us"])
        self.assertEqual((how, st["samples"]), ("", want))
        self.assertTrue(5 < want < 60)
        self.assertGreater(st["stddev_us"] / st["mean_us"], 0.01)

    def test_stop_rule_keeps_a_steady_config_at_min_samples(self):
        # 0.2 % spread: the RSD arm holds at min_samples, as before the second arm existed
        st, how, _ = self.run_graph([1.0, 1.002] * 21, dict(self.M, race_margin=0.0), 0.0)
        self.assertEqual((how, st["samples"]), ("", 5))
        self.assertFalse(measure.precise(self.M, {"samples": 1, "mean_us": 1.0, "stddev_us": 0.0}))

    def test_request_carries_the_margin(self):
        self.assertEqual(protocol.parse_measure({"settle_margin": 0.02})["settle_margin"], 0.02)
        self.assertEqual(protocol.parse_measure({})["settle_margin"], 0.0)
        with self.assertRaises(protocol.ProtocolError):
            protocol.parse_measure({"settle_margin": -1})


class VerifyAfterRace(unittest.TestCase):
    """Measurer._one's order against fakes: first launch, graph, timing with racing, then the
    reference check only for a config that stayed in the race, then its halves only when its
    median is within the split margin of the best."""

    class Torch:
        class cuda:
            @staticmethod
            def synchronize():
                pass

    class Out:
        def __init__(self, log):
            self.log = log

        def fill_(self, v):
            self.log.append("poison" if v != v else "fill")

    def setUp(self):
        self.log = []
        log = self.log

        class Kernel:
            def layer(self, L, cfg):
                log.append("layer")

            def up(self, L, cfg):
                log.append("up")

            def down(self, L, cfg):
                log.append("down")

        class Graph:
            layers = measure.LAYERS_PER_GRAPH  # the scripts time 10-layer replays, whatever was asked

            def __init__(self, what):
                self.what = what

            def replay(self):
                log.append("replay " + self.what)

        m = object.__new__(measure.Measurer)
        m.torch = self.Torch()
        m.kernel = Kernel()
        m.flush = Racing.Flush()
        m._pairs = lambda n: [tuple(m.ev)] * n
        m.timed_s = 0.0
        m.split_margin = 0.1
        m.counts = measure.new_counts()
        self.L = kernels.Layer(out=self.Out(log), fp8=False)
        m.inputs = lambda shape, bs, seed: self.L
        self.graphs = []
        self.layers = []  # the layers each graph was asked for; the scripts time 10-layer replays

        def graph(fn, layers=measure.LAYERS_PER_GRAPH):
            fn()
            what = log.pop()
            self.graphs.append(what)
            self.layers.append(layers)
            log.append("graph " + what)
            return Graph(what)
        m.graph = graph
        self.err = 0.001

        def check(L):
            log.append("check")
            return self.err
        m.check = check
        self.m = m

    def run_one(self, times_ms, best_us, split=True, judge=False):
        self.m.ev = [Racing.Ev(list(times_ms)), Racing.Ev([])]
        meas = {"warmup": 2, "min_samples": 3, "max_samples": 3, "rsd_target": 1e-9, "budget_ms": 1000, "seed": 1,
                "race_margin": 0.2}
        return self.m.one(SHAPE, CFG, 64, meas, split, best_us, judge=judge)

    def test_pruned_config_is_not_checked_nor_split(self):
        res = self.run_one([1.3, 1.35], 100.0)
        self.assertEqual(res["status"], "pruned")
        self.assertNotIn("check", self.log)
        self.assertEqual(self.graphs, ["layer"])
        self.assertEqual((res["up_us"], res["down_us"], res["samples"]), (0.0, 0.0, 2))
        self.assertIn("not verified", res["detail"])
        self.assertAlmostEqual(res["timed_us"], 2650.0)
        c = self.m.counts
        self.assertEqual((c["pruned"], c["verified"], c["split"], c["split_skipped"]), (1, 0, 0, 0))

    def test_survivor_is_checked_on_the_timed_graph_then_split(self):
        # within the split margin of the best (101 us against 100 us)
        # timed: the 2 racing replays and 3 samples of the layer, 3 samples of each half
        res = self.run_one([1.01] * 5 + [0.6] * 3 + [0.4] * 3, 100.0)
        self.assertEqual(res["status"], "ok", res)
        self.assertEqual(res["detail"], "rel_err=1.00e-03")
        self.assertEqual(self.graphs, ["layer", "up", "down"])
        # the output is poisoned after the capture, so only the timed replays can write it, and
        # the check reads it after them
        self.assertEqual(self.log[:4], ["layer", "graph layer", "poison", "replay layer"])
        first_up = self.log.index("graph up")
        self.assertEqual(self.log[first_up - 1], "check")
        self.assertEqual(self.log.count("check"), 1)
        self.assertEqual([x for x in self.log[:first_up] if x.startswith("replay")], ["replay layer"] * 5)
        self.assertAlmostEqual(res["median_us"], 101.0)
        self.assertAlmostEqual(res["up_us"], 60.0)
        self.assertAlmostEqual(res["down_us"], 40.0)
        self.assertEqual((self.m.counts["split"], self.m.counts["verified"]), (1, 1))

    def test_settled_survivor_is_checked_and_says_so(self):
        # the 2 racing replays, then 3 samples (103.3 us mean) against a best of 90 us: in the
        # race, settled at min_samples, still checked; beyond the split margin, so not split
        self.m.ev = [Racing.Ev([1.0, 1.1, 1.0, 1.1] + [1.0] * 6), Racing.Ev([])]
        meas = {"warmup": 2, "min_samples": 3, "max_samples": 9, "rsd_target": 1e-9, "budget_ms": 1000, "seed": 1,
                "race_margin": 0.2, "settle_margin": 0.02}
        res = self.m.one(SHAPE, CFG, 64, meas, True, 90.0)
        self.assertEqual((res["status"], res["samples"]), ("ok", 3))
        self.assertEqual(res["detail"], "rel_err=1.00e-03; settled: mean 1.148x the best after 3 samples")
        self.assertEqual(self.log.count("check"), 1)
        self.assertEqual((self.m.counts["settled"], self.m.counts["verified"], self.m.counts["split"]), (1, 1, 0))

    def test_graphs_replay_as_many_layers_as_make_a_sample(self):
        # a best of 101 us: 5 layers make the 500-us sample (the whole layer's graph and both
        # halves'); no best known: LAYERS_PER_GRAPH; a best beyond SAMPLE_US: one layer
        self.run_one([1.01] * 5 + [0.6] * 3 + [0.4] * 3, 101.0)
        self.assertEqual(self.layers, [5, 5, 5])
        self.assertEqual([measure.layers_for(b) for b in (0.0, 20.0, 45.0, 100.0, 273.0, 499.0, 500.0, 4000.0)],
                         [10, 10, 10, 5, 2, 2, 1, 1])

    def test_survivor_beyond_the_split_margin_is_checked_not_split(self):
        # 115 us: in the race (margin 0.2), beyond the split margin (0.1) of 100 us
        res = self.run_one([1.15] * 5, 100.0)
        self.assertEqual(res["status"], "ok")
        self.assertEqual(self.log.count("check"), 1)
        self.assertEqual(self.graphs, ["layer"])
        self.assertEqual((res["up_us"], res["down_us"]), (0.0, 0.0))
        self.assertEqual((self.m.counts["split"], self.m.counts["split_skipped"]), (0, 1))
        # the same config with no best known, or the margin set to inf, is split
        for best, margin in ((0.0, 0.1), (100.0, float("inf"))):
            self.setUp()
            self.m.split_margin = margin
            # no best known: no racing, so no timed racing replays
            res = self.run_one([1.15] * (5 if best else 3) + [0.7] * 3 + [0.45] * 3, best)
            self.assertEqual(self.graphs, ["layer", "up", "down"], (best, margin))
            self.assertAlmostEqual(res["up_us"], 70.0)
            self.assertAlmostEqual(res["down_us"], 45.0)

    def judged(self, times_ms, best_us, host_s=0.0):
        """one() with the check's layer judged: the stream held for 300 us (calibrated on the
        first call: times_ms' first entry), host_s seconds spent launching the layer."""
        clock = [0.0]
        self.m.hold_us = None
        holds = []

        class Cuda:
            @staticmethod
            def synchronize():
                pass

            @staticmethod
            def _sleep(cycles):
                holds.append(cycles)

        self.m.torch = type("T", (), {"cuda": Cuda})()
        kernel_layer = self.m.kernel.layer

        def layer(L, cfg):
            clock[0] += host_s
            kernel_layer(L, cfg)
        self.m.kernel.layer = layer
        with mock.patch.object(measure.time, "monotonic", lambda: clock[0]):
            res = self.run_one([0.3] + list(times_ms), best_us, split=False, judge=True)
        return res, holds

    def test_far_check_layer_prunes_before_the_graph(self):
        # 160 us against a best of 100 us: beyond CHECK_FAR (2.5) margins of 0.2
        res, holds = self.judged([0.16], 100.0)
        self.assertEqual((res["status"], res["samples"]), ("pruned", 1))
        self.assertIn("the check's layer 1.60x the best", res["detail"])
        self.assertAlmostEqual(res["timed_us"], 160.0)
        self.assertEqual(self.graphs, [])  # never captured
        self.assertEqual(self.log, ["layer", "layer"])  # the first launch, then the timed one
        self.assertNotIn("check", self.log)
        self.assertEqual(holds, [measure.HOLD_CYCLES, measure.HOLD_CYCLES])  # calibration, then the hold
        self.assertAlmostEqual(self.m.hold_us, 300.0)
        c = self.m.counts
        self.assertEqual((c["pruned"], c["check_pruned"], c["verified"]), (1, 1, 0))

    def test_near_check_layer_races_on_the_graph(self):
        # 140 us: within CHECK_FAR margins, so the graph decides (its replays at 130 us: pruned)
        res, _ = self.judged([0.14, 1.3, 1.3], 100.0)
        self.assertEqual((res["status"], res["samples"]), ("pruned", 2))
        self.assertIn("fastest of 2 samples", res["detail"])
        self.assertEqual(self.graphs, ["layer"])
        self.assertAlmostEqual(res["timed_us"], 140.0 + 2600.0)
        self.assertEqual((self.m.counts["check_pruned"], self.m.counts["pruned"]), (0, 1))

    def test_check_threshold_never_under_its_floor(self):
        # a margin of 0.1 would put 2.5 margins at 1.25x, under the 1.26x a winner's check layer
        # read on an H200: the threshold stays at 1 + CHECK_FLOOR (1.5x); a wide margin widens it
        m = {"race_margin": 0.1}
        self.assertFalse(measure.check_lost(m, 100.0, 140.0))
        self.assertTrue(measure.check_lost(m, 100.0, 151.0))
        m = {"race_margin": 0.4}
        self.assertFalse(measure.check_lost(m, 100.0, 190.0))
        self.assertTrue(measure.check_lost(m, 100.0, 201.0))
        self.assertFalse(measure.check_lost({"race_margin": 0.0}, 100.0, 1000.0))  # racing off

    def test_late_launches_do_not_judge(self):
        # the host took 400 us to launch the layer, longer than the 300-us hold: the GPU may have
        # waited on it, so the 200 us are not judged and the graph decides (a winner here)
        res, _ = self.judged([0.2] + [1.0] * 5, 100.0, host_s=400e-6)
        self.assertEqual(res["status"], "ok", res)
        self.assertEqual(self.m.counts["check_late"], 1)
        self.assertEqual(self.log.count("check"), 1)

    def test_no_hold_in_this_torch_judges_nothing(self):
        # a PyTorch without torch.cuda._sleep: the first judged call finds out, and from then on
        # no check layer is timed; the graph decides (a winner here)
        for first in (True, False):
            self.setUp()
            self.m.hold_us = None if first else math.inf
            res = self.run_one([1.0] * 5, 100.0, split=False, judge=True)
            self.assertEqual(res["status"], "ok", res)
            self.assertEqual(self.log[:2], ["layer", "graph layer"])
            self.assertEqual(self.m.hold_us, math.inf)
            self.assertEqual(self.m.counts["check_pruned"], 0)

    def test_cheap_graph_is_not_held_for(self):
        # a best of 20 us: ten layers (200 us) cost less than the 300-us hold, so no timed layer
        self.m.hold_us = 300.0
        res = self.run_one([0.5, 0.5], 20.0, split=False, judge=True)
        self.assertEqual((res["status"], res["samples"]), ("pruned", 1))
        self.assertEqual(self.log[:2], ["layer", "graph layer"])

    def test_wrong_survivor_is_wrong_result_and_not_split(self):
        self.err = 0.5
        res = self.run_one([1.0] * 5, 100.0)
        self.assertEqual(res["status"], "wrong_result")
        self.assertNotIn("timed_us", res)
        self.assertEqual(self.graphs, ["layer"])

    def test_split_margin_from_the_environment(self):
        self.assertEqual(measure.split_margin_from_env({}), measure.SPLIT_MARGIN)
        self.assertEqual(measure.split_margin_from_env({"MOETUNE_SPLIT_MARGIN": " "}), measure.SPLIT_MARGIN)
        self.assertEqual(measure.split_margin_from_env({"MOETUNE_SPLIT_MARGIN": "0.05"}), 0.05)
        self.assertEqual(measure.split_margin_from_env({"MOETUNE_SPLIT_MARGIN": "0"}), 0.0)
        self.assertEqual(measure.split_margin_from_env({"MOETUNE_SPLIT_MARGIN": "inf"}), float("inf"))
        for bad in ("-0.1", "nan", "ten %"):
            with self.assertRaises(protocol.Fatal) as cm:
                measure.split_margin_from_env({"MOETUNE_SPLIT_MARGIN": bad})
            self.assertIn("MOETUNE_SPLIT_MARGIN=%r is not a number >= 0" % bad, str(cm.exception))


class FakeExecutor:
    """Futures the test completes by hand, in place of the compile processes."""

    def __init__(self):
        import concurrent.futures as cf
        self.cf = cf
        self.tasks = []

    def submit(self, fn, *args):
        f = self.cf.Future()
        self.tasks.append((fn, args, f))
        return f

    def shutdown(self, wait=True, cancel_futures=False):
        pass


class CompileAhead(unittest.TestCase):
    def pool(self, workers=2):
        ex = FakeExecutor()
        return hpool.CompilePool("moetune", 0, workers, executor=ex), ex

    def test_pool_started_at_once_with_one_ping_per_process(self):
        pool, ex = self.pool(3)
        self.assertEqual([t[0] for t in ex.tasks], [hpool._pool_ping] * 3)
        self.assertFalse(pool.is_ready())
        ex.tasks[1][2].set_result(4321)
        self.assertTrue(pool.is_ready())

    def test_compiles_here_while_the_pool_starts(self):
        pool, ex = self.pool()
        pool.submit(SHAPE, [CFG, dict(CFG, BLOCK_SIZE_M=32)], [1])
        # 2 pings; the first config's align (per BLOCK_SIZE_M), activation, up and down GEMMs;
        # the second's own align, up and down (the activation is shared)
        self.assertEqual([t[1][3] for t in ex.tasks[2:]], ["align", "act", "up", "down", "align", "up", "down"])
        self.assertEqual(ex.tasks[6][1][1]["BLOCK_SIZE_M"], 32)
        # no process starts within ready_wait_s: the measuring process compiles the config;
        # its own parts are cancelled, the shared ones stay for the next config
        pool.ready_wait_s = 0.1
        t = time.monotonic()
        self.assertIsNone(pool.wait(SHAPE, CFG))
        self.assertGreaterEqual(time.monotonic() - t, 0.1)
        self.assertEqual([t[2].cancelled() for t in ex.tasks[2:6]], [False, False, True, True])
        self.assertEqual((pool.compiled_here, pool.wait_s), (1, 0.0))
        # once one has, a compile not yet done is waited for, and its verdict holds
        ex.tasks[0][2].set_result(1)
        ex.tasks[3][2].set_result((0.5, None, 1024))  # the shared activation
        ex.tasks[6][2].set_result((0.25, None, 512))
        ex.tasks[8][2].set_result((0.25, None, 512))
        f = ex.tasks[7][2]
        import threading
        threading.Timer(0.2, lambda: f.set_result((1.0, ("invalid", "OutOfResources: smem"), 2048))).start()
        self.assertEqual(pool.wait(SHAPE, dict(CFG, BLOCK_SIZE_M=32)), ("invalid", "OutOfResources: smem"))
        self.assertEqual(pool.compiled_here, 1)
        self.assertGreaterEqual(pool.wait_s, 0.15)
        self.assertEqual((pool.compile_s, pool.peak_kb), (2.0, 2048))

    def test_a_shared_part_compiles_once_per_shape_and_counts_once(self):
        pool, ex = self.pool()
        other = dict(CFG, BLOCK_SIZE_N=128)
        pool.submit(SHAPE, [CFG, other], [1])
        pool.submit(SHAPE, [CFG], [1])  # announced again: nothing new
        self.assertEqual([t[1][3] for t in ex.tasks[2:]], ["align", "act", "up", "down", "up", "down"])
        pool.submit(dict(SHAPE, n=128), [CFG], [1])  # another shape compiles its own
        self.assertEqual([t[1][3] for t in ex.tasks[8:]], ["align", "act", "up", "down"])
        ex.tasks[0][2].set_result(1)
        for t in ex.tasks[2:8]:
            t[2].set_result((1.0, None, 100))
        self.assertIsNone(pool.wait(SHAPE, CFG))
        self.assertEqual(pool.compile_s, 4.0)
        self.assertIsNone(pool.wait(SHAPE, other))
        self.assertEqual(pool.compile_s, 6.0)  # its align and activation were counted with CFG

    def test_a_pool_that_gets_ready_meanwhile_is_waited_for(self):
        pool, ex = self.pool()
        pool.submit(SHAPE, [CFG], [1])
        import threading
        ping = ex.tasks[1][2]
        threading.Timer(0.1, lambda: ping.set_result(1)).start()
        threading.Timer(0.2, lambda: [t[2].set_result((1.0, None, 10)) for t in ex.tasks[2:]]).start()
        self.assertIsNone(pool.wait(SHAPE, CFG))
        self.assertEqual((pool.compiled_here, pool.compile_s), (0, 4.0))
        self.assertTrue(pool.ready)

    def test_a_done_compile_counts_before_the_pool_is_ready(self):
        pool, ex = self.pool()
        pool.submit(SHAPE, [CFG], [1])
        for t in ex.tasks[2:]:
            t[2].set_result((2.0, ("compile_error", "CompilationError: x") if t[1][3] == "down" else None, 10))
        self.assertEqual(pool.wait(SHAPE, CFG), ("compile_error", "CompilationError: x"))
        self.assertTrue(pool.ready)
        self.assertEqual(pool.compiled_here, 0)

    def test_a_broken_pool_costs_only_the_head_start(self):
        class Broken(FakeExecutor):
            def submit(self, fn, *args):
                raise RuntimeError("A process in the process pool was terminated abruptly")
        pool = hpool.CompilePool("moetune", 0, 2, executor=Broken())
        self.assertIn("terminated abruptly", pool.broken)
        pool.submit(SHAPE, [CFG], [1])  # no exception: the measuring process compiles
        self.assertIsNone(pool.wait(SHAPE, CFG))
        self.assertFalse(pool.is_ready())


class FakeJit:
    def __init__(self):
        self.cache = {0: {"sig": "compiled"}}


class SessionCaches(unittest.TestCase):
    def test_only_the_config_kernels_are_dropped_after_a_config(self):
        gemm, align = FakeJit(), FakeJit()

        class Kernel:
            torch = None

            def jit_functions(self):
                return (gemm, align)

            def config_jit_functions(self):
                return (gemm,)

        class Meas:
            forgot = 0
            counts = measure.new_counts()
            split_margin = 0.25

            def set_shape(self, shape, seed, routing):
                pass

            def one(self, shape, cfg, bs, m, split, best_us, judge=False):
                return {"status": "ok"}

            def forget_aligns(self):
                self.forgot += 1
        meas = Meas()
        s = measure.Session(Kernel(), meas, None)
        out = list(s.measure(SHAPE, CFG, [1, 8], {"seed": 1}, True))
        self.assertEqual(len(out), 2)
        self.assertEqual((gemm.cache[0], align.cache[0]), ({}, {"sig": "compiled"}))
        self.assertEqual(meas.forgot, 1)
        st = s.stats()
        self.assertEqual(sorted(st), sorted(measure.COUNT_KEYS + ("split_margin", "start")))
        self.assertEqual(st["split_margin"], 0.25)
        meas.split_margin = float("inf")
        self.assertEqual(s.stats()["split_margin"], "inf")  # JSON has no infinity
        json.dumps(s.stats(), allow_nan=False)

    def test_inputs_are_made_while_a_compile_is_pending(self):
        """A sweep's first config: every batch size's inputs and references are made before the
        wait for its compile, in the order given; once compiled, nothing is made ahead."""
        calls = []

        class Meas:
            counts = measure.new_counts()

            def set_shape(self, shape, seed, routing):
                calls.append("shape")

            def inputs(self, shape, bs, seed):
                calls.append(("inputs", bs, seed))
                if bs == 64:
                    raise RuntimeError("CUDA out of memory")  # met again in one(), in its place

            def one(self, shape, cfg, bs, m, split, best_us, judge=False):
                calls.append(("one", bs, judge))
                return {"status": "ok"}

            def forget_aligns(self):
                pass

        class Pool:
            done = False

            def pending(self, shape, cfg):
                return not self.done

            def wait(self, shape, cfg):
                calls.append("wait")
                self.done = True

        s = measure.Session(kernels.MoetuneKernel.__new__(kernels.MoetuneKernel), Meas(), Pool())
        s.kernel.config_jit_functions = lambda: ()
        list(s.measure(SHAPE, CFG, [1, 64, 256], {"seed": 3}, False))
        # the check's layer races from a config's second batch size on (check_lost)
        self.assertEqual(calls, ["shape", ("inputs", 1, 3), ("inputs", 64, 3), "wait", ("one", 1, False),
                                 ("one", 64, True), ("one", 256, True)])
        del calls[:]
        list(s.measure(SHAPE, CFG, [1], {"seed": 3}, False))
        self.assertEqual(calls, ["shape", "wait", ("one", 1, False)])


class WarmParts(unittest.TestCase):
    def test_each_part_compiles_only_its_kernels_and_none_compiles_all(self):
        ran = []

        class Align:
            def __init__(self, ids, e, bm):
                pass

            def run(self, warmup=False):
                ran.append(("align", warmup))

        class Mk:
            pass
        mk = Mk()
        mk.Align = Align
        mk.gemm = lambda a, b, c, w, al, rows, mul, cfg, warmup: ran.append(("down" if mul else "up", warmup))
        mk.silu_mul = lambda x, out, warmup: ran.append(("act", warmup))
        k = kernels.MoetuneKernel.__new__(kernels.MoetuneKernel)
        k.mk = mk
        parts = kernels.MoetuneKernel.compile_parts(CFG)
        self.assertEqual(parts, [("align", ("align", 16)), ("act", ("act",)), ("up", None), ("down", None)])
        for part, _ in parts:
            L = kernels.Layer(topk_ids=None, e=8, fp8=False, x=0, w1=0, c1=0, c2=0, w2=0, c3=0, w_flat=0, topk=2)
            del ran[:]
            k.warm(L, CFG, part)
            self.assertEqual(ran, [(part, True)])
        del ran[:]
        k.warm(L, CFG)
        self.assertEqual(ran, [("align", True), ("up", True), ("act", True), ("down", True)])
        self.assertEqual(kernels.EngineKernel.compile_parts(CFG), [("up", None), ("down", None)])


class Classify(unittest.TestCase):
    def test_statuses(self):
        class OutOfResources(Exception):
            pass

        class CompilationError(Exception):
            pass
        self.assertEqual(measure.classify(OutOfResources("shared memory, Required: 1310720"))[0], "invalid")
        self.assertEqual(measure.classify(CompilationError("at 3:4"))[0], "compile_error")
        self.assertEqual(measure.classify(RuntimeError("CUDA error: an illegal memory access"))[0], "launch_error")

    def test_stats(self):
        st = measure.stats([3.0, 1.0, 2.0, 10.0])
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


def run_helper(args, modules, env_extra=None):
    """The helper run to its end; the result also carries helper_pid."""
    env = dict(os.environ, PYTHONPATH=modules, PYTHONNOUSERSITE="1", **(env_extra or {}))
    p = subprocess.Popen([sys.executable, "-S", HELPER] + args, env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate("", timeout=60)
    r = subprocess.CompletedProcess(p.args, p.returncode, out, err)
    r.helper_pid = p.pid
    return r


def alive(pid):
    """True while pid runs (a zombie does not count)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


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

    def test_pool_starts_while_the_measuring_process_imports_torch(self):
        # torch takes 3 s to import here; the compile process must start importing it before
        # the measuring process is done (the two start-ups overlap), and the helper must not
        # wait for its pool when it gives up at start
        with tempfile.TemporaryDirectory() as tmp:
            stamps = os.path.join(tmp, "stamps")
            fake_modules(tmp, torch_src=textwrap.dedent("""
                import os, time
                def _stamp(what):
                    with open(os.environ["FAKE_TORCH_STAMPS"], "a") as f:
                        f.write("%d %s %.6f\\n" % (os.getpid(), what, time.time()))
                _stamp("start")
                time.sleep(3)
                _stamp("end")
            """) + TORCH_NO_GPU, triton_src=TRITON)
            env_extra = {"FAKE_TORCH_STAMPS": stamps}
            t0 = __import__("time").monotonic()
            r = run_helper(["--kernel", "moetune", "--compile-workers", "1"], tmp, env_extra)
            took = __import__("time").monotonic() - t0
            self.check_fatal(r, "no CUDA GPU")
            with open(stamps) as f:
                rows = [line.split() for line in f]
            starts = {int(pid): float(t) for pid, what, t in rows if what == "start"}
            pool = [p for p in starts if p != r.helper_pid]
            self.assertIn(r.helper_pid, starts, rows)
            self.assertEqual(len(pool), 1, rows)
            main_end = [float(t) for pid, what, t in rows if what == "end" and int(pid) == r.helper_pid]
            self.assertLess(starts[pool[0]], main_end[0], rows)
            self.assertLess(took, 8.0)
            self.assertFalse(alive(pool[0]), "the compile process outlived the helper")

    def test_bad_split_margin_is_one_fatal_line(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake_modules(tmp, torch_src=TORCH_NO_GPU, triton_src=TRITON)
            r = run_helper(["--kernel", "moetune", "--compile-workers", "0"], tmp, {"MOETUNE_SPLIT_MARGIN": "-1"})
            self.check_fatal(r, "MOETUNE_SPLIT_MARGIN='-1' is not a number >= 0")

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

    def run_beside(self, kernels_src, body):
        """body, run after the helper's modules are imported beside a fake triton and a fake vLLM whose
        fused_moe.py is kernels_src: what it printed."""
        tmp = tempfile.mkdtemp()
        fake_modules(tmp, extra={
            "triton/__init__.py": TRITON, "triton/language/__init__.py": "bfloat16 = 'bf16'\n",
            "vllm/__init__.py": "__version__ = '0.0.1test'\n",
            "vllm/model_executor/__init__.py": "", "vllm/model_executor/layers/__init__.py": "",
            "vllm/model_executor/layers/fused_moe/__init__.py": "",
            "vllm/model_executor/layers/fused_moe/fused_moe.py": "fused_moe_kernel = None\n" + kernels_src})
        code = ("import sys, json, dataclasses; sys.path[:0] = [%r, %r]; from helper import kernels, measure, protocol\n"
                % (tmp, os.path.join(ROOT, "worker"))) + body
        r = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, timeout=60)
        return r.stdout.strip()

    def load(self, kernels_src):
        return self.run_beside(kernels_src, "try:\n    kernels.EngineKernel('vllm', None, __import__('triton'))"
                                            "; print('OK', file=sys.__stdout__)\n"
                                            "except protocol.Fatal as e:\n    print('FATAL', e, file=sys.__stdout__)\n")

    def test_missing_function(self):
        out = self.load("def fused_experts(): pass\n")
        self.assertTrue(out.startswith("FATAL vllm 0.0.1test: no fused-MoE launcher (invoke_fused_moe_kernel or "
                                       "invoke_fused_moe_triton_kernel) in vllm.model_executor.layers.fused_moe."
                                       "fused_moe, nor anywhere in the installed vllm package"), out)

    def test_unknown_required_parameter(self):
        out = self.load("def invoke_fused_moe_kernel(A, B, C, sorted_token_ids, expert_ids, num_tokens_post_padded, "
                        "mul_routed_weight, top_k, config, compute_type, new_thing): pass\n"
                        "def moe_align_block_size(topk_ids, block_size, num_experts): pass\n")
        self.assertIn("required parameter 'new_thing'", out)

    def fp8(self, kernels_src):
        """fp8_options of a fake vLLM launcher, for a block-scale layer: the options or the error."""
        return self.run_beside(kernels_src,
                               "k = kernels.EngineKernel('vllm', None, __import__('triton'))\n"
                               "L = kernels.Layer(fp8=True, block=(128, 128), w1s='S1', w2s='S2')\n"
                               "try:\n    print(json.dumps([k.fp8_options(L, 1), k.fp8_options(L, 2),"
                               " k.fp8_options(dataclasses.replace(L, block=None), 1),"
                               " k.fp8_options(dataclasses.replace(L, fp8=False), 1)]),"
                               " file=sys.__stdout__)\n"
                               "except kernels.Unsupported as e:\n"
                               "    print('UNSUPPORTED', e, measure.classify(e)[0], file=sys.__stdout__)\n")

    def test_fp8_options_are_the_engines_own(self):
        out = self.fp8("def invoke_fused_moe_kernel(A, B, C, A_scale, B_scale, B_zp, topk_weights, "
                       "sorted_token_ids, expert_ids, num_tokens_post_padded, mul_routed_weight, top_k, config, "
                       "compute_type, use_fp8_w8a8=False, block_shape=None): pass\n"
                       "def moe_align_block_size(topk_ids, block_size, num_experts): pass\n")
        blk, blk2, tensor, bf16 = json.loads(out)
        self.assertEqual(blk, {"use_fp8_w8a8": True, "A_scale": None, "B_scale": "S1", "block_shape": [128, 128]})
        self.assertEqual(blk2["B_scale"], "S2")
        self.assertEqual(tensor, {"use_fp8_w8a8": True, "A_scale": None, "B_scale": "S1", "block_shape": None})
        self.assertEqual(bf16, {})

    def test_fp8_without_the_options_is_invalid_naming_them(self):
        out = self.fp8("def invoke_fused_moe_kernel(A, B, C, A_scale, B_scale, topk_weights, sorted_token_ids, "
                       "expert_ids, num_tokens_post_padded, mul_routed_weight, top_k, config, compute_type): pass\n"
                       "def moe_align_block_size(topk_ids, block_size, num_experts): pass\n")
        self.assertEqual(out, "UNSUPPORTED vllm 0.0.1test: invoke_fused_moe_kernel has no use_fp8_w8a8, block_shape, "
                              "so it cannot run fp8_w8a8 invalid")

    def test_known_signature_loads(self):
        out = self.load("def invoke_fused_moe_kernel(A, B, C, A_scale, B_scale, B_zp, topk_weights, "
                        "sorted_token_ids, expert_ids, num_tokens_post_padded, mul_routed_weight, top_k, config, "
                        "compute_type, use_fp8_w8a8=False, block_shape=None): pass\n"
                        "def moe_align_block_size(topk_ids, block_size, num_experts): pass\n")
        self.assertEqual(out, "OK")


FIXTURES = os.path.join(ROOT, "tests", "fixtures", "engines")

# Run beside a fake engine layout (tests/fixtures/engines): finds its pieces, launches both GEMMs
# through EngineKernel on shape-only tensors and prints what the launcher and the kernel got.
DRIVE = """
import json, sys
import torch, triton
from helper import kernels, protocol
out = {}
try:
    k = kernels.EngineKernel(sys.argv[1], torch, triton)
except protocol.Fatal as e:
    print(json.dumps({"fatal": str(e)}), file=sys.__stdout__)
    sys.exit(0)
out["layout"] = k.layout.describe()
out["launcher"] = k.launcher
kern = k.jit_functions()[0]
seen = []
real = k.invoke
def record(**kw):
    seen.append(sorted(kw))
    return real(**kw)
k.invoke = record
cfg = {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}
out["runs"] = []
for m in (1, 40):
    e, n, kk, topk = 64, 32, 128, 2
    L = kernels.Layer(m=m, e=e, topk=topk, x=torch.empty(m, kk), w1=torch.empty(e, 2 * n, kk),
                      w2=torch.empty(e, kk, n), c1=torch.empty(m * topk, 2 * n), c2=torch.empty(m * topk, n),
                      c3=torch.empty(m * topk, kk), topk_ids=torch.empty(m, topk), topk_w=torch.empty(m, topk),
                      fp8=False, block=None)
    kern.calls.clear()
    k.up(L, cfg)
    k.down(L, cfg)
    al = k.align(L, cfg)
    out["runs"].append({"m": m, "c_strides": [list(a[7:9]) for a, kw in kern.calls],
                        "sorted_is_none": al[0] is None})
out["kwargs"] = seen[0]
print(json.dumps(out), file=sys.__stdout__)
"""


def beside_layout(layout, engine, code=DRIVE, env=None, args=()):
    """code run under the fake engine layout and the fake torch/triton: its stdout as JSON."""
    path = os.pathsep.join([os.path.join(FIXTURES, layout), os.path.join(FIXTURES, "_stubs"),
                            os.path.join(ROOT, "worker")])
    r = subprocess.run([sys.executable, "-S", "-c", code, engine] + list(args), capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, PYTHONPATH=path, PYTHONNOUSERSITE="1", **(env or {})))
    assert r.stdout.strip(), r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


class EngineLayouts(unittest.TestCase):
    """EngineKernel finds each release's launcher, kernel, align step and lookup (known places, or by
    searching the package) and calls the launcher by parameter name with (M, top_k, N) outputs."""

    def check(self, layout, engine, launcher, align, lookup, how="table"):
        out = beside_layout(layout, engine)
        self.assertNotIn("fatal", out, out)
        lay = out["layout"]
        self.assertEqual((out["launcher"], lay["align"], lay["lookup"]), (launcher, align, lookup))
        self.assertEqual(lay["kernel"], launcher.rsplit(".", 1)[0] + ".fused_moe_kernel")
        self.assertEqual(set(lay["found_by"].values()), {how})
        for run in out["runs"]:  # both GEMMs reached the kernel with the output's (N, 1) strides
            self.assertEqual(len(run["c_strides"]), 2, out)
        return out

    def test_sglang_old_layout(self):
        p = "sglang.srt.layers.moe.fused_moe_triton."
        out = self.check("sglang-old", "sglang", p + "fused_moe_triton_kernels.invoke_fused_moe_kernel",
                         p + "moe_align_block_size.moe_align_block_size", p + "fused_moe_triton_config")
        self.assertIn("topk_ids", out["kwargs"])
        self.assertIn("bias", out["kwargs"])

    def test_sglang_moe_runner_layout(self):
        p = "sglang.srt.layers.moe.moe_runner.triton_utils."
        self.check("sglang-mid", "sglang", p + "fused_moe_triton_kernels.invoke_fused_moe_kernel",
                   p + "moe_align_block_size.moe_align_block_size", p + "fused_moe_triton_config")

    def test_sglang_new_layout(self):
        p = "sglang.srt.layers.moe.moe_runner.triton_utils."
        out = self.check("sglang-new", "sglang", "sglang.kernels.ops.moe.fused_moe_triton_kernels.invoke_fused_moe_kernel",
                         p + "moe_align_block_size.moe_align_block_size", p + "fused_moe_triton_config")
        self.assertEqual(out["runs"][1]["c_strides"], [[64, 1], [128, 1]])

    def test_vllm_old_layout_gets_3d_outputs(self):
        p = "vllm.model_executor.layers.fused_moe."
        out = self.check("vllm-old", "vllm", p + "fused_moe.invoke_fused_moe_kernel",
                         p + "moe_align_block_size.moe_align_block_size", p + "fused_moe")
        # C.stride(1), C.stride(2) of (M, top_k, N): a 2-D output raised IndexError here
        self.assertEqual(out["runs"][0]["c_strides"], [[64, 1], [128, 1]])
        self.assertIn("B_bias", out["kwargs"])
        self.assertNotIn("topk_ids", out["kwargs"])

    def test_vllm_new_layout_and_its_align_skip(self):
        p = "vllm.model_executor.layers.fused_moe."
        out = self.check("vllm-new", "vllm", p + "fused_moe.invoke_fused_moe_triton_kernel",
                         p + "moe_align_block_size.moe_align_block_size", p + "fused_moe")
        self.assertEqual(out["layout"]["prepare"], p + "fused_moe._prepare_expert_assignment")
        for name in ("topk_ids", "B_zp", "bias"):
            self.assertNotIn(name, out["kwargs"])
        self.assertIn("B_bias", out["kwargs"])
        # 1 token x 2 experts of 64: the engine skips the align (sorted_token_ids None); 40 tokens align
        self.assertEqual([r["sorted_is_none"] for r in out["runs"]], [True, False])

    def test_layout_in_no_table_is_found_by_search(self):
        out = self.check("sglang-unlisted", "sglang", "sglang.jit_kernel.fused_moe.triton_moe.launch_fused_moe_gemm",
                         "sglang.srt.moe_tuning.align.moe_align_block_size", "sglang.srt.moe_tuning.lookup",
                         how="search")
        self.assertEqual(out["layout"]["prepare"], None)

    def test_missing_piece_is_one_line_naming_version_and_function(self):
        out = beside_layout("sglang-lacking", "sglang")
        self.assertTrue(out["fatal"].startswith("sglang 0.7.1.fake: no align step moe_align_block_size in "
                                                "sglang.srt.layers.moe.moe_runner.triton_utils.moe_align_block_size"),
                        out)
        self.assertNotIn("\n", out["fatal"])


PROBE = """
import sys, moetune_helper as mh
sys.argv = ["moetune_helper.py", "--probe", "--engine", sys.argv[1], "--names", sys.argv[2]]
mh.main(sys.argv[1:])
"""


class EngineOwnNames(unittest.TestCase):
    """--probe --names: the engine's own get_config_file_name per shape and device, and its traced lookup."""

    def ask(self, layout, engine, names, env=None):
        out = beside_layout(layout, engine, PROBE, env, [json.dumps(names)])
        return out["probe"]

    def test_names_for_another_device(self):
        q = [{"e": 256, "n": 256, "dtype": "fp8_w8a8", "block_n": 128, "block_k": 128, "device": "NVIDIA H200 NVL"}]
        got = {}
        for layout, engine in (("sglang-old", "sglang"), ("sglang-new", "sglang"), ("vllm-old", "vllm"),
                               ("vllm-new", "vllm"), ("sglang-renamed", "sglang")):
            got[layout] = self.ask(layout, engine, q)["engine"]["own"]["names"][0]
        sg = "E=256,N=256,device_name=NVIDIA_H200_NVL,dtype=fp8_w8a8,block_shape=[128, 128]"
        self.assertEqual(got["sglang-old"], {"file": sg + ".json", "down_file": sg + "_down.json"})
        self.assertEqual(got["sglang-new"], got["sglang-old"])
        vl = {"file": "E=256,N=256,device_name=NVIDIA_H200,dtype=fp8_w8a8,block_shape=[128,128].json", "down_file": None}
        self.assertEqual((got["vllm-old"], got["vllm-new"]), (vl, vl))
        self.assertTrue(got["sglang-renamed"]["file"].startswith("E=256,N=256,device=NVIDIA_H200_NVL"))

    def test_lookup_traced_to_the_fallback_it_reads(self):
        with tempfile.TemporaryDirectory() as tmp:
            name = "E=128,N=768,device_name=NVIDIA_H100_80GB_HBM3.json"
            for v in ("3_4_0", "3_5_1"):
                os.makedirs(os.path.join(tmp, "configs", "triton_" + v))
                with open(os.path.join(tmp, "configs", "triton_" + v, name), "w") as f:
                    f.write('{"1": {"BLOCK_SIZE_M": 16}, "64": {"BLOCK_SIZE_M": 32}}')
            q = [{"e": 128, "n": 768, "lookup": True}]
            env = {"SGLANG_MOE_CONFIG_DIR": tmp}
            old = self.ask("sglang-old", "sglang", q, env)["engine"]["own"]["names"][0]
            new = self.ask("sglang-new", "sglang", q, env)["engine"]["own"]["names"][0]
        self.assertEqual(old["tried"][0], os.path.join(tmp, "configs", "triton_3_6_0", name))
        self.assertEqual(old["loaded"], os.path.join(tmp, "configs", "triton_3_4_0", name))  # the fixed list
        self.assertEqual(new["loaded"], os.path.join(tmp, "configs", "triton_3_5_1", name))  # the newest other
        self.assertEqual(old["entries"], [1, 64])
        self.assertTrue(any("Fallback to triton version" in line for line in old["logs"]), old)

    def test_probe_says_triton_when_torch_imports(self):
        with tempfile.TemporaryDirectory() as tmp:
            fake_modules(tmp, torch_src=TORCH_NO_GPU, triton_src="raise ImportError('No module named triton (fake)')\n")
            r = run_helper(["--probe", "--engine", "sglang"], tmp)
        p = json.loads(r.stdout)["probe"]
        self.assertEqual((p["torch"], p["triton"]), ("2.11.0", None))
        self.assertIn("triton is not importable", p["error"])
        self.assertNotIn("torch is not importable", p["error"])


class ShapeParsing(unittest.TestCase):
    def test_fp8_shapes(self):
        s = protocol.parse_shape({"e": 8, "n": 64, "k": 128, "topk": 2, "dtype": "fp8_w8a8", "block_n": 128, "block_k": 128})
        self.assertEqual((s["dtype"], protocol.shape_block(s)), ("fp8_w8a8", (128, 128)))
        s = protocol.parse_shape({"e": 8, "n": 64, "k": 128, "topk": 2, "dtype": "fp8_w8a8"})
        self.assertIsNone(protocol.shape_block(s))
        self.assertNotEqual(protocol.shape_key(s), protocol.shape_key(dict(s, block_n=128, block_k=128)))
        for bad, why in (({"dtype": "int4"}, "not one of bf16, fp8_w8a8"),
                         ({"dtype": "fp8_w8a8", "block_n": 128}, "both set or both 0"),
                         ({"block_n": 128, "block_k": 128}, "need dtype fp8_w8a8"),
                         ({"dtype": "fp8_w8a8", "block_n": -1, "block_k": 128}, "block_n must be an integer")):
            with self.assertRaises(protocol.ProtocolError) as cm:
                protocol.parse_shape(dict({"e": 8, "n": 64, "k": 128, "topk": 2}, **bad))
            self.assertIn(why, str(cm.exception))


def npy_bytes(descr, shape, payload, version=1, header=None, fortran=False):
    """A .npy file as NumPy writes it (no NumPy needed): magic, version, header padded to 64."""
    h = header if header is not None else "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }" % (
        descr, fortran, repr(tuple(shape)))
    pad = 64 - (10 + len(h) + 1) % 64
    h = (h + " " * pad + "\n").encode("latin1")
    lenb = len(h).to_bytes(2 if version == 1 else 4, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + lenb + h + payload


def ids_payload(ids, size):
    return b"".join(int(v).to_bytes(size, "little", signed=True) for v in ids)


class RoutingFiles(unittest.TestCase):
    def write(self, data):
        fd, path = tempfile.mkstemp(suffix=".npy")
        os.write(fd, data)
        os.close(fd)
        self.addCleanup(os.unlink, path)
        return path

    def test_npy_int32_and_int64(self):
        ids = [0, 1, 2, 3, 7, 6, 5, 4]
        for descr, size, ver in (("<i4", 4, 1), ("<i8", 8, 1), ("<i4", 4, 2)):
            t, k, flat = routing.read_npy_ids(npy_bytes(descr, (4, 2), ids_payload(ids, size), version=ver))
            self.assertEqual((t, k, flat), (4, 2, ids))

    def test_hostile_npy(self):
        good = ids_payload(range(8), 4)
        cases = [
            (b"PK\x03\x04junk", "no \\x93NUMPY magic"),
            (npy_bytes("<f4", (4, 2), good), "must be int32 or int64"),
            (npy_bytes(">i4", (4, 2), good), "must be int32 or int64"),
            (npy_bytes("<i4", (4, 2), good[:20]), "data is 20 bytes, [4, 2] <i4 needs 32"),
            (npy_bytes("<i4", (4, 2), good + b"xx"), "needs 32"),
            (npy_bytes("<i4", (8,), good), "is not [tokens, topk]"),
            (npy_bytes("<i4", (2, 2, 2), good), "is not [tokens, topk]"),
            (npy_bytes("<i4", (4, 2), good, fortran=True), "fortran_order"),
            (npy_bytes("<i4", (4, 2), good, header="__import__('os')"), "not a Python dict"),
            (npy_bytes("<i4", (4, 2), good, version=9), "version 9"),
            (b"\x93NUMPY\x02\x00\xff\xff\xff\x7f{}", "truncated or too large"),
            (npy_bytes("<i4", (4, 2), good)[:30], "truncated or too large"),
        ]
        for data, why in cases:
            with self.assertRaises(routing.RoutingError, msg=why) as cm:
                routing.read_npy_ids(data)
            self.assertIn(why, str(cm.exception))

    def test_routing_checks_the_shape_and_the_hash(self):
        import hashlib
        data = npy_bytes("<i8", (4, 2), ids_payload([0, 1, 2, 3, 7, 6, 5, 4], 8))
        path = self.write(data)
        r = routing.Routing(path, hashlib.sha256(data).hexdigest())
        r.check({"e": 8, "topk": 2})
        with self.assertRaises(routing.RoutingError) as cm:
            r.check({"e": 7, "topk": 2})
        self.assertIn("expert id 7 is out of range 0..6", str(cm.exception))
        with self.assertRaises(routing.RoutingError) as cm:
            r.check({"e": 8, "topk": 4})
        self.assertIn("2 experts per token, the shape has topk=4", str(cm.exception))
        with self.assertRaises(routing.RoutingError) as cm:
            routing.Routing(path, "0" * 64)
        self.assertIn("the file changed", str(cm.exception))
        with self.assertRaises(routing.RoutingError) as cm:
            routing.Routing(path + ".gone", "")
        self.assertIn("cannot read", str(cm.exception))

    def test_draws_are_fixed_and_per_batch_size(self):
        # The same numbers are asserted in tests/unit/test_routing.c: C and Python draw alike.
        self.assertEqual(routing.draw_rows(1000, 4, 1), [761, 48, 45, 533])
        self.assertEqual(routing.draw_rows(1000, 4, 1), routing.draw_rows(1000, 4, 1))
        self.assertNotEqual(routing.draw_rows(1000, 4, 2), routing.draw_rows(1000, 4, 1))
        self.assertNotEqual(routing.draw_rows(1000, 8, 1)[:4], routing.draw_rows(1000, 4, 1))
        self.assertTrue(all(0 <= r < 3 for r in routing.draw_rows(3, 500, 7)))
        self.assertEqual(len(set(routing.draw_rows(3, 500, 7))), 3)
        data = npy_bytes("<i4", (3, 2), ids_payload([0, 1, 2, 3, 4, 5], 4))
        r = routing.Routing(self.write(data), "")
        r.seed = 7
        flat = r.draw(5)
        self.assertEqual(flat, sum(([2 * x, 2 * x + 1] for x in routing.draw_rows(3, 5, 7)), []))

    def test_bad_routing_fails_every_batch_size_in_one_line(self):
        class K:
            torch = None
        s = measure.Session(K(), None, None)
        path = self.write(npy_bytes("<f4", (4, 2), ids_payload(range(8), 4)))
        out = list(s.measure(SHAPE, CFG, [1, 8], {"seed": 1}, False, (path, "")))
        self.assertEqual([o["status"] for o in out], ["launch_error", "launch_error"])
        self.assertIn("must be int32 or int64", out[0]["detail"])
        self.assertTrue(out[0]["detail"].startswith("routing %s: " % path))

    def test_protocol_passes_the_routing(self):
        rc, out, s = run_serve([measure_req(routing={"path": "/x/r.npy", "sha256": "ab"})])
        self.assertEqual(s.routing, ("/x/r.npy", "ab"))
        rc, out, s = run_serve([measure_req()])
        self.assertIsNone(s.routing)
        rc, out, s = run_serve([measure_req(routing={"sha256": "ab"})])
        self.assertIn("routing must be", out[0]["error"])


sys.path.insert(0, os.path.join(ROOT, "bench", "triton"))
import routing_bench as rb  # noqa: E402


class RoutingBench(unittest.TestCase):
    """bench/triton/routing_bench.py's parts that need no GPU (they run once, on an H200)."""

    def test_zipf_file_reads_back_and_is_skewed(self):
        ids = rb.zipf_ids(128, 8, 3000, 1.0, 7)
        self.assertEqual(ids, rb.zipf_ids(128, 8, 3000, 1.0, 7))
        t, k, back = routing.read_npy_ids(rb.npy_bytes(ids, 3000, 8))
        self.assertEqual((t, k, back), (3000, 8, ids))
        for r in range(3000):
            self.assertEqual(len(set(ids[r * 8:(r + 1) * 8])), 8)  # top-k ids of a token are distinct
        ld = sorted(rb.loads(ids, 128), reverse=True)
        self.assertGreater(ld[0], 5 * len(ids) / 128)
        self.assertLess(ld[-1], 0.5 * len(ids) / 128)
        flat = rb.loads(rb.zipf_ids(128, 8, 3000, 0.0, 7), 128)
        self.assertLess(max(flat), 1.5 * 3000 * 8 / 128)

    def test_zipf_command_writes_a_file_the_c_reader_takes(self):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "z.npy")
        out = io.StringIO()
        old = sys.stdout
        sys.stdout = out
        try:
            self.assertEqual(rb.main(["zipf", path, "--experts", "16", "--topk", "2", "--tokens", "100"]), 0)
        finally:
            sys.stdout = old
        self.assertIn("100 tokens x top-2 over 16 experts", out.getvalue())
        r = routing.Routing(path, "")
        r.check({"e": 16, "topk": 2})
        self.assertEqual(r.tokens, 100)

    def test_picks_and_changed_winners(self):
        d = tempfile.mkdtemp()
        a, b = os.path.join(d, "a.json"), os.path.join(d, "b.json")
        c1 = dict(CFG)
        c2 = dict(CFG, BLOCK_SIZE_M=64)
        json.dump({"triton_version": "3.6.0", "1": c1, "64": c1, "4096": c2}, open(a, "w"))
        json.dump({"1": c1, "64": c2, "4096": c2, "8": c1}, open(b, "w"))
        pa, pb = rb.picks(a), rb.picks(b)
        self.assertEqual(sorted(pa), [1, 64, 4096])
        self.assertEqual(rb.changed(pa, pb), [64])
        self.assertEqual(rb.cfg_text(c2), "64x64x64x1x4x3")

    def test_fp8_defaults(self):
        small = dict(rb.fp8_defaults(8, (128, 128)))
        big = dict(rb.fp8_defaults(1024, (128, 128)))
        self.assertEqual(small["sglang_default"], {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 128, "BLOCK_SIZE_K": 128,
                                                   "GROUP_SIZE_M": 32, "num_warps": 4, "num_stages": 3})
        self.assertEqual((small["vllm_new_default"]["BLOCK_SIZE_M"], small["vllm_new_default"]["GROUP_SIZE_M"]), (16, 1))
        self.assertEqual((big["vllm_new_default"]["BLOCK_SIZE_M"], big["vllm_new_default"]["GROUP_SIZE_M"]), (64, 32))
        s = rb.parse_shape("256,256,7168,8", (128, 128))
        self.assertEqual(protocol.parse_shape(s), s)
        self.assertEqual(protocol.shape_block(s), (128, 128))


try:
    import torch
except ImportError:
    torch = None


def needs_torch(cls):
    """CPU torch runs these; where ctest asks for it (MT_REQUIRE_TORCH=1) its absence fails."""
    if torch is None and not os.environ.get("MT_REQUIRE_TORCH"):
        return unittest.skip("no torch in %s" % sys.executable)(cls)
    return cls


def e4m3_table():
    """Every finite e4m3fn value, decoded from its 8 bits: bias 7, 3 mantissa bits, no infinity,
    S.1111.111 is NaN. Returned as (value, code) sorted, positives and zero only."""
    vals = []
    for code in range(0x7F):  # 0x7F is NaN
        e, mant = code >> 3, code & 7
        v = (mant / 8.0) * 2.0 ** -6 if e == 0 else (1 + mant / 8.0) * 2.0 ** (e - 7)
        vals.append((v, code))
    return sorted(vals)


def nearest_e4m3(x, table):
    """Round-to-nearest, ties to the even code, clamped to 448: the reference rounding."""
    sign = -1.0 if x < 0 else 1.0
    a = min(abs(x), 448.0)
    best = min(table, key=lambda vc: (abs(vc[0] - a), vc[1] & 1))
    return sign * best[0]


@needs_torch
class LayerState(unittest.TestCase):
    """A batch size's layer is a Layer with named fields, its per-config buffers apart in cache."""

    def test_layer_buffers_fill_the_named_fields(self):
        shape = dict(SHAPE, dtype="fp8_w8a8", block_n=32, block_k=64)
        x, ids, w = torch.zeros(3, 128), torch.zeros(3, 2, dtype=torch.int64), torch.ones(3, 2)
        L = measure.layer_buffers(torch, shape, 3, x, ids, w, "W1", "W2", "S1", "S2", device="cpu")
        self.assertIsInstance(L, kernels.Layer)
        self.assertEqual((L.m, L.e, L.topk, L.fp8, L.block, L.w1s, L.w2s), (3, 8, 2, True, (32, 64), "S1", "S2"))
        self.assertEqual((tuple(L.c1.shape), tuple(L.c2.shape), tuple(L.c3.shape), tuple(L.out.shape)),
                         ((6, 128), (6, 64), (6, 128), (3, 128)))
        self.assertEqual((L.topk_ids.dtype, tuple(L.w_flat.shape), L.ref, L.cache), (torch.int32, (6,), None, {}))

    def test_a_config_s_buffers_are_forgotten_after_it(self):
        m = object.__new__(measure.Measurer)
        m.per_bs = {1: kernels.Layer(m=1), 8: kernels.Layer(m=8)}
        for L in m.per_bs.values():
            L.cache[("align", 16)] = "A"
            L.cache[("quant", "x")] = "Q"
        m.forget_aligns()
        self.assertEqual([L.cache for L in m.per_bs.values()], [{}, {}])


@needs_torch
class Fp8Math(unittest.TestCase):
    def test_e4m3_rounding_matches_the_bit_table(self):
        table = e4m3_table()
        self.assertEqual(table[-1][0], 448.0)
        self.assertEqual(table[1][0], 2.0 ** -9)
        pts = [v for v, _ in table]
        pts += [(a[0] + b[0]) / 2 for a, b in zip(table, table[1:])]  # every tie
        g = torch.Generator().manual_seed(3)
        pts += (torch.rand(4000, generator=g) * 1000 - 500).tolist()
        pts += (torch.rand(1000, generator=g) * 0.05 - 0.025).tolist()
        pts += [-p for p in pts[:300]] + [1e6, -1e6, 449.0, 0.0]
        got = reference.e4m3_round(torch, torch.tensor(pts, dtype=torch.float32)).tolist()
        want = [nearest_e4m3(float(torch.tensor(p, dtype=torch.float32)), table) for p in pts]
        bad = [(p, a, b) for p, a, b in zip(pts, got, want) if a != b]
        self.assertEqual(bad[:5], [])

    def test_activation_quantization(self):
        g = torch.Generator().manual_seed(1)
        x = torch.randn(5, 300, generator=g) * reference.spread(torch, (5, 1), g, "cpu")
        q, s = reference.quant_act(torch, x, 128)
        self.assertEqual(tuple(s.shape), (5, 3))  # 300 columns: groups of 128, 128, 44
        self.assertEqual(float(q.abs().max()), 448.0)
        for r in range(5):
            for gi, (c0, c1) in enumerate(((0, 128), (128, 256), (256, 300))):
                self.assertAlmostEqual(float(s[r, gi]), float(x[r, c0:c1].abs().max()) / 448.0, places=6)
                self.assertEqual(float(q[r, c0:c1].abs().max()), 448.0)
        d = reference.dequant_act(torch, q, s, 128)
        big = x.abs() > 2.0 ** -6 * s.repeat_interleave(128, 1)[:, :300]  # normal e4m3 range
        self.assertLessEqual(float(((d - x).abs() / x.abs())[big].max()), 2.0 ** -4 + 1e-6)
        q1, s1 = reference.quant_act(torch, x, 0)
        self.assertEqual(tuple(s1.shape), (1,))
        self.assertAlmostEqual(float(s1), float(x.abs().max()) / 448.0, places=6)
        z, sz = reference.quant_act(torch, torch.zeros(2, 128), 128)
        self.assertEqual(float(z.abs().max()), 0.0)
        self.assertEqual(float(sz.min()), float(torch.tensor(reference.SCALE_EPS) / reference.FP8_MAX))

    def test_weight_quantization(self):
        g = torch.Generator().manual_seed(2)
        w, s = reference.make_weights(torch, 3, 200, 260, "fp8_w8a8", (128, 128), g, "cpu")
        self.assertEqual(tuple(s.shape), (3, 2, 3))
        for e in range(3):
            for bn in range(2):
                for bk in range(3):
                    blk = w[e, bn * 128:(bn + 1) * 128, bk * 128:(bk + 1) * 128]
                    self.assertEqual(float(blk.abs().max()), 448.0)
        self.assertGreater(float(s.max() / s.min()), 3.0)  # blocks spread on purpose
        d = reference.dequant_expert(torch, w[1], s[1], (128, 128))
        self.assertAlmostEqual(float(d[130, 259]), float(w[1, 130, 259]) * float(s[1, 1, 2]), places=5)
        wt, st = reference.make_weights(torch, 3, 200, 260, "fp8_w8a8", None, g, "cpu")
        self.assertEqual(tuple(st.shape), (3,))
        self.assertEqual([float(wt[e].abs().max()) for e in range(3)], [448.0] * 3)
        wb, sb = reference.make_weights(torch, 2, 8, 16, "bf16", None, g, "cpu")
        self.assertEqual((wb.dtype, sb), (torch.bfloat16, None))

    def layer(self, block, seed=5, m=6, e=4, n=256, k=256, topk=2):
        g = torch.Generator().manual_seed(seed)
        w1, w1s = reference.make_weights(torch, e, 2 * n, k, "fp8_w8a8", block, g, "cpu")
        w2, w2s = reference.make_weights(torch, e, k, n, "fp8_w8a8", block, g, "cpu")
        x = (torch.randn(m, k, generator=g) * reference.spread(torch, (m, 1), g, "cpu")).to(torch.bfloat16)
        w, ids = torch.topk(torch.softmax(torch.randn(m, e, generator=g), -1), topk, -1)
        w = w / w.sum(-1, keepdim=True)
        return x, ids, w, w1, w2, w1s, w2s

    def naive(self, x, ids, w, w1, w2, w1s, w2s, block, scale_fn=None):
        """The fp8 layer written out token by token, from the definitions."""
        group = block[1] if block else 0
        deq = lambda q, s: reference.dequant_expert(torch, q, s, block) if scale_fn is None else scale_fn(q, s)
        xd = reference.dequant_act(torch, *reference.quant_act(torch, x.float(), group), group)
        m, topk = ids.shape
        n = w2.shape[2]
        inter = torch.zeros(m * topk, n)
        for t in range(m):
            for j in range(topk):
                h = (deq(w1[ids[t, j]], w1s[ids[t, j]]) @ xd[t]).to(torch.bfloat16).float()
                inter[t * topk + j] = (torch.nn.functional.silu(h[:n]) * h[n:]).to(torch.bfloat16).float()
        ad = reference.dequant_act(torch, *reference.quant_act(torch, inter, group), group)
        out = torch.zeros(m, x.shape[1])
        for t in range(m):
            for j in range(topk):
                out[t] += (deq(w2[ids[t, j]], w2s[ids[t, j]]) @ ad[t * topk + j]) * w[t, j]
        return out

    def test_reference_is_the_layer_by_definition(self):
        for block in ((128, 128), None):
            x, ids, w, w1, w2, w1s, w2s = self.layer(block)
            ref = reference.reference_layer(torch, x, ids, w, w1, w2, w1s, w2s, block, True)
            self.assertLess(reference.rel_error(torch, self.naive(x, ids, w, w1, w2, w1s, w2s, block), ref), 1e-5)

    def test_tolerance_passes_rounding_and_catches_wrong_scales(self):
        block = (128, 128)
        x, ids, w, w1, w2, w1s, w2s = self.layer(block, m=16)
        ref = reference.reference_layer(torch, x, ids, w, w1, w2, w1s, w2s, block, True)
        # A right kernel: the output rounded to bf16 as the kernels store it.
        self.assertLess(reference.rel_error(torch, ref.to(torch.bfloat16), ref), reference.FP8_REL_TOL / 4)
        # Each weight block scaled by its neighbour's scale; the scales ignored; the routing
        # weight dropped: all off by far more than the tolerance.
        swapped = lambda q, s: reference.dequant_expert(torch, q, s.flip(-1), block)
        self.assertGreater(reference.rel_error(torch, self.naive(x, ids, w, w1, w2, w1s, w2s, block, swapped), ref),
                           2 * reference.FP8_REL_TOL)
        plain = lambda q, s: q.float() * float(s.mean())
        self.assertGreater(reference.rel_error(torch, self.naive(x, ids, w, w1, w2, w1s, w2s, block, plain), ref),
                           2 * reference.FP8_REL_TOL)
        self.assertGreater(reference.rel_error(torch, self.naive(x, ids, torch.ones_like(w) / 2, w1, w2, w1s, w2s, block),
                                        ref), 2 * reference.FP8_REL_TOL)
        # bf16's reference is unchanged: the same layer without quantization.
        wb1, wb2 = w1.float().to(torch.bfloat16), w2.float().to(torch.bfloat16)
        rb = reference.reference_layer(torch, x, ids, w, wb1, wb2)
        self.assertGreater(float(rb.abs().max()), 0.0)

    def test_pt_routing(self):
        d = tempfile.mkdtemp()
        ids = torch.tensor([[0, 1], [2, 3], [3, 0]], dtype=torch.int64)
        for name, obj in (("t.pt", ids), ("l.pt", [ids[:2], ids[2:]]), ("d.pt", {"topk_ids": ids.int()})):
            path = os.path.join(d, name)
            torch.save(obj, path)
            r = routing.Routing(path, "", torch)
            self.assertEqual((r.tokens, r.topk, r.ids), (3, 2, [0, 1, 2, 3, 3, 0]))
        for name, obj, why in (("f.pt", ids.float(), "not an integer tensor"), ("k.pt", {"ids": ids}, "topk_ids")):
            path = os.path.join(d, name)
            torch.save(obj, path)
            with self.assertRaises(routing.RoutingError) as cm:
                routing.Routing(path, "", torch)
            self.assertIn(why, str(cm.exception))


import rows as bench_rows  # noqa: E402


class BenchRows(unittest.TestCase):
    """bench/triton/rows.py: GPU seconds per batch size and outcome from result rows."""

    def test_sums_by_batch_size_and_outcome(self):
        def row(bs, status, median, n, detail=""):
            return {"batch_size": bs, "status": status, "median_us": median, "mean_us": median, "stddev_us": 0.0,
                    "samples": n, "detail": detail}
        data = [row(64, "ok", 1000.0, 5), row(64, "ok", 1200.0, 5, "rel_err=1e-3; settled: mean 1.2x"),
                row(64, "pruned", 3000.0, 2), row(64, "invalid", 0.0, 0), row(8, "ok", 500.0, 10)]
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            f.write("\n".join(json.dumps(r) for r in data) + "\n")
        try:
            out = io.StringIO()
            with mock.patch.object(sys, "argv", ["rows.py", f.name]), redirect_stdout(out):
                bench_rows.main()
        finally:
            os.unlink(f.name)
        lines = out.getvalue().splitlines()
        table = {tuple(l.split()[:2]): l.split()[2:] for l in lines[1:5]}
        # samples x median x 10 layers: 5 x 1000 us x 10 = 50 ms, 5 x 1200 x 10 = 60 ms, ...
        self.assertEqual(table[("64", "ok")], ["1", "5.0", "0.05"])
        self.assertEqual(table[("64", "settled")], ["1", "5.0", "0.06"])
        self.assertEqual(table[("64", "pruned")], ["1", "2.0", "0.06"])
        self.assertEqual(table[("8", "ok")], ["1", "10.0", "0.05"])
        self.assertEqual(lines[5], "whole-layer samples: 0.2 GPU seconds")
        self.assertTrue(lines[6].startswith("M=8     1.000x n= 10"))


sys.path.insert(0, os.path.join(ROOT, "bench", "search"))
import check_layer  # noqa: E402


class BenchCheckLayer(unittest.TestCase):
    """bench/search/check_layer.py: rows pruned on the check's layer, and the check layer's time
    over the graph's median for the verified rows that timed it, per batch size."""

    def test_counts_and_ratios(self):
        with tempfile.TemporaryDirectory() as d:
            db = os.path.join(d, "t.db")
            c = sqlite3.connect(db)
            c.execute("CREATE TABLE results (sweep_id, batch_size, status, median_us, detail, timed_us)")
            c.executemany("INSERT INTO results VALUES (?, ?, ?, ?, ?, ?)", [
                (1, 8, "ok", 100.0, "rel_err=1e-3; check 110 us", 2e6),
                (1, 8, "ok", 200.0, "rel_err=1e-3; check 240 us", 1e6),
                (1, 8, "ok", 50.0, "rel_err=1e-3", 1e6),  # first batch size: no check timed
                (1, 64, "ok", 400.0, "rel_err=1e-3; settled: mean 1.1x the best after 5 samples; check 404 us", 0),
                (1, 64, "pruned", 900.0, "pruned: the check's layer 2.00x the best 450 us; not verified", 9e5),
                (1, 64, "pruned", 700.0, "pruned: fastest of 1 samples 1.56x the best 450 us; not verified", 7e6),
                (2, 64, "pruned", 900.0, "pruned: the check's layer 2.00x the best 450 us; not verified", 1e6)])
            c.commit()
            c.close()
            out = io.StringIO()
            with redirect_stdout(out):
                check_layer.main(db)
        lines = out.getvalue().splitlines()
        self.assertEqual(lines[1].split(), ["ok", "4", "0", "4.0"])
        self.assertEqual(lines[2].split(), ["pruned", "2", "1", "7.9"])
        by_m = {l.split()[0]: l.split()[1:] for l in lines[6:]}
        self.assertEqual(by_m["8"], ["2", "1.100", "1.200", "1.200", "1.200"])
        self.assertEqual(by_m["64"], ["1", "1.010", "1.010", "1.010", "1.010"])
        self.assertEqual(by_m["all"], ["3", "1.010", "1.100", "1.200", "1.200"])


if __name__ == "__main__":
    unittest.main()
