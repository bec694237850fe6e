#!/usr/bin/env bash
# Near ties (sim backend): the manifest records, for every exported pick, its runner-up (another
# config's best ok row at that batch size), the margin (runner_up - best) / sqrt(sd_best^2 +
# sd_runner_up^2) recomputed here from the database, and flags the picks under 1 as near ties;
# `results --near-ties` lists exactly those (text and --json), per sweep or for --sweep N.
source "$(dirname "$0")/lib.sh"
M="$BIN/moetune"
q() { sqlite3 -batch -noheader "$T/t.db" "$1"; }
# in the sim, this space's winner at 4096 leads its runner-up by 6 %; at 1, 16 and 256 they tie;
# the decide step is off, so sweep 1's rows are its single measurements the near ties come from
SPACE=(--block-m 16,32,64,128 --block-n 64,128,256 --block-k 64,128 --group-m 1 --num-warps 4,8 --num-stages 3)
"$M" tune --backend sim --workers 2 --sim-time-scale 0 --model qwen3-30b-a3b --tp 1 --batch-sizes 1,16,256,4096 \
  "${SPACE[@]}" --decide-margin 0 --db "$T/t.db" --out "$T/out" >"$T/tune.out" 2>"$T/tune.err" || { tail "$T/tune.err"; fail "tune exited $?"; }
man="$T/out/sim/manifest.json"
rec=$(jq -c '.["E=128,N=768,device_name=NVIDIA_H200.json"]' "$man")
[ "$rec" != null ] || fail "no manifest record"
flagged=""
for bs in 1 16 256 4096; do
  e=$(echo "$rec" | jq -c --arg k $bs '.entries[$k]')
  cfg=$(echo "$e" | jq .config_id); ru=$(echo "$e" | jq .runner_up.config_id)
  [ "$ru" != null ] && [ "$ru" != "$cfg" ] || fail "batch size $bs: runner-up '$ru' is missing or the pick itself"
  # the runner-up is the best ok row of the other configs
  want=$(q "SELECT config_id FROM results WHERE status = 'ok' AND batch_size = $bs AND config_id <> $cfg
            ORDER BY median_us, config_id LIMIT 1")
  [ "$ru" = "$want" ] || fail "batch size $bs: runner-up $ru, the database's is $want"
  m=$(q "SELECT (u.median_us - b.median_us) / sqrt(b.stddev_us * b.stddev_us + u.stddev_us * u.stddev_us)
         FROM results b, results u WHERE b.batch_size = $bs AND u.batch_size = $bs AND b.config_id = $cfg AND u.config_id = $ru")
  got=$(echo "$e" | jq .margin_sd)
  awk -v a="$m" -v b="$got" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 1e-6) }' \
    || fail "batch size $bs: margin_sd $got, recomputed $m"
  tie=$(echo "$e" | jq .near_tie)
  want_tie=$(awk -v a="$m" 'BEGIN { print (a < 1 ? "true" : "false") }')
  [ "$tie" = "$want_tie" ] || fail "batch size $bs: near_tie $tie with margin $m"
  [ "$tie" = true ] && flagged="$flagged $bs"
