#!/usr/bin/env bash
# Where the triton backend's wall goes: `moetune tune --backend triton --kernel moetune --model
# qwen3-30b-a3b --tp 1` over the full default space, as a user runs it, from an empty Triton cache,
# stopped at a wall limit with SIGINT (the CLI stops its workers in order and keeps what was
# committed), then one summary from the logs and the database:
#   configs done        configs with at least one stored result, of those planned
#   results done        results committed / planned (the last progress line)
#   rejected by rule    configs Triton's static rules removed before any compile
#   eta shown           the ETA the last progress line showed; gpu busy: the coordinator's figure
#   elapsed             seconds from the start to the tune's exit
#   busy                the worker's last "triton busy" line (every 30 s and at the helper's close):
#                       each phase's share of the helper's wall (worker/HELPER.md, "phases")
#   bench/triton/busy.sh OUT_DIR [SECONDS]     (default 420 s)
# Env: MT_BIN_DIR (the moetune binaries, as deploy/bundle.sh packs them; default from PATH),
#      MT_TUNE_ARGS (more tune arguments, e.g. --python /opt/venv/bin/python3 or --gpus 0).
set -uo pipefail
out=${1:?usage: bench/triton/busy.sh OUT_DIR [SECONDS]}
limit=${2:-420}
[[ "$limit" =~ ^[0-9]+$ ]] && [ "$limit" -gt 0 ] || {
  echo "busy.sh: SECONDS must be a whole number > 0, not '$limit'" >&2
  exit 2
}
bin=${MT_BIN_DIR:-$(dirname "$(command -v moetune 2>/dev/null || echo ./moetune)")}
[ -x "$bin/moetune" ] || { echo "busy.sh: no moetune in '$bin' (set MT_BIN_DIR or PATH)" >&2; exit 2; }
if [ -d "$bin/../lib" ]; then
  lib=$(cd "$bin/../lib" && pwd)
  export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
[ -e "$out/tune.db" ] && { echo "busy.sh: $out/tune.db exists (the tune would resume it); use a new OUT_DIR" >&2; exit 2; }
export TRITON_CACHE_DIR="$out/triton-cache" PYTHONUNBUFFERED=1

echo "== busy: moetune tune --backend triton --kernel moetune --model qwen3-30b-a3b --tp 1${MT_TUNE_ARGS:+ $MT_TUNE_ARGS} (limit $limit s, cold Triton cache $TRITON_CACHE_DIR)"
start=$(date +%s)
# shellcheck disable=SC2086 # MT_TUNE_ARGS is a list of arguments
"$bin/moetune" tune --backend triton --kernel moetune --model qwen3-30b-a3b --tp 1 --db "$out/tune.db" \
  --out "$out/configs" --keep-temp ${MT_TUNE_ARGS:-} >"$out/tune.out" 2>"$out/tune.err" &
pid=$!
how="finished"
while kill -0 "$pid" 2>/dev/null && [ $(($(date +%s) - start)) -lt "$limit" ]; do sleep 1; done
if kill -0 "$pid" 2>/dev/null; then
  # SIGINT as a Ctrl-C: the CLI stops the workers (SIGTERM, then SIGKILL after 5 s) and the coordinator
  how="stopped at the limit (SIGINT)"
  kill -INT "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
  if kill -0 "$pid" 2>/dev/null; then how="stopped at the limit (SIGTERM: SIGINT left it running 60 s)"; kill -TERM "$pid"; fi
fi
wait "$pid"
rc=$?
elapsed=$(($(date +%s) - start))

run=$(sed -n 's/.*logs of the coordinator and workers are in //p' "$out/tune.err" "$out/tune.out" | tail -n1)
mkdir -p "$out/logs"
# the tune's kept run folder: its logs are copied here, then it goes
case "$run" in /tmp/moetune-tune-*) [ -d "$run" ] && cp "$run"/*.log "$out/logs/" 2>/dev/null && rm -rf "$run" ;; esac
progress=$(grep -h "^sweep [0-9]* [a-z]*: " "$out/tune.out" "$out/tune.err" | tail -n1)
plan=$(grep -h "rejected by the static rules" "$out/tune.out" "$out/tune.err" | head -n1)
field() { sed -n "s/$1/\\1/p" <<<"$2" | head -n1; }
planned_cfg=$(field '.* \([0-9]*\) configs valid.*' "$plan")
rejected=$(field '.* \([0-9]*\) rejected by the static rules.*' "$plan")
results=$(field '.* \([0-9]*\/[0-9]*\) results.*' "$progress")
pct=$(field '.* results (\([0-9.]*%\)).*' "$progress")
eta=$(field '.*, ETA \([^,]*\),.*' "$progress")
busy=$(field '.*, GPU busy \([0-9]*%\),.*' "$progress")
done_cfg=$(python3 - "$out/tune.db" <<'PY' 2>/dev/null
import sqlite3, sys
c = sqlite3.connect("file:%s?mode=ro" % sys.argv[1], uri=True)
print(c.execute("SELECT COUNT(DISTINCT config_id) FROM results").fetchone()[0])
PY
)

echo "tune: $how, exit $rc"
echo "elapsed: $elapsed s"
echo "configs done: ${done_cfg:-?} of ${planned_cfg:-?} planned"
echo "results done: ${results:-?} (${pct:-?})"
echo "rejected by rule: ${rejected:-?}"
echo "eta shown: ${eta:-?}"
echo "gpu busy (coordinator): ${busy:--}"
logs=("$out"/logs/worker-*.log)
[ -e "${logs[0]}" ] || { echo "busy: no worker log (tune.err: $(tail -n1 "$out/tune.err"))"; exit 1; }
for w in "${logs[@]}"; do
  line=$(grep -h "triton busy" "$w" | tail -n1)
  echo "busy ($(basename "$w" .log)): ${line#*triton busy}"
  grep -h "triton helper: [0-9]* configs;\|triton helper stats:" "$w" | tail -n2 | sed 's/^.*\] /  /'
done
echo "progress: $progress"
echo "files: $out/{tune.out,tune.err,tune.db,logs/}"
