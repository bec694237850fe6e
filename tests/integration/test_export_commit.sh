#!/usr/bin/env bash
# An export lands whole or not at all: killed (SIGKILL) at each step of its commit, the folder
# holds the previous files and manifest (plus temp files the next export removes), or the next
# export completes the interrupted one before it reads anything; either way every file and its
# manifest record agree. Temp files of dead exports are removed. Device names that would change
# an engine's file name (',' '=' control characters) or be cut are refused.
source "$(dirname "$0")/lib.sh"
SRC=${MT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
M="$BIN/moetune"

# Sweeps 1 and 2 measure the same 3 shapes at M = 1, 16: config 1 wins in sweep 1, config 2
# (faster still) in sweep 2, so a file's BLOCK_SIZE_M says which sweep wrote it.
sqlite3 "$DB" <"$SRC/db/schema.sql"
sqlite3 "$DB" <<'SQL'
INSERT INTO devices (id, name, uuid) VALUES (1, 'NVIDIA H200', 'SIM-1');
INSERT INTO sweeps (id, name, spec, state, created) VALUES (1, 'a', x'', 'done', 1), (2, 'b', x'', 'done', 2);
INSERT INTO configs VALUES (1, 16, 64, 128, 1, 4, 3), (2, 64, 128, 128, 16, 8, 4);
INSERT INTO shapes (id, e, n, k, topk, dtype) VALUES (1, 8, 768, 2048, 2, 'bf16'), (2, 16, 768, 2048, 2, 'bf16'),
  (3, 32, 768, 2048, 2, 'bf16');
INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, stddev_us, samples,
                     device_id, backend, compiler, kernel_hash, created)
SELECT s, sh, c, bs, 'ok', CASE WHEN (s = 1) = (c = 1) THEN 5.0 ELSE 20.0 END / s + bs, 1.0, 0.1, 20, 1, 'sim', 'sim',
       'kh', 1
FROM (SELECT 1 AS s UNION SELECT 2), (SELECT 1 AS sh UNION SELECT 2 UNION SELECT 3),
     (SELECT 1 AS c UNION SELECT 2), (SELECT 1 AS bs UNION SELECT 16);
SQL

# agree DIR: every config file's picks come from the sweep its manifest record names.
agree() {
  local f name want got n=0
  for f in "$1"/sim/E=*.json; do
    name=$(basename "$f")
    want=$(jq -r --arg k "$name" '.[$k].sweep_ids | map(tostring) | join(",")' "$1/sim/manifest.json")
    got=$(jq -r '.["1"].BLOCK_SIZE_M' "$f")
    case $got in 16) got=1 ;; 64) got=2 ;; esac
    [ "$want" = "$got" ] || fail "$2: $name holds sweep $got's picks, its manifest record names sweep $want"
    n=$((n + 1))
  done
  [ $n = 3 ] || fail "$2: $n files, want 3"
}

B=$T/base
"$M" export --db "$DB" --out "$B" --sweep 1 >/dev/null || fail "export of sweep 1"
agree "$B" "sweep 1"
for step in temps journal rename:1 rename:2 rename:3 rename:4; do
  O=$T/out-${step/:/-}
  cp -a "$B" "$O"
  set +e
  MOETUNE_TEST_EXPORT_DIE=$step "$M" export --db "$DB" --out "$O" --sweep 2 >"$T/die.out" 2>&1
  rc=$?
  set -e
  [ $rc = 137 ] || fail "$step: the export was not killed (exit $rc): $(cat "$T/die.out")"
  if [ -e "$O/.moetune-export.journal" ]; then
    case $step in temps) fail "$step: a journal before the temp files were all written" ;; esac
  else
    case $step in temps) ;; *) fail "$step: no journal after committing to the renames" ;; esac
    diff -r -x '*.tmp.*' "$B" "$O" >/dev/null || fail "$step: killed before committing, yet the folder changed"
    agree "$O" "$step, killed"
  fi
  # the next export into the folder completes or cleans up first, then does its own work
  "$M" export --db "$DB" --out "$O" --sweep 2 >"$T/next.out" 2>&1 || fail "$step: next export: $(cat "$T/next.out")"
  agree "$O" "$step, next export"
  [ -z "$(find "$O" -name '*.tmp.*' -o -name '.moetune-export.journal')" ] ||
    fail "$step: left behind: $(find "$O" -name '*.tmp.*' -o -name '.moetune-export.journal')"
  if [ "$step" = temps ]; then
    [ "$(grep -c ': changed' "$T/next.out")" = 3 ] || fail "$step: the next export did not write the 3 files"
  else
    grep -q "completed an export that was interrupted there first (4 files)" "$T/next.out" ||
      fail "$step: the interrupted export was not completed: $(cat "$T/next.out")"
    [ "$(grep -c ': unchanged' "$T/next.out")" = 3 ] || fail "$step: the completed files were not sweep 2's"
  fi
  pass "killed at $step: the folder agreed, the next export finished it whole"
done

# stale temp files of a dead export (a pid that does not run) are removed; a live one's are kept
O=$T/stale
cp -a "$B" "$O"
dead=999999
while kill -0 $dead 2>/dev/null; do dead=$((dead - 1)); done
echo '{}' >"$O/sim/E=8,N=768,device_name=NVIDIA_H200.json.tmp.$dead"
echo '{}' >"$O/sim/manifest.json.tmp.$dead"
echo 'x' >"$O/.moetune-export.journal.tmp.$dead"
echo '{}' >"$O/sim/E=8,N=768,device_name=NVIDIA_H200.json.tmp.$$"
"$M" export --db "$DB" --out "$O" --sweep 2 >/dev/null || fail "export over stale temp files"
[ "$(find "$O" -name "*.tmp.$dead" | wc -l)" = 0 ] || fail "stale temp files kept: $(find "$O" -name "*.tmp.$dead")"
[ -e "$O/sim/E=8,N=768,device_name=NVIDIA_H200.json.tmp.$$" ] || fail "a live process's temp file was removed"
pass "stale temp files of dead exports removed"

# ---- device names that are not plain data
for name in 'NVIDIA H200,dtype=fp8_w8a8' "$(printf 'NVIDIA\nH200')" "NVIDIA $(printf 'H%.0s' $(seq 1 200))" \
  "$(printf 'NVIDIA H\377')"; do
  sqlite3 "$DB" "UPDATE devices SET name = CAST(x'$(printf '%s' "$name" | xxd -p | tr -d '\n')' AS TEXT) WHERE id = 1"
  set +e
  "$M" export --db "$DB" --out "$T/dev" --sweep 1 >"$T/dev.out" 2>"$T/dev.err"
  rc=$?
  set -e
  [ $rc = 1 ] || fail "device name '$name': exit $rc"
  [ "$(grep -c . "$T/dev.err")" = 1 ] || fail "device name '$name': not one line: $(cat "$T/dev.err")"
  grep -q "device name" "$T/dev.err" || fail "device name '$name': no reason: $(cat "$T/dev.err")"
  [ -z "$(find "$T/dev" -type f 2>/dev/null)" ] || fail "device name '$name': files written: $(find "$T/dev" -type f)"
  pass "device name refused: $(cat "$T/dev.err")"
done
