#!/usr/bin/env bash
# moetune report: a sim sweep rendered to one self-contained HTML file, then rendered by headless
# Chromium (Debian's chromium) to a PNG and to its DOM: per shape a latency chart with the best and
# the engine-default series, a BLOCK_SIZE_M x BLOCK_SIZE_N heat map and a status chart must be
# there, the PNG must hold the charts' colours, and the numbers must be the database's.
source "$(dirname "$0")/lib.sh"
CHROME=$(command -v chromium || command -v chromium-browser || true)
[ -n "$CHROME" ] || { echo "SKIP: no chromium (deploy/install-deps.sh installs it)"; exit 77; }

start_coordinator
start_workers 2 --sim-time-scale 0 --sim-faults wrong=16x64x64x1x4x3
"$BIN/moetune" submit --control "$CEP" --name report --shape E=64,N=1408,K=2048,topk=6 \
  --shape E=8,N=7168,K=4096,topk=2 --batch-sizes 1,16,64,256,1024 --wait >"$T/submit.out" 2>&1 \
  || { cat "$T/submit.out"; fail "submit failed"; }
"$BIN/moetune" report --db "$DB" --sweep 1 -o "$T/report.html" >"$T/report.out" 2>&1 || { cat "$T/report.out"; fail "report failed"; }
grep -q "2 shapes" "$T/report.out" || fail "report output: $(cat "$T/report.out")"

# self-contained: no external reference of any kind
grep -Eiq '(src|href)=|<script|<link|@import|url\(' "$T/report.html" && fail "the report references something outside itself"
h="$T/report.html"
[ "$(grep -c '<svg class="chart latency"' "$h")" = 2 ] || fail "2 latency charts expected"
[ "$(grep -c '<svg class="chart heatmap"' "$h")" = 2 ] || fail "2 heat maps expected"
[ "$(grep -c '<svg class="chart status"' "$h")" = 2 ] || fail "2 status charts expected"

