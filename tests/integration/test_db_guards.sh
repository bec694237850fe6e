#!/usr/bin/env bash
# The database file is guarded: one coordinator per database FILE (a symlink or a hard link from
# another folder meets the same lock); a non-empty SQLite file of another program given as --db
# is refused and left byte for byte as it was; report -o and export never write over the database,
# its -wal, -shm or lock file; export on a database it cannot record in writes no file.
source "$(dirname "$0")/lib.sh"
SRC=${MT_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
M="$BIN/moetune"

# refused WHAT WANT_RC PATTERN CMD... : exits with WANT_RC within 10 s, one line on stderr
# matching PATTERN.
refused() {
  local what=$1 want=$2 pat=$3; shift 3
  set +e
  timeout 10 "$@" >"$T/out.txt" 2>"$T/err.txt" </dev/null
  local rc=$?
  set -e
  [ $rc != 124 ] || fail "$what: still running after 10 s"
  [ $rc = "$want" ] || { cat "$T/err.txt"; fail "$what: exit $rc, expected $want"; }
  [ "$(grep -c . "$T/err.txt")" = 1 ] || { cat "$T/err.txt"; fail "$what: not one line on stderr"; }
  grep -qE "$pat" "$T/err.txt" || { cat "$T/err.txt"; fail "$what: the reason is not given"; }
  pass "$what -> $rc: $(cat "$T/err.txt")"
}
coord_at() {  # coord_at DB: a second coordinator on fresh ports
  echo "$BIN/moetune-coordinator" --db "$1" --bind "tcp://127.0.0.1:$(free_port)" --control "tcp://127.0.0.1:$(free_port)"
}

# ---- one writer per database file
start_coordinator --heartbeat-ms 200
mkdir -p "$T/a" "$T/b"
ln -s "$DB" "$T/a/link.db"
ln "$DB" "$T/b/hard.db"
# shellcheck disable=SC2046
refused "a second coordinator through a symlink" 1 "in use by pid $COORD_PID" $(coord_at "$T/a/link.db")
# shellcheck disable=SC2046
refused "a second coordinator through a hard link" 1 "in use by pid $COORD_PID" $(coord_at "$T/b/hard.db")
# shellcheck disable=SC2046
refused "a second coordinator on the same path" 1 "in use by pid $COORD_PID" $(coord_at "$DB")
kill_quiet "$COORD_PID"
COORD_PID=

# ---- a foreign SQLite file
F=$T/foreign.db
sqlite3 "$F" "CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('mine');"
before=$(sha256sum <"$F")
# shellcheck disable=SC2046
refused "coordinator on another program's database" 2 "not a moetune database" $(coord_at "$F")
[ "$(sha256sum <"$F")" = "$before" ] || fail "the foreign database was changed"
[ ! -e "$F-wal" ] && [ "$(sqlite3 "$F" "PRAGMA journal_mode")" = delete ] || fail "the foreign database was switched to WAL"
[ "$(sqlite3 "$F" "SELECT count(*) FROM sqlite_master")" = 1 ] || fail "tables were added to the foreign database"
sqlite3 "$T/appid.db" "PRAGMA application_id = 42"
before=$(sha256sum <"$T/appid.db")
# shellcheck disable=SC2046
refused "coordinator on a table-less database with another program's application_id" 2 "not a moetune database" \
  $(coord_at "$T/appid.db")
[ "$(sha256sum <"$T/appid.db")" = "$before" ] || fail "the application_id database was changed"
pass "another program's database: refused, byte for byte as it was"

# ---- no command writes over the database it reads
R=$T/r.db
sqlite3 "$R" <"$SRC/db/schema.sql"
sqlite3 "$R" <<'SQL'
PRAGMA journal_mode = WAL;
INSERT INTO devices (id, name, uuid) VALUES (1, 'NVIDIA H200', 'SIM-1');
INSERT INTO sweeps (id, name, spec, state, created) VALUES (1, 'a', x'', 'done', 1);
INSERT INTO configs VALUES (1, 16, 64, 128, 1, 4, 3);
INSERT INTO shapes (id, e, n, k, topk, dtype) VALUES (1, 8, 768, 2048, 2, 'bf16');
INSERT INTO results (sweep_id, shape_id, config_id, batch_size, status, median_us, min_us, stddev_us, samples,
                     device_id, backend, compiler, kernel_hash, created)
VALUES (1, 1, 1, 1, 'ok', 10.0, 9.0, 0.1, 20, 1, 'sim', 'sim', 'kh', 1);
SQL
: >"$R.lock"
ln -s "$R" "$T/a/r-link.html"
ln "$R" "$T/b/r-hard.html"
before=$(sha256sum <"$R")
for o in "$R" "$R-wal" "$R-shm" "$R.lock" "$T/a/r-link.html" "$T/b/r-hard.html" "$T/a/../r.db"; do
  refused "report -o $o" 2 "refusing to write over it" "$M" report --db "$R" --sweep 1 -o "$o"
done
[ "$(sha256sum <"$R")" = "$before" ] && [ "$(sqlite3 "$R" "SELECT count(*) FROM results")" = 1 ] ||
  fail "report wrote over its database"
"$M" report --db "$R" --sweep 1 -o "$T/report.html" >/dev/null || fail "report to a plain file failed"
mkdir -p "$T/e/sim"
cp "$R" "$T/e/sim/manifest.json"
refused "export whose manifest is the database" 1 "refusing to write over it|is not a manifest" \
  "$M" export --db "$T/e/sim/manifest.json" --out "$T/e"
! ls "$T/e/sim" | grep -qE '^E=|\.tmp\.' || fail "export wrote beside its database: $(ls "$T/e/sim")"
pass "report -o and export refuse every path of the database"

# ---- export on a database it cannot record in: no file written
command -v setpriv >/dev/null || { echo "setpriv not found"; exit 77; }
mkdir -p "$T/ro" "$T/rout"
cp "$R" "$T/ro/r.db"
sqlite3 "$T/ro/r.db" "PRAGMA journal_mode = DELETE" >/dev/null
chmod 444 "$T/ro/r.db"
chmod 555 "$T/ro"
chmod 777 "$T/rout"
chmod 755 "$T"
as_user=()
[ "$(id -u)" = 0 ] && as_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
refused "export on a read-only database" 1 "read-only" "${as_user[@]}" "$M" export --db "$T/ro/r.db" --out "$T/rout/x"
[ ! -e "$T/rout/x" ] || fail "export on a read-only database wrote: $(find "$T/rout/x")"
chmod 755 "$T/ro"
pass "export on a read-only database: refused before any file is written"
