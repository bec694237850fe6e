"""The facts C and the triton helper share, written once in worker/helper/engines.json and
worker/helper/measure.json: what the C side compiled (tests/tools/mt_facts, built from the headers
cmake/facts.cmake generates) agrees with what the helper reads, and the measurement rules give the
same verdicts in both languages.

Run by ctest as `python3 -m unittest tests/unit/test_facts.py` (unit/test_facts) with MT_BIN_DIR."""
import json
import os
import subprocess
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "worker"))
from helper import engines, kernels, measure  # noqa: E402


def c_facts():
    bin_dir = os.environ.get("MT_BIN_DIR") or os.path.join(ROOT, "build")
    out = subprocess.run([os.path.join(bin_dir, "mt_facts")], capture_output=True, text=True, check=True, timeout=30)
    return json.loads(out.stdout)


def table(name):
    with open(os.path.join(ROOT, "worker", "helper", name), encoding="utf-8") as f:
        return json.load(f)


class Engines(unittest.TestCase):
    def setUp(self):
        self.c = c_facts()

    def test_c_and_the_helper_know_the_same_engines_in_the_same_order(self):
        self.assertEqual([e["name"] for e in self.c["engines"]], list(engines.ENGINE_NAMES))
        self.assertEqual([e["id"] for e in self.c["engines"]], list(range(len(engines.ENGINE_NAMES))))
        self.assertEqual(self.c["names"], ", ".join(engines.ENGINE_NAMES))
        self.assertEqual(self.c["all"], ",".join(engines.ENGINE_NAMES))

    def test_each_engine_has_the_same_variable_and_name_in_both(self):
        for e in self.c["engines"]:
            py = engines.ENGINES[e["name"]]
            self.assertEqual((e["display"], e["config_env"]), (py["display"], py["config_env"]), e["name"])

    def test_the_helper_s_kernels_and_places_cover_every_engine(self):
        for name in engines.ENGINE_NAMES:
            self.assertIs(kernels.KERNELS[name], kernels.EngineKernel)
            self.assertEqual(sorted(engines.ENGINE_PLACES[name]), ["align", "launcher", "lookup", "prepare"])
            self.assertTrue(engines.ENGINE_DIST[name])
        self.assertEqual(sorted(kernels.KERNELS), sorted(engines.ENGINE_NAMES + ("moetune",)))

    def test_the_table_is_what_both_read(self):
        self.assertEqual([e["name"] for e in table("engines.json")["engines"]], list(engines.ENGINE_NAMES))


class Rules(unittest.TestCase):
    def setUp(self):
        self.c = c_facts()

    def test_every_rule_has_one_value_in_c_and_in_the_helper(self):
        rules = table("measure.json")["rules"]
        self.assertEqual(sorted(r["c"] for r in rules), sorted(self.c["rules"]))
        for r in rules:
            py = getattr(measure, r["py"], measure.RULES[r["py"]])
            self.assertEqual(self.c["rules"][r["c"]], py, r["c"])
            self.assertEqual(type(py), int if r["type"] == "int" else float, r["py"])

    def test_racing_check_stop_and_settle_give_the_same_verdicts(self):
        self.assertGreater(len(self.c["cases"]), 100)
        verdicts = set()
        for margin, ratio, n, race, check, precise, settled in self.c["cases"]:
            best, us = 100.0, 100.0 * ratio
            m = {"race_margin": margin, "rsd_target": 0.01, "settle_margin": measure.RULES["SETTLE_MARGIN"],
                 "min_samples": 4}
            case = (margin, ratio, n)
            self.assertEqual(measure.race_lost(m, best, [us] * n), bool(race), ("race_lost",) + case)
            self.assertEqual(measure.check_lost(m, best, us), bool(check), ("check_lost",) + case)
            st = {"samples": n, "mean_us": us, "stddev_us": 0.03 * us / n}
            self.assertEqual(measure.precise(m, st), bool(precise), ("precise",) + case)
            st = {"samples": n, "mean_us": us, "stddev_us": 0.03 * us}
            self.assertEqual(measure.settled(m, best, st), bool(settled), ("settled",) + case)
            verdicts.add((race, check, precise, settled))
        # the grid reaches both sides of every rule
        for i in range(4):
            self.assertEqual({v[i] for v in verdicts}, {0, 1}, i)


if __name__ == "__main__":
    unittest.main()
