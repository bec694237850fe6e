#!/usr/bin/env bash
# Where a cuda sweep's wall time goes: runs `moetune tune` once with MOETUNE_CUDA_PROFILE=1 (the
# cuda worker prints its phases every 30 s and when it stops) from a fresh database, and keeps
# tune's wall time, its last progress line (GPU busy) and the worker's last profile line.
#   bench/search/profile.sh OUT_DIR NAME [tune options: --model/--shape, --tp, space, --warmup ...]
# Env: MT_BIN_DIR (the moetune binaries; default from PATH), WORKER_BIN (another moetune-worker
#      to measure with, e.g. a build before a change: run in the same lease, alternating).
# Writes OUT_DIR/NAME.{db,out,err,profile}; prints the wall, the progress line and the profile.
set -uo pipefail
out=${1:?usage: bench/search/profile.sh OUT_DIR NAME [tune options]}
name=${2:?name}
shift 2
source "$(dirname "$0")/lib.sh" "$@"
run_bin=$bin
if [ -n "${WORKER_BIN:-}" ]; then
  # tune starts the moetune-worker beside itself: a folder with this worker and the others' binaries
  run_bin=$(mktemp -d)
  cp "$bin"/moetune "$bin"/moetune-coordinator "$run_bin"/ && cp "$WORKER_BIN" "$run_bin"/moetune-worker
  cp "$bin"/*.py "$run_bin"/ 2>/dev/null
fi
rm -f "$out/$name.db"*
t0=$(date +%s.%N)
MOETUNE_CUDA_PROFILE=1 "$run_bin/moetune" tune --backend cuda "${args[@]}" --name "profile-$name" --keep-temp \
  --db "$out/$name.db" --out "$out/configs-$name" >"$out/$name.out" 2>"$out/$name.err"
rc=$?
t1=$(date +%s.%N)
worker_profile "$out/$name.err" >"$out/$name.profile"
[ -n "${WORKER_BIN:-}" ] && rm -rf "$run_bin"
python3 -c "print('$name wall', round($t1 - $t0, 1), 's, exit', $rc)"
tr '\r' '\n' <"$out/$name.err" | grep -E 'sweep [0-9]+ ' | tail -n 1
cat "$out/$name.profile"
