#!/usr/bin/env bash
# One-machine mode: `moetune tune` runs its own coordinator and sim workers, writes the config
# files and the manifest, and a second identical run reuses the done sweep (measures nothing). Without a GPU, the cuda
# backend fails with a clear message and exit code 1, not a crash.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"

"$M" tune --backend sim --workers 3 --sim-time-scale 0 --model qwen3-30b-a3b --tp 2 \
  --batch-sizes 1,8,64,512,4096 --db "$DB" --out "$T/configs" >"$T/tune.out" 2>"$T/tune.err" \
  || { tail "$T/tune.err"; fail "tune exited $?"; }
f="$T/configs/sim/E=128,N=384,device_name=NVIDIA_H200.json"
[ -f "$f" ] || { ls -R "$T/configs"; fail "expected $f"; }
# the sweep's batch sizes and the keys the ship guard added between them, in ascending order
want=$(jq -r --arg n "$(basename "$f")" '[.[$n].guard.keys_added[], 1, 8, 64, 512, 4096] | sort | map(tostring) | join(",")' \
  "$T/configs/sim/manifest.json")
[ "$(jq -r 'keys_unsorted | join(",")' "$f")" = "$want" ] || fail "keys are $(jq -c keys_unsorted "$f"), not $want"
for key in 1 8 64 512 4096; do
  n=$(jq -r --arg k "$key" '.[$k] | [.BLOCK_SIZE_M, .BLOCK_SIZE_N, .BLOCK_SIZE_K, .GROUP_SIZE_M, .num_warps, .num_stages] | map(select(. > 0)) | length' "$f")
  [ "$n" = 6 ] || fail "entry $key lacks a field"
done
[ "$(jq -r '[.. | objects | select(has("simulated")) | .simulated] | all and (length > 0)' "$T/configs/sim/manifest.json")" = true ] \
  || fail "manifest does not mark the results simulated"
[ "$(sql "SELECT state FROM sweeps WHERE id=1")" = done ] || fail "sweep not done"
rows=$(check_rows 1)
pass "tune wrote $(basename "$f") from $rows rows"

# The same command again: the done sweep is reused (nothing measured: one sweep, the same rows),
# its file exported again, and the command says so.
rm -f "$f"
"$M" tune --backend sim --workers 3 --sim-time-scale 0 --model qwen3-30b-a3b --tp 2 \
  --batch-sizes 1,8,64,512,4096 --db "$DB" --out "$T/configs" >"$T/tune2.out" 2>"$T/tune2.err" \
  || { tail "$T/tune2.err"; fail "second tune exited $?"; }
[ "$(sql "SELECT count(*) FROM sweeps")" = 1 ] || fail "second identical run made a new sweep"
[ "$(sql "SELECT count(*) FROM results")" = "$rows" ] || fail "second identical run measured again: $(sql "SELECT count(*) FROM results") rows, was $rows"
grep -q "sweep 1 already measured this" "$T/tune2.err" || fail "second run did not say it reused sweep 1: $(cat "$T/tune2.err")"
[ -f "$f" ] || fail "second run did not export the file again"
pass "second identical run reused sweep 1: 1 sweep, $rows rows, file exported again"

# History: results --best agrees with the file.
"$M" results --db "$DB" --best --json --batch-size 64 >"$T/best.json" || fail "results --best failed"
[ "$(wc -l <"$T/best.json")" = 1 ] || fail "results --best for one shape and M=64 gave $(wc -l <"$T/best.json") rows"
got=$(jq -c '.config' "$T/best.json")
want=$(jq -c '.["64"]' "$f")
[ "$got" = "$want" ] || fail "results --best says $got, the file says $want"
pass "results --best agrees with the file for M=64: $got"

# Lookup picks the nearest key.
"$M" lookup --json "$f" 100 >"$T/lookup.out" || fail "lookup failed"
[ "$(jq -r .key "$T/lookup.out")" = 64 ] || { cat "$T/lookup.out"; fail "lookup 100 should pick key 64"; }
[ "$(jq -c '{BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K, GROUP_SIZE_M, num_warps, num_stages}' "$T/lookup.out")" = "$(jq -c '.["64"]' "$f")" ] \
  || fail "lookup 100 did not return entry 64: $(cat "$T/lookup.out")"
pass "lookup 100 -> key 64"

# No GPU here: the cuda backend says so and exits 1.
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  set +e
  "$BIN/moetune-worker" --connect "$WEP" --backend cuda >"$T/cuda.out" 2>"$T/cuda.err"
  rc=$?
  set -e
  [ $rc = 1 ] || { cat "$T/cuda.err"; fail "worker with the cuda backend and no GPU exited $rc, expected 1"; }
  grep -qiE 'cuda' "$T/cuda.err" || fail "the cuda error does not mention CUDA: $(cat "$T/cuda.err")"
  pass "cuda backend without a GPU: exit 1: $(head -n1 "$T/cuda.err")"
  set +e
  "$M" tune --backend cuda --model qwen3-30b-a3b --tp 1 --db "$T/c.db" --out "$T/c" >/dev/null 2>"$T/tc.err"
  rc=$?
  set -e
  [ $rc = 1 ] || { cat "$T/tc.err"; fail "tune --backend cuda without a GPU exited $rc, expected 1"; }
  pass "tune --backend cuda without a GPU: exit 1: $(tail -n1 "$T/tc.err")"
fi
