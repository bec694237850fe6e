#!/usr/bin/env bash
# Bad input is data: malformed specs, unknown models, zero or negative sizes, unwritable paths
# each give exit code 2 and a one-line reason; garbage bytes on both coordinator sockets leave it
# serving real workers.
source "$(dirname "$0")/lib.sh"

# expect_usage NAME CMD... : exit code 2, exactly one line on stderr, nothing half-done.
expect_usage() {
  local name=$1; shift
  set +e
  "$@" >"$T/out.txt" 2>"$T/err.txt" </dev/null
  local rc=$?
  set -e
  [ $rc -eq 2 ] || { cat "$T/err.txt"; fail "$name: exit $rc, expected 2"; }
  local lines
  lines=$(grep -c . "$T/err.txt" || true)
  [ "$lines" = 1 ] || { cat "$T/err.txt"; fail "$name: $lines lines on stderr, expected one"; }
  pass "$name -> 2: $(cat "$T/err.txt")"
}

M="$BIN/moetune"

# Every --help lists each option once: a name in two of a command's option tables would reach
# only one of them (submit's reply timeout once hid the sweep's per-config time limit).
for cmd in tune submit status workers cancel results export lookup keygen; do
  "$M" "$cmd" --help >"$T/help.txt" 2>&1 || fail "moetune $cmd --help failed"
  dup=$(grep -oE '^  --[a-z0-9-]+' "$T/help.txt" | sort | uniq -d | tr '\n' ' ')
  [ -z "$dup" ] || fail "moetune $cmd --help lists options twice: $dup"
  [ "$(grep -cE '^  --' "$T/help.txt")" -ge 2 ] || fail "moetune $cmd --help lists no options"
done
for bin in moetune-coordinator moetune-worker; do
  "$BIN/$bin" --help >"$T/help.txt" 2>&1 || fail "$bin --help failed"
  dup=$(grep -oE '^  --[a-z0-9-]+' "$T/help.txt" | sort | uniq -d | tr '\n' ' ')
  [ -z "$dup" ] || fail "$bin --help lists options twice: $dup"
done
pass "every --help lists each option once"
S=(--backend sim --workers 1 --db "$T/t.db" --out "$T/out")
expect_usage "malformed shape"      "$M" tune "${S[@]}" --shape E=128,N=768,K=2048
expect_usage "shape not key=value"  "$M" tune "${S[@]}" --shape garbage
expect_usage "zero experts"         "$M" tune "${S[@]}" --shape E=0,N=768,K=2048,topk=8
expect_usage "K out of range"       "$M" tune "${S[@]}" --shape E=8,N=768,K=2147483648,topk=2
grep -q "K=2147483648 is out of range (1..1048576)" "$T/err.txt" || fail "K=2147483648: not said to be out of range"
expect_usage "K not a number"       "$M" tune "${S[@]}" --shape E=8,N=768,K=4k,topk=2
grep -q "K=4k is not a positive integer" "$T/err.txt" || fail "K=4k: not said to be no integer"
expect_usage "negative size"        "$M" tune "${S[@]}" --shape E=128,N=-768,K=2048,topk=8
expect_usage "topk above E"         "$M" tune "${S[@]}" --shape E=4,N=768,K=2048,topk=8
expect_usage "unknown model"        "$M" tune "${S[@]}" --model no-such-model --tp 1
expect_usage "zero tp"              "$M" tune "${S[@]}" --model qwen3-30b-a3b --tp 0
expect_usage "tp not dividing"      "$M" tune "${S[@]}" --model qwen3-30b-a3b --tp 7
expect_usage "zero batch size"      "$M" tune "${S[@]}" --model qwen3-30b-a3b --tp 1 --batch-sizes 0
expect_usage "negative batch size"  "$M" tune "${S[@]}" --model qwen3-30b-a3b --tp 1 --batch-sizes 1,-4
expect_usage "batch size not a number" "$M" tune "${S[@]}" --model qwen3-30b-a3b --tp 1 --batch-sizes 1,x
expect_usage "unwritable db path"   "$M" tune --backend sim --workers 1 --db /nonexistent-dir/sub/t.db --out "$T/out" --model qwen3-30b-a3b --tp 1
echo '{"hidden_size": 2048, "num_experts": 128' >"$T/broken.json"
expect_usage "broken model config"  "$M" tune "${S[@]}" --model-config "$T/broken.json" --tp 1
echo '{"hidden_size": 2048}' >"$T/partial.json"
expect_usage "model config missing fields" "$M" tune "${S[@]}" --model-config "$T/partial.json" --tp 1
expect_usage "missing model config" "$M" tune "${S[@]}" --model-config "$T/none.json" --tp 1
expect_usage "no shape at all"      "$M" tune "${S[@]}"
# a shape none of whose configs the sim (moetune's CUDA kernel's rules) can run, beside one that has
# some: refused, naming it, not a sweep that ends done without its config file
expect_usage "a shape with no config" "$M" tune "${S[@]}" --shape E=32,N=2880,K=2880,topk=4 --shape E=32,N=1440,K=2880,topk=4
grep -q "shape E=32,N=1440,K=2880,topk=4: no config of the space passes the static rules" "$T/err.txt" \
  || fail "the refusal does not name the shape: $(cat "$T/err.txt")"
expect_usage "unknown option"       "$M" tune --no-such-flag
expect_usage "unknown command"      "$M" frobnicate
expect_usage "coordinator unwritable db" "$BIN/moetune-coordinator" --db /nonexistent-dir/sub/t.db --bind "tcp://127.0.0.1:$(free_port)" --control "tcp://127.0.0.1:$(free_port)"
expect_usage "worker unknown backend" "$BIN/moetune-worker" --connect "$WEP" --backend nope
[ ! -e "$T/t.db" ] || [ "$(sqlite3 "$T/t.db" 'SELECT count(*) FROM sweeps' 2>/dev/null || echo 0)" = 0 ] \
  || fail "a refused tune stored a sweep"

# Garbage on both sockets, then real work.
start_coordinator --heartbeat-ms 200
"$BIN/mt_garbage" "$WEP" 3000 1 >/dev/null || fail "garbage sender failed (workers socket)"
"$BIN/mt_garbage" "$CEP" 3000 2 >/dev/null || fail "garbage sender failed (control socket)"
# raw non-ZeroMQ bytes on the TCP ports
head -c 65536 /dev/urandom >"/dev/tcp/127.0.0.1/$WPORT" 2>/dev/null || true
head -c 65536 /dev/urandom >"/dev/tcp/127.0.0.1/$CPORT" 2>/dev/null || true
kill -0 "$COORD_PID" || fail "coordinator died on garbage"
start_workers 2 --sim-time-scale 0
"$M" submit --control "$CEP" --name after-garbage --shape E=128,N=768,K=2048,topk=8 --batch-sizes 1,16,256 \
  >"$T/submit.out" 2>&1 || { cat "$T/submit.out"; fail "submit after garbage failed"; }
state=$(wait_sweep 1 120)
[ "$state" = done ] || fail "sweep after garbage: $state"
rows=$(check_rows 1)
kill -0 "$COORD_PID" || fail "coordinator died"
bad=$("$M" status --control "$CEP" --json | jq -r '.counters.bad_messages')
[ "$bad" -ge 3000 ] || fail "coordinator counted $bad bad messages, expected >= 3000"
pass "coordinator survived garbage ($bad bad messages counted) and stored $rows rows"
