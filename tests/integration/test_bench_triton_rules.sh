#!/usr/bin/env bash
# bench/triton/sim_rules.sh in CI: the per-device counts of Triton's static rules over the default
# space (H100 and H200: 616 of 1920 rejected for a bf16 shape; the RTX PRO 6000's sm_120: 944), and
# the warm start's pruning share: the second sweep prunes a larger share and keeps the same picks;
# a cold sweep starting from the engine's bundled file (fake SGLang) keeps the picks of one without it.
source "$(dirname "$0")/lib.sh"
S=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source folder}
bash "$S/bench/triton/sim_rules.sh" "$BIN" >"$T/bench.out" 2>"$T/bench.err" || { cat "$T/bench.err"; fail "sim_rules.sh exited $?"; }
cat "$T/bench.out"
row() { awk -v d="$1" -v m="$2" '$1 == d && $2 == m { print $3, $4 }' "$T/bench.out"; }
for d in h100 h200; do
  [ "$(row $d qwen3-30b-a3b/tp1)" = "1304 616" ] || fail "$d qwen3: $(row $d qwen3-30b-a3b/tp1)"
done
[ "$(row rtx-pro-6000 qwen3-30b-a3b/tp1)" = "976 944" ] || fail "sm_120 qwen3: $(row rtx-pro-6000 qwen3-30b-a3b/tp1)"
pass "planned/rejected per device: sm_90 616, sm_120 944 of 1920"
cold=$(awk '$1 == "cold" { print $3 }' "$T/bench.out")
warm=$(awk '$1 == "warm" { print $3 }' "$T/bench.out")
[ -n "$cold" ] && [ -n "$warm" ] && [ "$warm" -gt "$cold" ] || fail "pruned: cold $cold, warm $warm"
grep -q "same picks in both sweeps' files: yes" "$T/bench.out" || fail "the warm sweep's picks differ"
pass "warm start: $warm results pruned (cold: $cold), the same picks"
if grep -q "^engine: skipped" "$T/bench.out"; then
  echo "engine's file: skipped (no /usr/bin/python3)"
else
  for s in nofile engine; do
    awk -v s=$s '$1 == s && $3 > 0 { ok = 1 } END { exit !ok }' "$T/bench.out" || fail "no pruning row for $s"
  done
  grep -q "^engine's file first: .*from sglang's bundled file for NVIDIA H200 (triton_3_6_0)" "$T/bench.out" \
    || fail "the engine's file did not go first: $(grep "engine's file first" "$T/bench.out")"
  grep -q "same picks with and without the engine's file: yes" "$T/bench.out" || fail "the engine's file changed the picks"
  pass "warm start from the engine's file: $(awk '$1 == "engine" { print $3 }' "$T/bench.out") results pruned" \
    "(without the file: $(awk '$1 == "nofile" { print $3 }' "$T/bench.out")), the same picks"
fi
