#!/usr/bin/env bash
# The ship guard's incumbent found through the engine's own interpreter (sim backend): a tune given
# no --baseline asks the interpreter (--python) where its engine keeps its config files and takes,
# per shape, the file the engine would load there (this Triton version's, else its fallback
# version's) as the incumbent, saying which; where the engine ships none it says so and guards
# against the default alone. --baseline wins; --guard off asks nothing. Fake engine packages:
# tests/fixtures/engines (plain Python, a fake torch naming $MOETUNE_FAKE_GPU, Triton 3.6.0).
source "$(dirname "$0")/lib.sh"
fake_engines
M="$BIN/moetune"
NAME="E=128,N=768,device_name=NVIDIA_H200.json"
SHAPE="E=128,N=768,K=2048,topk=8"
SPEC=(--backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,16,256
  --block-m 16,32,64 --block-n 64,128 --block-k 64,128 --group-m 1 --num-warps 4,8 --num-stages 3)
TU=sglang/srt/layers/moe/moe_runner/triton_utils
# tune LAYOUT OUT [ARGS...]: a sim tune with the fake engine LAYOUT importable in $PY; rc in $rc
tune() {
  local l=$1 out=$2; shift 2
  rc=0
  PYTHONPATH=$F/$l:$F/_stubs "$M" tune "${SPEC[@]}" --python "$PY" --db "$T/$out.db" --out "$T/$out" "$@" \
    >"$T/$out.out" 2>"$T/$out.err" || rc=$?
  [ $rc = 0 ] || { tail "$T/$out.err"; fail "tune ($l) exited $rc"; }
}
has() { grep -qF -- "$2" "$T/$1.err" || { cat "$T/$1.err"; fail "$1: no line with '$2'"; }; }
inc_rows() { q "$T/$1.db" "SELECT g.batch_size || ':' || c.block_m || 'x' || c.block_n || 'x' || c.block_k || 'x' ||
  c.num_warps || ':' || g.source FROM guard g JOIN configs c ON c.id = g.config_id
  WHERE g.role = 'incumbent' AND g.batch_size IN (1, 16, 256) ORDER BY g.batch_size" | paste -sd' '; }

# ---- 1: the engine ships a file for this Triton version: it is the incumbent
FILE=$F/sglang-new/$TU/configs/triton_3_6_0/$NAME
tune sglang-new a
has a "incumbent for $SHAPE: $FILE, the file sglang 0.6.0.fake in $PY ships for Triton 3.6.0"
[ "$(inc_rows a)" = "1:16x128x64x4:$FILE, key 1 16:16x128x64x4:$FILE, key 1 256:32x64x128x8:$FILE, key 256" ] \
  || fail "the incumbent rows are not the bundled file's nearest entries: $(inc_rows a)"
[ "$(q "$T/a.db" "SELECT DISTINCT engine FROM guard WHERE role = 'incumbent'")" = sglang ] || fail "incumbent rows not SGLang's"
rec=$(jq -c --arg n "$NAME" '.[$n]' "$T/a/sim/manifest.json")
[ "$(echo "$rec" | jq -r .guard.incumbent_file)" = "triton_3_6_0's file" ] || fail "manifest: $(echo "$rec" | jq -c .guard)"
[ "$(echo "$rec" | jq -r '.entries["256"].guard.incumbent.source')" = "$FILE, key 256" ] \
  || fail "manifest entry 256: $(echo "$rec" | jq -c '.entries["256"].guard')"
grep -q "faster than triton_3_6_0's file" "$T/a.out" || fail "tune does not name the incumbent: $(cat "$T/a.out")"
# the same command again: the same incumbent, so the done sweep is exported again, not measured
tune sglang-new a
has a "already measured this"
pass "no --baseline: the engine's bundled file for Triton 3.6.0 is the incumbent, said and measured; a rerun reuses the sweep"

# ---- 2: only another Triton version's file: SGLang's fallback is the incumbent
FILE=$F/sglang-mid/$TU/configs/triton_3_4_0/$NAME
tune sglang-mid b
has b "incumbent for $SHAPE: $FILE, another Triton version's file (3.4.0), which sglang 0.5.9.fake in $PY falls back to: it ships none for Triton 3.6.0"
[ "$(inc_rows b)" = "1:16x64x128x4:$FILE, key 16 16:16x64x128x4:$FILE, key 16 256:16x64x128x4:$FILE, key 16" ] \
  || fail "the fallback's entries were not measured: $(inc_rows b)"
pass "the engine's fallback (another Triton version's file) is the incumbent, said so"

# ---- 3: the engine ships nothing for this GPU and shape: said, the default alone guards
tune sglang-old c
has c "incumbent for $SHAPE: none: sglang 0.5.8.fake in $PY ships no file for NVIDIA H200 and this shape; only the engine's default guards it"
[ "$(q "$T/c.db" "SELECT COUNT(*) FROM guard WHERE role = 'incumbent'")" = 0 ] || fail "incumbent rows without a file"
[ "$(q "$T/c.db" "SELECT COUNT(*) FROM guard WHERE role = 'default' AND batch_size IN (1, 16, 256)")" = 3 ] \
  || fail "not one default row per batch size"
pass "no bundled file: said so, guarded against the engine's default only"

# ---- 4: --baseline wins over the engine's file; --guard off asks nothing
cat >"$T/mine.json" <<EOF
{"8": {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1, "num_warps": 4, "num_stages": 3}}
EOF
tune sglang-new d --baseline "$T/mine.json"
grep -q "incumbent for" "$T/d.err" && fail "--baseline given, yet the engine's file was announced: $(cat "$T/d.err")"
[ "$(q "$T/d.db" "SELECT DISTINCT source FROM guard WHERE role = 'incumbent' AND batch_size = 256")" = "$T/mine.json, key 8" ] \
  || fail "--baseline did not win: $(inc_rows d)"
tune sglang-new o --guard off
grep -q "incumbent" "$T/o.err" && fail "--guard off still looked for an incumbent: $(cat "$T/o.err")"
[ "$(q "$T/o.db" "SELECT COUNT(*) FROM guard")" = 0 ] || fail "--guard off stored guard rows"
pass "--baseline wins over the engine's file; --guard off looks for none"

# ---- 5: the interpreter's engine is not installed: said, the default alone guards
tune _stubs e
has e "incumbent: none: sglang is not installed in $PY; only the engine's default guards the sweep"
[ "$(q "$T/e.db" "SELECT COUNT(*) FROM guard WHERE role = 'incumbent'")" = 0 ] || fail "incumbent rows without an engine"
pass "an interpreter without the engine: said so, guarded against the default"
