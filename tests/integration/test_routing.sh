#!/usr/bin/env bash
# Captured routing: tune --routing FILE on the sim: the file's sha256 becomes part of the shape
# (a second shape row next to the uniform one, so the two never merge), the routings table and
# the manifest record source and hash, results --compare-routing lines up both medians, and
# hostile files are refused before anything starts, each with a one-line reason.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
SHAPE=E=16,N=256,K=512,topk=2

# A .npy as NumPy writes it, without NumPy: expert loads follow a Zipf law (s = 1.2).
npy() {  # npy OUT DESCR TOKENS [E] [TOPK] [MODE]
  python3 - "$@" <<'PY'
import random, struct, sys
out, descr, tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
e = int(sys.argv[4]) if len(sys.argv) > 4 else 16
topk = int(sys.argv[5]) if len(sys.argv) > 5 else 2
mode = sys.argv[6] if len(sys.argv) > 6 else ""
rng = random.Random(7)
w = [1.0 / (i + 1) ** 1.2 for i in range(e)]
ids = []
for _ in range(tokens):
    row = set()
    while len(row) < topk:
        row.add(rng.choices(range(e), w)[0])
    ids.extend(sorted(row))
size = {"<i4": 4, "<i8": 8, "<f4": 4}[descr]
fmt = {"<i4": "<i", "<i8": "<q", "<f4": "<f"}[descr]
body = b"".join(struct.pack(fmt, v) for v in ids)
if mode == "truncate":
    body = body[:-6]
h = "{'descr': '%s', 'fortran_order': False, 'shape': (%d, %d), }" % (descr, tokens, topk)
h += " " * (64 - (10 + len(h) + 1) % 64) + "\n"
open(out, "wb").write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(h)) + h.encode() + body)
PY
}
npy "$T/skew.npy" "<i8" 3000
want_sha=$(sha256sum "$T/skew.npy" | cut -d' ' -f1)

run_tune() {  # run_tune OUT [args...]  (racing off: the routing comparison needs every config measured on both)
  local out=$1
  shift
  "$M" tune --backend sim --workers 2 --sim-time-scale 0 --race-margin 0 --shape "$SHAPE" --block-m 16,64 --block-n 64,128 \
    --block-k 64,128 --group-m 1 --num-warps 4 --num-stages 3 --batch-sizes 16,256,1024 --db "$DB" \
    --out "$T/$out" "$@" >"$T/$out.out" 2>"$T/$out.err" || { tail "$T/$out.err"; fail "tune $out exited $?"; }
}
run_tune uniform
run_tune captured --routing "$T/skew.npy"
[ "$(sql "SELECT COUNT(*) FROM shapes WHERE e = 16")" = 2 ] || fail "expected a uniform and a captured shape row"
[ "$(sql "SELECT routing FROM shapes WHERE e = 16 AND routing != ''")" = "$want_sha" ] \
  || fail "shape routing is not the file's sha256"
[ "$(sql "SELECT source || ' ' || tokens || ' ' || topk FROM routings")" = "$(realpath "$T/skew.npy") 3000 2" ] \
  || fail "routings row: $(sql "SELECT * FROM routings")"
[ "$(sql "SELECT COUNT(DISTINCT shape_id) FROM results WHERE status = 'ok'")" = 2 ] || fail "results not per routing"
pass "the captured routing is its own shape ($want_sha), recorded with its source"

cm="$T/captured/sim/manifest.json"
[ "$(jq -r '.[] | objects | select(has("routing")) | .routing.sha256' "$cm" | head -n1)" = "$want_sha" ] \
  || { cat "$cm"; fail "manifest lacks the routing hash"; }
[ "$(jq -r '.[] | objects | select(has("routing")) | .routing.source' "$cm" | head -n1)" = "$(realpath "$T/skew.npy")" ] \
  || fail "manifest lacks the routing source"
[ "$(jq -r '.[] | objects | select(has("routing")) | .routing.kind' "$T/uniform/sim/manifest.json" | head -n1)" = uniform ] \
  || fail "the uniform manifest does not say uniform"
pass "manifests record the routing (captured: hash and source; uniform)"

# One export of both sweeps would merge two routings into one file name: refused.
set +e
"$M" export --db "$DB" --sweeps 1,2 --out "$T/both" >"$T/both.out" 2>&1
rc=$?
set -e
[ $rc != 0 ] && grep -q "two shapes, .* would both be written to" "$T/both.out" || { cat "$T/both.out"; fail "export of both routings: rc $rc"; }
pass "an export that would merge two routings into one file is refused"

