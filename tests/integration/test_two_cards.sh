#!/usr/bin/env bash
# Two GPUs of one model that read the same kernels a few percent apart (two sim workers on GPU
# indices 0 and 1, the second with every latency x 1.04, as two H100s read up to 3 % apart): a
# racing sweep over both picks what a one-card reference sweep picks, within 0.15 % at every
# batch size and the same config at 10 or more of 13: the decide step re-measures each card's own
# near-ties side by side (halving.h, HALVING_DEVICE_MARGIN), so a config only the slower card
# measured is not ranked out by its card. Then bench/search/two_cards.sh, one run, scores alike.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
SHAPE=(--model qwen3-30b-a3b --tp 1 --batch-sizes 1,2,4,8,16,32,64,128,256,512,1024,2048,4096)

"$M" tune --backend sim --workers 1 --sim-time-scale 0 "${SHAPE[@]}" --db "$T/ref.db" --out "$T/ref" \
  >"$T/ref.out" 2>"$T/ref.err" || { tail "$T/ref.err"; fail "the one-card reference sweep exited $?"; }

start_coordinator
"$BIN/moetune-worker" --connect "$WEP" --backend sim --gpu 0 --id fast >>"$T/worker1.log" 2>&1 &
PIDS+=($!)
"$BIN/moetune-worker" --connect "$WEP" --backend sim --gpu 1 --id slow --sim-faults slowdown=1.04 >>"$T/worker2.log" 2>&1 &
PIDS+=($!)
"$M" submit --control "$CEP" --name two-cards --chunk 8 "${SHAPE[@]}" >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit failed"; }
st=$(wait_sweep 1 180)
[ "$st" = done ] || fail "the two-card sweep ended '$st'"
"$M" export --db "$DB" --out "$T/two" >"$T/export.out" 2>&1 || { cat "$T/export.out"; fail "export exited $?"; }

# both cards measured, as two devices of one name
[ "$(sql "SELECT COUNT(DISTINCT device_id) FROM results WHERE phase = 1")" = 2 ] || fail "one card measured every row"
[ "$(sql "SELECT COUNT(DISTINCT name) FROM devices")" = 1 ] || fail "the two sim cards have different names"

p2=$(sql "SELECT COUNT(*) FROM results WHERE phase = 2")
[ "$p2" -gt 0 ] || fail "no decide step rows"
pass "both cards measured; the decide step re-measured $p2 rows side by side"

f_ref="$T/ref/sim/E=128,N=768,device_name=NVIDIA_H200.json"
f_two="$T/two/sim/E=128,N=768,device_name=NVIDIA_H200.json"
[ -f "$f_ref" ] && [ -f "$f_two" ] || fail "missing exports"
WORST=0
same=0
for bs in 1 2 4 8 16 32 64 128 256 512 1024 2048 4096; do
  w=$(pick_where "$f_two" $bs)
  near_best "$T/ref.db" $bs "$w" two-card
  [ "$(jq -c --arg k $bs '.[$k]' "$f_ref")" = "$(jq -c --arg k $bs '.[$k]' "$f_two")" ] && same=$((same + 1))
done
# The decide step without the cards' own near-ties picked another config than the reference at
# 5-11 of these 13 batch sizes, up to 0.27-0.54 % slower (8 runs, bench/search/two_cards.sh);
# with them, at 0-2, up to 0.10 %.
awk -v w="$WORST" 'BEGIN { exit !(w <= 1.0015) }' || fail "a two-card pick is ${WORST}x the one-card best"
[ "$same" -ge 10 ] || fail "two cards picked the one-card reference's config at $same of 13 batch sizes"
pass "two cards 4 % apart: the reference's config at $same of 13 batch sizes, every pick within ${WORST}x of it"

# The benchmark of the same (bench/search/two_cards.sh, one run): its summary line scores the run
# against its reference with stability.py against.
bench=$(cd "$(dirname "$0")/../../bench/search" && pwd)
bash "$bench/two_cards.sh" "$BIN" "$T/bench" 1 >"$T/bench.out" 2>&1 || { cat "$T/bench.out"; fail "two_cards.sh exited $?"; }
python3 - "$T/bench.out" <<'PY' || fail "two_cards.sh: $(cat "$T/bench.out")"
import json, sys
lines = [json.loads(l[len("summary "):]) for l in open(sys.argv[1]) if l.startswith("summary ")]
assert len(lines) == 1, lines
s = lines[0]
assert s["batch_sizes"] == 13 and s["other_config"] <= 2 and 1.0 <= s["worst_ratio"] <= 1.0015, s
PY
pass "bench/search/two_cards.sh: $(grep -o '"other_config": [0-9]*' "$T/bench.out"), $(grep -o '"worst_ratio": [0-9.]*' "$T/bench.out")"
