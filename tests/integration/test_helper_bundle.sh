#!/usr/bin/env bash
# The triton helper ships whole: deploy/bundle.sh and `cmake --install` put moetune_helper.py, the
# helper/ package and moetune_kernel.py beside the binaries, and the helper starts from there with
# no source tree (run from /, PYTHONPATH unset): --probe answers its line, and a measuring start
# that cannot work answers one fatal line naming what is missing, never an import error of its own.
source "$(dirname "$0")/lib.sh"
SRC=${MT_SOURCE_DIR:?}
PY=${MT_TORCH_PYTHON:-python3}
command -v "$PY" >/dev/null || PY=python3

check_dir() { # DIR WHAT: the helper's files are in DIR and it runs from there
  local d=$1 what=$2 f
  for f in moetune_helper.py moetune_kernel.py HELPER.md; do
    [ -f "$d/$f" ] || fail "$what: $f missing"
  done
  for f in "$SRC"/worker/helper/*.py "$SRC"/worker/helper/*.json; do
    [ -e "$f" ] || continue
    cmp -s "$f" "$d/helper/$(basename "$f")" || fail "$what: helper/$(basename "$f") missing or different"
  done
  (cd / && env -u PYTHONPATH "$PY" "$d/moetune_helper.py" --probe --engine vllm) >"$T/probe.out" 2>"$T/probe.err" \
    || { cat "$T/probe.err" >&2; fail "$what: --probe exited non-zero"; }
  [ "$(wc -l <"$T/probe.out")" = 1 ] && grep -q '^{"probe":{"python":' "$T/probe.out" \
    || { cat "$T/probe.out" "$T/probe.err" >&2; fail "$what: --probe did not answer one probe line"; }
  rc=0; (cd / && env -u PYTHONPATH "$PY" "$d/moetune_helper.py" --kernel moetune --compile-workers 0 </dev/null) \
    >"$T/start.out" 2>"$T/start.err" || rc=$?
  [ "$rc" = 1 ] && [ "$(wc -l <"$T/start.out")" = 1 ] && grep -Eq '^\{"fatal":"(torch is not importable|triton is not importable|no CUDA GPU)' "$T/start.out" \
    || { cat "$T/start.out" "$T/start.err" >&2; fail "$what: a start without a GPU is not one fatal line (rc $rc)"; }
  pass "$what: helper files present; --probe and a GPU-less start answer one line each"
}

bash "$SRC/deploy/bundle.sh" "$BIN" "$T/bundle" >"$T/bundle.log" 2>&1 || { cat "$T/bundle.log" >&2; fail "bundle.sh failed"; }
check_dir "$T/bundle/bin" "bundle"
cmake --install "$BIN" --prefix "$T/inst" >"$T/install.log" 2>&1 || { cat "$T/install.log" >&2; fail "cmake --install failed"; }
check_dir "$T/inst/bin" "install"
