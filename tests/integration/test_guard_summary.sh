#!/usr/bin/env bash
# diff, history and the nightly submit say what the ship guard did to a sweep's files: how many
# keys it added between batch sizes and at how many batch sizes the engine's default's and the
# incumbent's configs are shipped; the counts are export's own (its manifest). Sim workers with
# planted faults: the default is fastest at M=1, and the incumbent file's one entry (key 256: the
# default's config for M > E) at M=256.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
NAME="E=128,N=768,device_name=NVIDIA_H200.json"
DEF1=16x32x64x1x4x3   # SGLang's bf16 default at M <= E
DEF=64x64x32x8x4x3    # ... at M > E
start_coordinator
start_workers 2 --sim-time-scale 0 --sim-faults "speed=$DEF1@1:0.5,speed=$DEF@256:0.5"
cat >"$T/inc.json" <<EOF
{"256": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8, "num_warps": 4, "num_stages": 3}}
EOF
SPEC=(--model qwen3-30b-a3b --tp 1 --batch-sizes 1,16,256,4096 --block-m 16,32,64,128 --block-n 64,128,256
  --block-k 64,128 --group-m 1 --num-warps 4,8 --num-stages 3 --baseline "$T/inc.json")
nightly() { # NAME: one nightly submit, output in $T/NAME.out
  "$M" submit --control "$CEP" --name "$1" "${SPEC[@]}" --wait --compare-to last --db "$DB" --out "$T/configs" \
    >"$T/$1.out" 2>&1 || { cat "$T/$1.out"; fail "nightly $1 exited $?"; }
}

# ---- the first nightly: nothing to compare; it says what the guard did to the sweep it exports
nightly n1
rec=$(jq -c --arg n "$NAME" '.[$n]' "$T/configs/sim/manifest.json")
added=$(echo "$rec" | jq '.guard.keys_added | length')
[ "$(echo "$rec" | jq -c '[.guard.default_shipped_at, .guard.incumbent_shipped_at]')" = "[[1],[256]]" ] \
  || fail "the planted faults did not ship the default at 1 and the incumbent at 256: $(echo "$rec" | jq -c .guard)"
[ "$added" -ge 1 ] || fail "no key added: the test plants nothing between the keys; $(echo "$rec" | jq -c .guard)"
keys="$added key"; [ "$added" = 1 ] || keys="${keys}s"
WANT="$keys added, the default's config shipped at 1 batch size, the incumbent's at 1"
grep -qF "guard: sweep 1: $WANT" "$T/n1.out" || { cat "$T/n1.out"; fail "the first nightly does not say what the guard did"; }
pass "first nightly: $WANT (as its export's manifest)"

# ---- the second: its diff says it for both sweeps
nightly n2
grep -qF "guard: old sweep 1: $WANT; new sweep 2: $WANT" "$T/n2.out" || { cat "$T/n2.out"; fail "the nightly diff has no guard line"; }
pass "second nightly: the diff's guard line for both sweeps"

# ---- diff and history, text and JSON
"$M" diff 1 2 --db "$DB" >"$T/diff.out" || fail "diff exited $?"
grep -qF "guard: old sweep 1: $WANT; new sweep 2: $WANT" "$T/diff.out" || { cat "$T/diff.out"; fail "diff has no guard line"; }
"$M" diff 1 2 --db "$DB" --json >"$T/diff.json" || fail "diff --json exited $?"
W="{\"keys_added\":$added,\"default_shipped\":1,\"incumbent_shipped\":1}"
[ "$(jq -c '[.old.guard, .new.guard]' "$T/diff.json")" = "[$W,$W]" ] || fail "diff --json: $(jq -c '[.old.guard, .new.guard]' "$T/diff.json")"
"$M" history --db "$DB" --shape E=128,N=768 >"$T/hist.out" || fail "history exited $?"
[ "$(grep -cF "  guard: $WANT" "$T/hist.out")" = 2 ] || { cat "$T/hist.out"; fail "history: not one guard line per sweep"; }
"$M" history --db "$DB" --shape E=128,N=768 --json >"$T/hist.json" || fail "history --json exited $?"
[ "$(jq -c '[.sweeps[].guard]' "$T/hist.json")" = "[$W,$W]" ] || fail "history --json: $(jq -c '[.sweeps[].guard]' "$T/hist.json")"
# a batch size of its own: the count is of that batch size
"$M" history --db "$DB" --shape E=128,N=768 --batch-size 256 --json >"$T/h256.json" || fail "history --batch-size exited $?"
[ "$(jq -c '.sweeps[0].guard' "$T/h256.json")" = '{"keys_added":0,"default_shipped":0,"incumbent_shipped":1}' ] \
  || fail "history --batch-size 256: $(jq -c '.sweeps[0].guard' "$T/h256.json")"
pass "diff and history: the guard's counts per sweep, text and JSON"

# ---- a sweep without the guard says so
"$M" submit --control "$CEP" --name off --model qwen3-30b-a3b --tp 1 --batch-sizes 1,16 --block-m 16,32 --block-n 64 \
  --block-k 64 --group-m 1 --num-warps 4 --num-stages 3 --guard off --wait >"$T/off.out" 2>&1 || fail "submit --guard off"
"$M" history --db "$DB" --shape E=128,N=768 --json >"$T/hist.json" || fail "history exited $?"
[ "$(jq -c '.sweeps[2].guard' "$T/hist.json")" = null ] || fail "an unguarded sweep's guard: $(jq -c '.sweeps[2].guard' "$T/hist.json")"
"$M" history --db "$DB" --shape E=128,N=768 >"$T/hist.out" || fail "history exited $?"
grep -qF "  guard: none (no default or incumbent measured)" "$T/hist.out" || { cat "$T/hist.out"; fail "history: the unguarded sweep"; }
pass "an unguarded sweep: guard null / none"
