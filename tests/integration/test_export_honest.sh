#!/usr/bin/env bash
# moetune export as real processes: parallel exports into one folder lose nothing, a file
# size limit is an error that leaves no temp file and no "new" line, a mixed fleet's
# half-measured files are refused unless --partial, several sweeps need a choice.
source "$(dirname "$0")/lib.sh"
SRC=${MT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}

# Two done sim sweeps of 15 shapes each (E = 8..120 and 128..240), 2 configs, 2 batch sizes.
sqlite3 "$DB" < "$SRC/db/schema.sql"
sqlite3 "$DB" <<'SQL'
INSERT INTO devices (id, name, uuid) VALUES (1, 'NVIDIA H200', 'SIM-1'), (2, 'NVIDIA H100', 'SIM-2');
INSERT INTO sweeps (id, name, spec, state, created) VALUES (1, 'a', x'', 'done', 1), (2, 'b', x'', 'done', 2);
INSERT INTO configs VALUES (1, 16, 64, 128, 1, 4, 3), (2, 64, 128, 128, 16, 8, 4);
WITH RECURSIVE i(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM i WHERE x < 30)
INSERT INTO shapes (id, e, n, k, topk, dtype) SELECT x, 8 * x, 768, 2048, 8, 'bf16' FROM i;
WITH RECURSIVE i(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM i WHERE x < 30)
INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, stddev_us, samples,
                     device_id, backend, compiler, kernel_hash, created)
SELECT CASE WHEN x <= 15 THEN 1 ELSE 2 END, x, c, bs, 'ok', 10.0 + c + bs, 9.0, 0.1, 20, 1, 'sim', 'sim', 'kh', 1
FROM i, (SELECT 1 AS c UNION SELECT 2), (SELECT 1 AS bs UNION SELECT 16);
SQL

# ---- several sweeps: a choice is needed (exit 1, one line naming them), nothing written
set +e
"$BIN/moetune" export --db "$DB" --out "$T/none" >"$T/none.out" 2>"$T/none.err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "export of a two-sweep database without a choice exited $rc"
grep -q "results of 2 sweeps (1, 2).*--sweeps A,B.*--latest" "$T/none.err" || fail "no choice message: $(cat "$T/none.err")"
[ ! -e "$T/none" ] || fail "a refused export created its folder"
pass "two sweeps without --sweep/--sweeps/--latest refused"
for bad in "--sweeps 1,,2" "--sweeps ,1" "--sweeps 0" "--sweep 1 --latest" "--sweep 1 --sweeps 1,2"; do
  set +e
  # shellcheck disable=SC2086
  "$BIN/moetune" export --db "$DB" --out "$T/bad" $bad >/dev/null 2>"$T/bad.err"
  rc=$?
  set -e
  [ $rc -eq 2 ] || fail "export $bad exited $rc, want 2"
  [ "$(wc -l <"$T/bad.err")" -eq 1 ] || fail "export $bad: not one line: $(cat "$T/bad.err")"
done
[ ! -e "$T/bad" ] || fail "a bad selection created its folder"
"$BIN/moetune" export --db "$DB" --out "$T/latest" --latest >"$T/latest.out"
[ "$(grep -c ': new, 2 entries' "$T/latest.out")" -eq 30 ] || fail "--latest: $(cat "$T/latest.out")"
pass "bad selections exit 2 in one line; --latest exports the 30 files of both sweeps"

# ---- parallel exports into one folder: every manifest record and file kept
before=$(sqlite3 "$DB" "SELECT count(*) FROM exports")
for run in $(seq 1 20); do
  out=$T/par$run
  "$BIN/moetune" export --db "$DB" --out "$out" --sweep 1 >"$T/par1.out" 2>&1 &
  a=$!
  "$BIN/moetune" export --db "$DB" --out "$out" --sweep 2 >"$T/par2.out" 2>&1 &
  b=$!
  wait $a || fail "run $run: export of sweep 1 failed: $(cat "$T/par1.out")"
  wait $b || fail "run $run: export of sweep 2 failed: $(cat "$T/par2.out")"
  n=$(jq 'length' "$out/sim/manifest.json")
  [ "$n" -eq 30 ] || fail "run $run: manifest holds $n of 30 records"
  files=$(ls "$out/sim" | grep -c '^E=.*\.json$')
  [ "$files" -eq 30 ] || fail "run $run: $files of 30 files"
  ! ls "$out/sim" | grep -q '\.tmp' || fail "run $run: a temp file was left"
done
rows=$(( $(sqlite3 "$DB" "SELECT count(*) FROM exports") - before ))
[ "$rows" -eq 600 ] || fail "exports table gained $rows rows, want 20 x 30"
pass "20 runs of two parallel exports: 30 of 30 records and files each time, 600 exports rows"

