# tests/gpu/e2e_lib.sh - what the end-to-end scripts share; they source it first.
# Sets strict mode, $bin (the moetune binaries: MT_BIN_DIR, else the folder of moetune on PATH)
# and defines fail (print FAIL and exit 1) and the skips (print why and exit 77).
set -uo pipefail
bin=${MT_BIN_DIR:-$(dirname "$(command -v moetune)")}
fail() { echo "FAIL: $*"; exit 1; }
# need_gpu: skips the test unless nvidia-smi lists a GPU.
need_gpu() { nvidia-smi -L >/dev/null 2>&1 || { echo "skipped: no NVIDIA GPU here"; exit 77; }; }
# need_python PY CODE WHAT: skips the test unless PY runs CODE (the imports it needs); WHAT
# names them in the message.
need_python() { "$1" -c "$2" 2>/dev/null || { echo "skipped: $1 has no $3"; exit 77; }; }
