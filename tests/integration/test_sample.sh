#!/usr/bin/env bash
# `moetune tune --sample N`: of each shape's valid configs a fixed pseudo-random N is measured,
# at every batch size; tune says how many were left out; the exported file and its manifest say
# the picks come from a sample; the same command again reuses the sweep, the whole space is
# another sweep, and a spec file's "sample" key is the flag. --sample beside --configs is refused.
# submit's reply counts the configs the sample left out.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
RUN=(--backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 2 --batch-sizes 1,64,4096
  --db "$DB" --out "$T/configs")

"$M" tune "${RUN[@]}" --sample 24 >"$T/a.out" 2>"$T/a.err" || { tail "$T/a.err"; fail "tune --sample 24 exited $?"; }
valid=$(sql "SELECT COUNT(DISTINCT jc.config_id) FROM job_configs jc JOIN jobs j ON j.id = jc.job_id WHERE j.sweep_id = 1
             AND j.phase = 1")
[ "$valid" = 24 ] || fail "sweep 1 holds $valid configs, not the 24 sampled"
[ "$(sql "SELECT COUNT(*) FROM results r WHERE sweep_id = 1 AND $SEARCHED")" = 72 ] \
  || fail "sweep 1 has $(sql "SELECT COUNT(*) FROM results r WHERE sweep_id = 1 AND $SEARCHED") results, not 24 configs x 3 batch sizes"
grep -q '24 configs valid (a sample: [0-9]* more valid configs left out by --sample)' "$T/a.err" \
  || fail "tune did not say what the sample left out: $(grep 'configs valid' "$T/a.err")"
f="$T/configs/sim/E=128,N=384,device_name=NVIDIA_H200.json"
grep -q "from a SAMPLE of 24 configs per shape" "$T/a.out" || fail "the export line does not say sample: $(cat "$T/a.out")"
[ "$(jq -r '.["E=128,N=384,device_name=NVIDIA_H200.json"].coverage.sweeps["1"].sample' "$T/configs/sim/manifest.json")" = 24 ] \
  || fail "the manifest's coverage does not give the sample of sweep 1"
pass "--sample 24: 24 configs x 3 batch sizes measured, the file and manifest marked a sample"

"$M" tune "${RUN[@]}" --sample 24 >"$T/b.out" 2>"$T/b.err" || fail "the same tune again exited $?"
grep -q "sweep 1 already measured this" "$T/b.err" || fail "the same sample was not reused: $(tail -n 3 "$T/b.err")"
echo '{"sample": 12}' >"$T/spec.json"
# its own folder: a smaller sample's picks may be slower than the files of the larger one, which
# the export refuses to replace without --force
"$M" tune "${RUN[@]}" --out "$T/configs12" --spec "$T/spec.json" >"$T/c.out" 2>"$T/c.err" || fail "tune --spec with sample 12 exited $?"
[ "$(sql "SELECT COUNT(*) FROM results r WHERE sweep_id = 2 AND $SEARCHED")" = 36 ] \
  || fail "the spec's sample 12 measured $(sql "SELECT COUNT(*) FROM results r WHERE sweep_id = 2 AND $SEARCHED") results, not 36"
grep -q "from a SAMPLE of 12 configs per shape" "$T/c.out" \
  || fail "sweep 2's export (a database of two sweeps) does not say sample 12: $(cat "$T/c.out")"
# a sample of 12 is the first 12 of the same shuffle: all of them were in the sample of 24
[ "$(sql "SELECT COUNT(*) FROM (SELECT DISTINCT config_id FROM results WHERE sweep_id = 2
  EXCEPT SELECT DISTINCT config_id FROM results WHERE sweep_id = 1)")" = 0 ] \
  || fail "the sample of 12 holds configs the sample of 24 does not"
pass "the same sample reused; a spec file's sample 12 is a new sweep inside the sample of 24"

set +e
"$M" tune "${RUN[@]}" --sample 3 --configs 64x128x64x16x4x4 >"$T/d.out" 2>"$T/d.err"
rc=$?
set -e
[ $rc = 2 ] || fail "--sample with --configs exited $rc, not 2 (usage)"
grep -q 'exclude each other' "$T/d.err" || fail "no reason given: $(cat "$T/d.err")"
pass "--sample beside --configs refused (exit 2)"

# submit to a coordinator: its reply counts what the sample left out (Submitted.configs_unsampled)
DB=$T/submit.db
start_coordinator
"$M" submit --control "$CEP" --json --model qwen3-30b-a3b --tp 2 --batch-sizes 1,64 --sample 24 >"$T/sub.json" \
  || fail "submit --sample 24 exited $?"
all=$(jq -r '.configs_valid + .configs_unsampled' "$T/sub.json")
[ "$(jq -r .configs_valid "$T/sub.json")" = 24 ] || fail "submit reply: $(cat "$T/sub.json")"
[ "$all" -gt 24 ] || fail "submit reply counts no configs left out: $(cat "$T/sub.json")"
# the whole space of the same shape has exactly the valid configs the sample was drawn from
"$M" submit --control "$CEP" --json --model qwen3-30b-a3b --tp 2 --batch-sizes 1,64 >"$T/sub2.json" \
  || fail "submit of the whole space exited $?"
[ "$(jq -r '"\(.configs_valid) \(.configs_unsampled)"' "$T/sub2.json")" = "$all 0" ] \
  || fail "the whole space: $(cat "$T/sub2.json"), not $all valid configs and none left out"
pass "submit --json: 24 configs valid and $((all - 24)) left out by the sample, of the space's $all"