# ---- a file size limit (1 KiB): an error, no temp file, no line for a file not written.
# Output goes through a pipe: the limit applies to every file the process writes.
xfsz() {  # xfsz OUT ARGS...: runs export under the limit; sets rc, fills $T/xfsz.all
  local out=$1; shift
  set +e
  ( ulimit -f 1; exec "$BIN/moetune" export --db "$DB" --out "$out" "$@" 2>&1 ) | cat >"$T/xfsz.all"
  rc=${PIPESTATUS[0]}
  set -e
}
check_claims() {  # every "FILE: state, N entries" line names a file that holds N entries
  local line f want
  while IFS= read -r line; do
    case $line in moetune*) continue ;; esac
    f=${line%%: *}
    [ -f "$f" ] || fail "reported '$line' but $f does not exist"
    want=$(sed -E 's/.*: (new|changed|unchanged), ([0-9]+) entries.*/\2/' <<<"$line")
    [ "$(jq 'length' "$f")" -eq "$want" ] || fail "reported $want entries for $f"
  done <"$T/xfsz.all"
}
# one config file of 12 entries (over 1 KiB): nothing written, nothing claimed
sqlite3 "$DB" <<'SQL'
INSERT INTO sweeps (id, name, spec, state, created) VALUES (4, 'big', x'', 'done', 4);
INSERT INTO shapes (id, e, n, k, topk, dtype) VALUES (31, 512, 768, 2048, 8, 'bf16');
WITH RECURSIVE b(bs) AS (SELECT 1 UNION ALL SELECT bs * 2 FROM b WHERE bs < 2048)
INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, stddev_us, samples,
                     device_id, backend, compiler, kernel_hash, created)
SELECT 4, 31, 1, bs, 'ok', 10.0 + bs, 9.0, 0.1, 20, 1, 'sim', 'sim', 'kh', 4 FROM b;
SQL
xfsz "$T/big" --sweep 4
[ $rc -eq 1 ] || fail "export of a 12-entry file under a 1 KiB limit exited $rc (want 1): $(cat "$T/xfsz.all")"
grep -q "^moetune export: .*E=512,N=768,device_name=NVIDIA_H200.json: File too large$" "$T/xfsz.all" ||
  fail "no EFBIG message naming the file: $(cat "$T/xfsz.all")"
! grep -q "new" "$T/xfsz.all" || fail "a file not written was reported: $(cat "$T/xfsz.all")"
[ -z "$(find "$T/big" -type f)" ] || fail "files were left: $(find "$T/big" -type f)"
pass "SIGXFSZ on a config file: exit 1, 'File too large' naming it, no file, no temp file, no 'new' line"
# thirty small files fit, their manifest does not: files and manifest land together, so none is
# written (a full disk once left files of the new sweep beside the manifest of the old)
xfsz "$T/xfsz" --sweeps 1,2
[ $rc -eq 1 ] || fail "export under a 1 KiB file size limit exited $rc (want 1): $(cat "$T/xfsz.all")"
grep -q "manifest.json: File too large" "$T/xfsz.all" || fail "no EFBIG message: $(cat "$T/xfsz.all")"
! find "$T/xfsz" -name '*.tmp*' | grep -q . || fail "a temp file was left: $(find "$T/xfsz" -name '*.tmp*')"
[ -z "$(find "$T/xfsz" -type f)" ] || fail "files were written without their manifest: $(find "$T/xfsz" -type f | head -3)"
! grep -q ": new" "$T/xfsz.all" || fail "a file not written was reported: $(cat "$T/xfsz.all")"
pass "SIGXFSZ on the manifest: exit 1, no file, no temp file, nothing claimed"

# ---- a mixed fleet: one sweep, each device measured half of the planned configs
sqlite3 "$DB" <<'SQL'
INSERT INTO sweeps (id, name, spec, state, created) VALUES (3, 'fleet', x'', 'done', 3);
INSERT INTO jobs (id, sweep_id, shape_id, state, created) VALUES (1, 3, 1, 'done', 3), (2, 3, 1, 'done', 3);
INSERT INTO job_configs VALUES (1, 1), (2, 2);
INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, stddev_us, samples,
                     device_id, backend, compiler, kernel_hash, created)
SELECT 3, 1, c, bs, 'ok', 10.0 + bs, 9.0, 0.1, 20, c, 'cuda', 'cuda_13_0', 'kh', 3
FROM (SELECT 1 AS c UNION SELECT 2), (SELECT 1 AS bs UNION SELECT 16);
SQL
set +e
"$BIN/moetune" export --db "$DB" --out "$T/fleet" --sweep 3 >"$T/fleet.out" 2>"$T/fleet.err"
rc=$?
set -e
[ $rc -eq 1 ] || fail "mixed-fleet export exited $rc"
grep -q "measured 1 of the 2 planned configs at batch size 1 on NVIDIA H100.*--partial" "$T/fleet.err" ||
  fail "no coverage refusal: $(cat "$T/fleet.err")"
[ ! -e "$T/fleet" ] || fail "refused mixed-fleet export wrote something"
"$BIN/moetune" export --db "$DB" --out "$T/fleet" --sweep 3 --partial >"$T/fleet.out" 2>"$T/fleet.err"
[ "$(grep -c 'PARTIAL: 1/2 planned configs measured at each of 2 batch sizes' "$T/fleet.out")" -eq 2 ] ||
  fail "partial export does not say its coverage: $(cat "$T/fleet.out")"
cov=$(jq -c '.["E=8,N=768,device_name=NVIDIA_H100.json"].coverage' "$T/fleet/cuda_13_0/manifest.json")
[ "$cov" = '{"complete":false,"sweeps":{"3":{"state":"done","batch_sizes":{"1":{"measured":1,"planned":2},"16":{"measured":1,"planned":2}}}}}' ] ||
  fail "manifest coverage: $cov"
pass "mixed fleet: refused without --partial; with it, 2 files marked 1/2 per batch size in output and manifest"