done
flagged=${flagged# }
[ "$(echo "$rec" | jq -r '.near_ties | map(tostring) | join(" ")')" = "$flagged" ] || fail "near_ties does not list$flagged"
echo "$flagged" | grep -qw 4096 && fail "4096 (a 6 % lead) is flagged a near tie"
[ -n "$flagged" ] || fail "no near tie flagged where the sim's configs tie"
pass "manifest: runner-ups and margins match the database; near ties at $flagged, not at 4096"

listed=$("$M" results --db "$T/t.db" --near-ties --json | jq -r '.batch_size' | tr '\n' ' ')
[ "${listed% }" = "$flagged" ] || fail "results --near-ties --json lists '${listed% }', the manifest '$flagged'"
"$M" results --db "$T/t.db" --near-ties --json | jq -e 'select(.sweep != 1 or .margin_sd >= 1 or .runner_up.config_id == .config_id)' \
  >/dev/null && fail "a listed near tie is not one"
n_text=$("$M" results --db "$T/t.db" --near-ties --sweep 1 | grep -c '^1 ')
[ "$n_text" = "$(echo "$flagged" | wc -w)" ] || fail "the text listing has $n_text rows"
rc=0; "$M" results --db "$T/t.db" --near-ties --sweep 7 >/dev/null 2>"$T/e7" || rc=$?
[ $rc = 1 ] && grep -q "no sweep 7" "$T/e7" || fail "an unknown sweep: exit $rc, $(cat "$T/e7")"
rc=0; "$M" results --db "$T/t.db" --near-ties --best >/dev/null 2>"$T/eb" || rc=$?
[ $rc = 2 ] || fail "--near-ties --best: exit $rc, not a usage error"
pass "results --near-ties lists the manifest's near ties ($flagged), in text and JSON"

# The listing ends with the command that re-measures the near ties side by side: it runs as
# printed (sim options added), as one job of exactly the listed configs at those batch sizes.
hint=$("$M" results --db "$T/t.db" --near-ties --sweep 1 | grep '^sweep 1, to decide by measuring side by side: ')
[ "$(echo "$hint" | wc -l)" = 1 ] || fail "no (or more than one) re-measure line: $hint"
cmd=${hint#*: moetune }
n_cfg=$(echo "$cmd" | sed -n 's/.*--configs \([^ ]*\).*/\1/p' | tr ',' '\n' | wc -l)
sizes=$(echo "$cmd" | sed -n 's/.*--batch-sizes \([^ ]*\).*/\1/p')
[ "$sizes" = "$(echo "$flagged" | tr ' ' ',')" ] || fail "the command re-measures batch sizes $sizes, not $flagged"
read -ra words <<<"${cmd% --out recheck/}"
"$M" "${words[@]}" --workers 2 --sim-time-scale 0 --out "$T/recheck" >"$T/re.out" 2>"$T/re.err" \
  || { tail "$T/re.err"; fail "the printed re-measure exited $?"; }
[ "$(q "SELECT COUNT(*) FROM jobs WHERE sweep_id = 2")" = 1 ] || fail "the re-measure is not one job"
[ "$(q "SELECT COUNT(*) FROM results r WHERE sweep_id = 2 AND status = 'ok' AND $SEARCHED")" = $((n_cfg * $(echo "$flagged" | wc -w))) ] \
  || fail "the re-measure did not measure its $n_cfg configs at every listed batch size"
pass "the printed re-measure ran: $n_cfg configs x batch sizes $sizes in one job"

# The re-measure is side by side in rounds (WIRE_SIDE_BY_SIDE_ROUNDS = 5): the sim draws the same
# samples for a (config, batch size) in every round and in sweep 1 (same seed), so each row that
# sweep 1 measured in full (ok, neither pruned nor settled early) comes back with five times its
# samples and its median.
join="FROM results b JOIN results a ON a.config_id = b.config_id AND a.batch_size = b.batch_size
      WHERE b.sweep_id = 2 AND a.sweep_id = 1 AND a.status = 'ok' AND COALESCE(a.detail, '') NOT LIKE '%settled%'"
rows=$(q "SELECT COUNT(*) $join")
bad=$(q "SELECT COUNT(*) $join AND (b.status <> 'ok' OR b.samples <> 5 * a.samples OR abs(b.median_us - a.median_us) > 1e-9)")
[ "$rows" -ge 6 ] && [ "$bad" = 0 ] || fail "side-by-side rounds: $bad of $rows re-measured rows are not 5 rounds of sweep 1's"
pass "the re-measure ran 5 rounds: each of $rows rows holds 5x sweep 1's samples and its median"

# A config that crashes the worker's child in a side-by-side job: its rows are crashed after its
# first round (no more rounds for it), the others still get their 5 rounds, and the sweep ends.
victim=$(echo "$cmd" | sed -n 's/.*--configs \([^ ,]*\).*/\1/p')
"$M" "${words[@]}" --name crashing --workers 1 --sim-time-scale 0 --sim-faults "crash=$victim" --out "$T/recheck2" \
  >"$T/re2.out" 2>"$T/re2.err" || { tail "$T/re2.err"; fail "the re-measure with a crashing config exited $?"; }
s3=$(q "SELECT id FROM sweeps WHERE name = 'crashing'")
[ -n "$s3" ] && [ "$(q "SELECT state FROM sweeps WHERE id = $s3")" = done ] || fail "the crashing re-measure did not finish"
crashed=$(q "SELECT COUNT(*) FROM results r JOIN configs c ON c.id = r.config_id WHERE r.sweep_id = $s3
             AND r.status = 'crashed' AND $(cfg_where "$victim")")
others=$(q "SELECT COUNT(*) FROM results r JOIN configs c ON c.id = r.config_id JOIN results a ON a.config_id = r.config_id
            AND a.batch_size = r.batch_size AND a.sweep_id = 1 AND a.status = 'ok' AND COALESCE(a.detail, '') NOT LIKE '%settled%'
            WHERE r.sweep_id = $s3 AND NOT ($(cfg_where "$victim")) AND r.status = 'ok' AND r.samples = 5 * a.samples")
want_others=$(q "SELECT COUNT(*) FROM results r JOIN configs c ON c.id = r.config_id JOIN results a ON a.config_id = r.config_id
                 AND a.batch_size = r.batch_size AND a.sweep_id = 1 AND a.status = 'ok' AND COALESCE(a.detail, '') NOT LIKE '%settled%'
                 WHERE r.sweep_id = 2 AND NOT ($(cfg_where "$victim"))")
[ "$crashed" = "$(echo "$flagged" | wc -w)" ] || fail "the crashing config has $crashed crashed rows"
[ "$others" = "$want_others" ] && [ "$others" -gt 0 ] || fail "$others of $want_others other rows have their 5 rounds"
pass "a crashing config is stored crashed at every batch size; the other $others rows still have 5 rounds"
