#!/usr/bin/env bash
# bench/search/scale.sh on a small sweep (8 sim workers at time scale 1, one slow shape, 48 configs x
# 2 batch sizes, racing and the decide step on): every planned row stored, an efficiency printed
# in (0, 100] %, and scale_span.py's breakdown of the workers' own logs (WORKER_LOGS=1) accounts
# for the sweep's wall time: its parts partition each worker's time from the submit to the end, so
# start + work + over + not stored + idle + end must be the wall (a part lost or counted twice by
# the parsing fails it), within 3 %; its work must be the script's ideal (every stored row found
# in the log of the worker that measured it); each shape's phase 2 is listed. With the coordinator at
# debug, the commit backlog is parsed: every Result the coordinator took was committed by the end
# (a count lost or counted twice leaves it off 0) and the peak is at least 1.
source "$(dirname "$0")/lib.sh"
S=${MT_SOURCE_DIR:?MT_SOURCE_DIR must point at the source folder}
# scale_models.sh hands scale.sh the worker count it was given and the 33 preset shapes the
# sim's rules run (N a multiple of 64: none of gpt-oss at TP 2-8 or Qwen3-30B-A3B at TP 8)
printf '#!/bin/sh\necho "$@"\n' >"$T/args.sh"
chmod +x "$T/args.sh"
margs=$(SCALE_SH="$T/args.sh" bash "$S/bench/search/scale_models.sh" BIN 256) || fail "scale_models.sh exited $?"
[ "$(cut -d' ' -f1-2 <<<"$margs")" = "BIN 256" ] || fail "scale_models.sh passed: $(cut -c1-80 <<<"$margs")"
[ "$(grep -o -- '--shape' <<<"$margs" | wc -l)" = 33 ] || fail "scale_models.sh: not 33 shapes: $margs"
for bad in N=1440, N=720, N=360, N=96,; do grep -q -- "$bad" <<<"$margs" && fail "scale_models.sh gave $bad"; done
grep -q -- "--shape E=128,N=768,K=2048,topk=8 " <<<"$margs" || fail "scale_models.sh: no Qwen3-30B-A3B TP1: $margs"
pass "scale_models.sh: 256 workers, 33 shapes"
COORD_LOG_LEVEL=debug WORKER_LOGS=1 KEEP_LOGS=1 bash "$S/bench/search/scale.sh" "$BIN" 8 --shape E=8,N=7168,K=4096,topk=2 \
  --block-m 16,32,64 --block-n 64,128 --block-k 64,128 --group-m 1,16 --num-warps 4,8 --num-stages 3,4 \
  --batch-sizes 256,4096 >"$T/scale.out" 2>&1 || { cat "$T/scale.out"; fail "scale.sh exited $?"; }
run=$(sed -n 's/^kept: //p' "$T/scale.out")
[ -d "$run" ] || fail "scale.sh kept no run directory: $(cat "$T/scale.out")"
trap 'rm -rf "$run"' EXIT
grep -q '^rows \([0-9]*\) of \1 planned' "$T/scale.out" || fail "rows missing: $(grep '^rows' "$T/scale.out")"
eff=$(sed -n 's/.*efficiency \([0-9.]*\) %.*/\1/p' "$T/scale.out")
ideal=$(sed -n 's/^ideal \([0-9.]*\) s.*/\1/p' "$T/scale.out")
[ -n "$eff" ] && [ "$(echo "$eff > 0 && $eff <= 100" | bc -l)" = 1 ] || fail "efficiency '$eff' not in (0, 100]"
pass "scale.sh: every planned row stored, efficiency $eff %"
python3 "$S/bench/search/scale_span.py" "$run" >"$T/span.out" 2>&1 || { cat "$T/span.out"; fail "scale_span.py exited $?"; }
line=$(grep '^per worker (8), mean s:' "$T/span.out") || fail "no breakdown of 8 workers: $(cat "$T/span.out")"
wall=$(sed -n 's/^wall \([0-9.]*\) ideal.*/\1/p' "$T/span.out")
sum=$(python3 -c 'import re, sys; print(round(sum(float(x) for x in re.findall(r"[a-z ]+ ([0-9.]+)", sys.argv[1].split(":", 1)[1])), 3))' "$line")
work=$(sed 's/.*work \([0-9.]*\),.*/\1/' <<<"$line")
[ "$(echo "$sum > 0.97 * $wall && $sum < 1.03 * $wall" | bc -l)" = 1 ] || fail "breakdown sums to $sum s, the wall is $wall s: $line"
[ "$(echo "$work > 0.97 * $ideal - 0.01 && $work < 1.03 * $ideal + 0.01" | bc -l)" = 1 ] || fail "breakdown's work $work s, the ideal $ideal s"
grep -q '^per shape, last first-pass Result + lag to its phase 2: 1: ' "$T/span.out" || fail "no phase-2 lag: $(cat "$T/span.out")"
pass "scale_span.py: the breakdown sums to the wall ($sum of $wall s), its work is the ideal ($work of $ideal s)"
bl=$(grep '^commit backlog' "$T/span.out") || fail "no commit backlog: $(cat "$T/span.out")"
grep -q 'peak [1-9][0-9]* at .*; at the end 0$' <<<"$bl" || fail "backlog not counted to 0: $bl"
pass "scale_span.py: the commit backlog ($bl)"
