# tests/gpu/e2e_lib.sh - what the end-to-end scripts share; they source it first.
# Sets strict mode, $bin (the moetune binaries: MT_BIN_DIR, else the folder of moetune on PATH)
# and defines fail (print FAIL and exit 1), the skips (print why and exit 77) and what the
# triton scripts share around their timed tune.
set -uo pipefail
bin=${MT_BIN_DIR:-$(dirname "$(command -v moetune)")}
fail() { echo "FAIL: $*"; exit 1; }
# need_gpu: skips the test unless nvidia-smi lists a GPU.
need_gpu() { nvidia-smi -L >/dev/null 2>&1 || { echo "skipped: no NVIDIA GPU here"; exit 77; }; }
# need_python PY CODE WHAT: skips the test unless PY runs CODE (the imports it needs); WHAT
# names them in the message.
need_python() { "$1" -c "$2" 2>/dev/null || { echo "skipped: $1 has no $3"; exit 77; }; }
# need_triton OUT PY CODE WHAT: skips the test unless there is a GPU and PY runs CODE (as
# need_python); makes OUT and starts the run on an empty Triton cache under it, so every
# config is compiled in this run.
need_triton() {
  need_gpu
  need_python "$2" "$3" "$4"
  mkdir -p "$1"
  export TRITON_CACHE_DIR="$1/triton-cache"
  rm -rf "$TRITON_CACHE_DIR"
}
# tune_timed OUT ARGS...: runs moetune tune ARGS, its output in OUT/tune.out and OUT/tune.err;
# sets rc to its exit status and tune_s to its wall time in seconds.
tune_timed() {
  local out=$1 start end
  shift
  start=$(date +%s.%N)
  "$bin/moetune" tune "$@" >"$out/tune.out" 2>"$out/tune.err"
  rc=$?
  end=$(date +%s.%N)
  tune_s=$(python3 -c "print(round($end - $start, 1))")
}
# tune_check OUT: after tune_timed, reports its exit and time (also in OUT/tune.time) and the
# end of its stderr; fails the test unless it exited 0.
tune_check() {
  echo "tune exit $rc after $tune_s s" | tee "$1/tune.time"
  tail -n 5 "$1/tune.err"
  [ $rc = 0 ] || fail "tune exited $rc"
}