"$M" results --db "$DB" --compare-routing --json >"$T/cmp.json" || fail "results --compare-routing failed"
n=$(wc -l <"$T/cmp.json")
[ "$n" = 24 ] || fail "compare gave $n rows, expected 8 configs x 3 batch sizes"
[ "$(jq -s 'map(.ratio >= 1) | all' "$T/cmp.json")" = true ] || fail "the skewed routing should never be faster on the sim"
[ "$(jq -s 'map(select(.batch_size == 1024 and .ratio > 1.2)) | length' "$T/cmp.json")" -gt 0 ] \
  || fail "no config slowed by the skew at M=1024: $(jq -s -c 'map(.ratio)' "$T/cmp.json")"
"$M" results --db "$DB" --compare-routing --shape E=16 >"$T/cmp.txt" || fail "text compare failed"
grep -q "CAPTURED_US" "$T/cmp.txt" && grep -q "${want_sha:0:12}" "$T/cmp.txt" || { cat "$T/cmp.txt"; fail "text compare"; }
set +e
"$M" results --db "$DB" --compare-routing --sweep 1 >/dev/null 2>"$T/cmpbad.err"
rc=$?
set -e
[ $rc = 2 ] && grep -q "takes no --sweep" "$T/cmpbad.err" || fail "--compare-routing --sweep: rc $rc"
pass "results --compare-routing: $n rows, the skew costs up to $(jq -s 'map(.ratio) | max' "$T/cmp.json")x"

# Hostile files: refused at the command line, exit 2, nothing planned.
npy "$T/float.npy" "<f4" 10
npy "$T/wide.npy" "<i4" 50 32 2
npy "$T/cut.npy" "<i4" 50 16 2 truncate
npy "$T/top4.npy" "<i4" 50 16 4
printf '\x93NUMPY\x02\x00\xff\xff\xff\x7f{}' >"$T/huge.npy"
before=$(sql "SELECT COUNT(*) FROM sweeps")
for c in "float.npy:must be int32 or int64" "wide.npy:is out of range 0..15" "cut.npy:data is" \
         "top4.npy:4 experts per token, the shape has topk=2" "huge.npy:truncated or too large" \
         "missing.npy:No such file"; do
  f=${c%%:*} why=${c#*:}
  set +e
  run_out=$("$M" tune --backend sim --workers 1 --sim-time-scale 0 --shape "$SHAPE" --batch-sizes 16 --db "$DB" \
    --out "$T/bad" --routing "$T/$f" 2>&1)
  rc=$?
  set -e
  [ $rc = 2 ] || fail "$f: exit $rc, expected 2: $run_out"
  echo "$run_out" | grep -qF "$why" || fail "$f: '$run_out' lacks '$why'"
  [ "$(echo "$run_out" | grep -c .)" -le 3 ] || fail "$f: more than a short error: $run_out"
done
[ "$(sql "SELECT COUNT(*) FROM sweeps")" = "$before" ] || fail "a hostile routing file planned a sweep"
pass "hostile routing files refused with one line each"

# A file that is not a .npy is taken for a PyTorch capture (only the triton helper reads those):
# the sim stores every batch size launch_error with the reason, nothing is exported.
head -c 1000 /dev/urandom >"$T/capture.pt"
set +e
"$M" tune --backend sim --workers 1 --sim-time-scale 0 --shape "$SHAPE" --block-m 16 --block-n 64 --block-k 64 \
  --group-m 1 --num-warps 4 --num-stages 3 --batch-sizes 16,64 --db "$T/pt.db" --out "$T/pt" \
  --routing "$T/capture.pt" >"$T/pt.out" 2>&1
rc=$?
set -e
[ $rc = 1 ] || fail "a routing only torch reads on the sim: exit $rc"
"$M" results --db "$T/pt.db" --json >"$T/pt.json"
# the searched config's 2 rows (the ship guard's default, measured beside it, fails alike)
[ "$(jq -s 'map(select(.config_id == 1 and .status == "launch_error" and (.detail | contains("not a .npy file")))) | length' "$T/pt.json")" = 2 ] \
  || fail "expected 2 launch_error rows naming the file: $(cat "$T/pt.json")"
pass "a .pt routing on the sim: launch_error at each batch size, with the reason"
