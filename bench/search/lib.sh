# Sourced by the search benchmarks (run.sh, stability.sh, noise.sh): where the binaries are, which
# backend measures, and the options a sim dry run adds to `moetune tune`.
# Env: BACKEND (default cuda; sim for a dry run), MT_BIN_DIR (the binaries; default from PATH).
bin=${MT_BIN_DIR:-$(dirname "$(command -v moetune)")}
export MT_BIN_DIR=$bin # stability.py and compare.py read picks with $bin/moetune
backend=${BACKEND:-cuda}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
extra=()
[ "$backend" = sim ] && extra=(--workers 1 --sim-time-scale 0)
# Sourced as `source lib.sh "$@"` after `out` is set: makes $out, and args = the tune options given
# (Qwen3-30B-A3B TP1 when none).
mkdir -p "${out:?}"
# worker_profile ERR_FILE: the cuda worker's last profile line (MOETUNE_CUDA_PROFILE=1) from the run
# folder `tune --keep-temp` named in ERR_FILE; the folder is removed
worker_profile() {
  local dir
  dir=$(sed -n 's/.*logs of the coordinator and workers are in //p' "$1" | tail -n 1)
  [ -n "$dir" ] || return 0
  grep -h 'cuda profile' "$dir"/worker*.log 2>/dev/null | tail -n 1
  rm -rf "$dir"
}
args=("$@")
[ ${#args[@]} -eq 0 ] && args=(--model qwen3-30b-a3b --tp 1)