# the engine default (16x32x64x1x4x3 for M <= E): E=64 has it at M=1,16,64, not at 256, 1024;
# E=8 at M=1 only. Its latency is the stored one.
def=$(sql "SELECT printf('%.2f', r.median_us) FROM results r JOIN shapes s ON s.id=r.shape_id JOIN configs c ON c.id=r.config_id
           WHERE s.e=64 AND r.batch_size=16 AND $(cfg_where 16x32x64x1x4x3) AND r.status='ok'")
[ -n "$def" ] || fail "the sweep did not measure the engine default at M=16"
grep -q "<td class=\"n\">16</td><td>[0-9x]*</td><td class=\"n\">[0-9.]*</td><td class=\"n\">$def</td>" "$h" \
  || fail "E=64 M=16: engine default $def us not in the table"
# the ship guard measures the default at every batch size, the M > E one (64x64x32x8x4x3, outside
# the space) included: no 'not measured' row is left
[ "$(grep -c 'not measured</td>' "$h")" = 0 ] || fail "expected no 'not measured' row, got $(grep -c 'not measured</td>' "$h")"
def=$(sql "SELECT printf('%.2f', r.median_us) FROM results r JOIN shapes s ON s.id=r.shape_id JOIN configs c ON c.id=r.config_id
           WHERE s.e=64 AND r.batch_size=256 AND $(cfg_where 64x64x32x8x4x3) AND r.status='ok'")
[ -n "$def" ] || fail "the guard did not measure the M > E default at M=256"
grep -q "<td class=\"n\">256</td><td>[0-9x]*</td><td class=\"n\">[0-9.]*</td><td class=\"n\">$def</td>" "$h" \
  || fail "E=64 M=256: engine default $def us not in the table"
best=$(sql "SELECT printf('%.2f', min(median_us)) FROM results r JOIN shapes s ON s.id=r.shape_id WHERE s.e=8 AND batch_size=1024 AND status='ok'")
grep -q "<td class=\"n\">1024</td><td>[0-9x]*</td><td class=\"n\">$best</td>" "$h" || fail "E=8 M=1024 best $best not in the table"
wrong=$(sql "SELECT count(*) FROM results r JOIN shapes s ON s.id=r.shape_id WHERE s.e=64 AND status='wrong_result'")
[ "$wrong" -gt 0 ] || fail "no wrong results planted"
grep -q ">wrong_result</text><rect class=\"bar wrong_result\"[^>]*/><text[^>]*>$wrong</text>" "$h" || fail "status chart does not show $wrong wrong results"
# every status has its bar, racing's pruned rows included
pruned=$(sql "SELECT count(*) FROM results r JOIN shapes s ON s.id=r.shape_id WHERE s.e=64 AND status='pruned'")
grep -q ">pruned</text><rect class=\"bar pruned\"[^>]*/><text[^>]*>$pruned</text>" "$h" || fail "status chart does not show $pruned pruned rows"
[ "$(grep -c '<rect class="bar ' "$h")" = 16 ] || fail "expected 8 status bars per chart, got $(grep -c '<rect class="bar ' "$h")"
grep -q "heat map at M=256" "$T/report.out" || fail "heat map not at M=256 (nearest 256)"
pass "report: 3 charts per shape, engine default where measured ($def us) and 'not measured' elsewhere, stored values"

# rendered by Chromium: the DOM has the charts laid out, and the PNG has their colours
flags=(--headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run --disable-extensions
       --user-data-dir="$T/chrome" --window-size=1200,2600)
timeout 120 "$CHROME" "${flags[@]}" --dump-dom "file://$h" >"$T/dom.html" 2>"$T/chrome.log" || { tail "$T/chrome.log"; fail "chromium --dump-dom failed"; }
[ "$(grep -o '<svg class="chart ' "$T/dom.html" | wc -l)" = 6 ] || fail "Chromium's DOM does not hold 6 charts"
# 2 shapes x 5 batch sizes, and the batch sizes the ship guard checked between them
npts=$(sql "SELECT COUNT(*) FROM (SELECT DISTINCT shape_id, batch_size FROM results WHERE status = 'ok')")
[ "$(grep -o '<circle class="point best"' "$T/dom.html" | wc -l)" = "$npts" ] || fail "expected $npts best points"
[ "$(grep -o '<circle class="point default"' "$T/dom.html" | wc -l)" = "$npts" ] \
  || fail "expected $npts engine-default points (the ship guard measures it at every batch size)"
timeout 120 "$CHROME" "${flags[@]}" --screenshot="$T/report.png" "file://$h" >>"$T/chrome.log" 2>&1 || { tail "$T/chrome.log"; fail "chromium --screenshot failed"; }
python3 "$MT_SOURCE_DIR/tests/tools/png_colors.py" "$T/report.png" '#1f77b4' '#ff7f0e' '#1a9850' '#d73027' '#2ca02c' '#d62728' >"$T/colors.txt" \
  || fail "PNG unreadable"
read -r w hgt < <(head -1 "$T/colors.txt")
[ "$w" = 1200 ] && [ "$hgt" = 2600 ] || fail "screenshot is ${w}x${hgt}"
count() { awk -v c="$1" '$1 == c {print $2}' "$T/colors.txt"; }
[ "$(count '#1f77b4')" -gt 300 ] || fail "best series barely drawn: $(count '#1f77b4') px"
[ "$(count '#ff7f0e')" -gt 100 ] || fail "engine-default series barely drawn: $(count '#ff7f0e') px"
[ "$(count '#1a9850')" -gt 2000 ] || fail "heat map's fastest cells not drawn: $(count '#1a9850') px"
[ "$(count '#d73027')" -gt 2000 ] || fail "heat map's slowest cells not drawn: $(count '#d73027') px"
[ "$(count '#2ca02c')" -gt 1000 ] || fail "ok bars not drawn: $(count '#2ca02c') px"
[ "$(count '#d62728')" -gt 0 ] || fail "wrong_result bar not drawn"
pass "Chromium rendered 6 charts; PNG ${w}x${hgt}: $(tail -n +2 "$T/colors.txt" | tr '\n' ' ')"
[ -n "${MT_REPORT_PNG:-}" ] && cp "$T/report.png" "$MT_REPORT_PNG" && cp "$h" "${MT_REPORT_PNG%.png}.html"
exit 0
