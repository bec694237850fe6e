#!/usr/bin/env bash
# The interpreter that serves: `moetune doctor` and `moetune tune` without --python find a running
# SGLang or vLLM server in a /proc-like tree (MOETUNE_PROC_ROOT) and use its interpreter, saying which
# process; with none running they say so and list the interpreters tried. tune without --backend
# takes triton where that interpreter has torch and Triton (the engine's kernel when the engine is
# there, moetune's own otherwise) and cuda where it has not. Fake interpreters stand in for python:
# shell scripts answering the probe as tests/tools/fake_probe.sh does and running the fake helper
# (tests/tools/fake_helper.py) with the system python3 for everything else.
source "$(dirname "$0")/lib.sh"
: "${MT_SOURCE_DIR:?}"
M="$BIN/moetune"
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3 for the fake helper"; exit 77; }
export MOETUNE_HELPER=$MT_SOURCE_DIR/tests/tools/fake_helper.py
unset FAKE_PROBE FAKE_TRITON FAKE_DEVICE FAKE_CONFIG_DIR FAKE_ENV_DIR VIRTUAL_ENV CONDA_PREFIX

# fake_python PATH [FAKE_PROBE mode]: an interpreter whose probe answers in that mode (ok: torch,
# Triton and the engine) as PATH (fake_probe.sh is sourced, so its $0 is PATH), and which logs every
# run to $T/ran
fake_python() {
  mkdir -p "$(dirname "$1")"
  cat >"$1" <<EOF
#!/bin/bash
echo "\$0 \$*" >>"$T/ran"
case " \$* " in *" --probe "*) FAKE_PROBE=\${FAKE_PROBE:-${2:-ok}}; source "$MT_SOURCE_DIR/tests/tools/fake_probe.sh"; exit ;; esac
exec /usr/bin/python3 "\$@"
EOF
  chmod +x "$1"
}
# proc ROOT PID EXE ARGV...: one process of a /proc-like tree
proc() {
  local root=$1 pid=$2 exe=$3; shift 3
  mkdir -p "$root/$pid"
  printf '%s\0' "$@" >"$root/$pid/cmdline"
  ln -s "$exe" "$root/$pid/exe"
}
has() { grep -qxF -- "$1" "$T/out" || { cat "$T/out"; fail "$2: no line '$1'"; }; }
hasin() { grep -qF -- "$1" "$T/out" || { cat "$T/out"; fail "$2: nothing with '$1'"; }; }

SERVE=$T/root/ml-env/bin/python3
fake_python "$SERVE"
mkdir -p "$T/sg"
P=$T/proc
proc "$P" 1 /usr/lib/systemd/systemd /sbin/init
proc "$P" 812 /usr/bin/python3.12 /usr/bin/python3 -m http.server
proc "$P" 4242 /usr/bin/python3.12 "$SERVE" -m sglang.launch_server --model-path Qwen/Qwen3.5-122B-A10B --tp 4
proc "$P" 4250 /usr/bin/python3.12 "$SERVE" -m sglang.launch_server --model-path Qwen/Qwen3.5-122B-A10B --tp 4
CMD="$SERVE -m sglang.launch_server --model-path Qwen/Qwen3.5-122B-A10B --tp 4"

# ---- doctor finds the server and runs its interpreter (the system python3 is never asked)
: >"$T/ran"
rc=0; FAKE_CONFIG_DIR=$T/sg MOETUNE_PROC_ROOT=$P "$M" doctor --engine sglang --model qwen3.5-122b-a10b --tp 4 \
  >"$T/out" 2>&1 || rc=$?
[ "$rc" = 3 ] || { cat "$T/out"; fail "doctor with a server: exit $rc, expected 3 (file missing)"; }
has "serving:       SGLang server pid 4242 ($CMD): its interpreter $SERVE (2 such processes, one interpreter)" "doctor server"
hasin "expected file: $T/sg/configs/triton_3_6_0/E=256,N=256,device_name=NVIDIA_H200.json" "doctor server"
hasin "--python $SERVE --model qwen3.5-122b-a10b --tp 4" "doctor server"
[ "$(grep -c -- "--probe --engine sglang$" "$T/ran")" = 1 ] || { cat "$T/ran"; fail "the server's interpreter was not probed once"; }
grep -qv "^$SERVE " "$T/ran" && { cat "$T/ran"; fail "an interpreter other than the server's was run"; }
FAKE_CONFIG_DIR=$T/sg MOETUNE_PROC_ROOT=$P "$M" doctor --engine sglang --model qwen3.5-122b-a10b --tp 4 --json \
  >"$T/out" 2>&1 || true
[ "$(jq -r '.serving.pid, .serving.command' "$T/out" | paste -sd'|')" = "4242|$CMD" ] || { cat "$T/out"; fail "doctor --json serving"; }
pass "doctor: a running SGLang server's interpreter is used and named (pid, command)"

# ---- no server of that engine: the candidates, each named with what it has or lacks
mkdir -p "$T/bin"
fake_python "$T/bin/python3" no_torch
fake_python "$T/venv/bin/python3" no_engine
rc=0; PATH=$T/bin:$PATH VIRTUAL_ENV=$T/venv MOETUNE_PROC_ROOT=$P "$M" doctor --engine vllm --model qwen3.5-35b-a3b --tp 2 \
  >"$T/out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$T/out"; fail "doctor without a server: exit $rc, expected 1"; }
has "serving:       no running vLLM server found; interpreters tried: $T/venv/bin/python3 (torch 2.11.0, Triton 3.6.0, no vllm), python3 ($T/bin/python3: no torch)" "doctor none"
hasin "moetune doctor: vLLM is not importable in" "doctor none"
pass "doctor: no vLLM server running, says so and lists the interpreters tried"

# a vllm serve script run by its venv's python
VSERVE=$T/vllm-env/bin/python
fake_python "$VSERVE"
proc "$P" 5000 /usr/bin/python3.11 "$VSERVE" "$T/vllm-env/bin/vllm" serve Qwen/Qwen3.5-35B-A3B --tensor-parallel-size 2
mkdir -p "$T/vl"
rc=0; FAKE_CONFIG_DIR=$T/vl MOETUNE_PROC_ROOT=$P "$M" doctor --engine vllm --model qwen3.5-35b-a3b --tp 2 >"$T/out" 2>&1 || rc=$?
[ "$rc" = 3 ] || { cat "$T/out"; fail "doctor vllm serve: exit $rc"; }
has "serving:       vLLM server pid 5000 ($VSERVE $T/vllm-env/bin/vllm serve Qwen/Qwen3.5-35B-A3B --tensor-parallel-size 2): its interpreter $VSERVE" "doctor vllm"
hasin "expected file: $T/vl/E=256,N=256,device_name=NVIDIA_H200.json" "doctor vllm"
pass "doctor: vllm serve found through its script; the SGLang server is not taken for vLLM"

# ---- the real /proc: a server started from a venv (bin/python3 a symlink to the system python3)
mkdir -p "$T/realenv/bin" "$T/pkg/sglang"
ln -s /usr/bin/python3 "$T/realenv/bin/python3"
: >"$T/pkg/sglang/__init__.py"
echo "import time; time.sleep(120)" >"$T/pkg/sglang/launch_server.py"
(cd "$T" && PYTHONPATH=$T/pkg exec "$T/realenv/bin/python3" -m sglang.launch_server --port 0) &
REAL=$!
PIDS+=("$REAL")
for _ in $(seq 1 50); do tr '\0' ' ' <"/proc/$REAL/cmdline" 2>/dev/null | grep -q launch_server && break; sleep 0.1; done
rc=0; MOETUNE_HELPER=$MT_SOURCE_DIR/worker/moetune_helper.py "$M" doctor --engine sglang --model qwen3.5-35b-a3b >"$T/out" 2>&1 || rc=$?
hasin "serving:       SGLang server pid $REAL ($T/realenv/bin/python3 -m sglang.launch_server --port 0): its interpreter $T/realenv/bin/python3" "real /proc"
grep -v '^serving:' "$T/out" | grep -qF "$T/realenv/bin/python3" || { cat "$T/out"; fail "real /proc: the venv path was not probed"; }
kill_quiet "$REAL"
pass "real /proc: a server run by a venv's python3 (a symlink) is found; the venv path, not the system one, is probed"

# ---- tune --kernel sglang without --python: the server's interpreter runs the helper
SPACE=(--block-m 16,64 --block-n 64 --block-k 128 --group-m 1 --num-warps 4 --num-stages 3 --batch-sizes 1,16
       --shape E=128,N=768,K=2048,topk=8 --gpus 0)
: >"$T/ran"
rc=0; (cd "$T" && MOETUNE_PROC_ROOT=$P "$M" tune --backend triton --kernel sglang "${SPACE[@]}" --db "$T/a.db" --out out-a) \
  >"$T/out" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$T/out"; fail "tune --kernel sglang with a server: exit $rc"; }
has "moetune tune: backend triton, kernel sglang, files for SGLang: SGLang server pid 4242 ($CMD): its interpreter $SERVE (2 such processes, one interpreter)" "tune server"
grep -q "^$SERVE $MOETUNE_HELPER .*--kernel sglang" "$T/ran" || { cat "$T/ran"; fail "the worker's helper did not run in the server's interpreter"; }
[ -f "$T/out-a/configs/triton_3_6_0/E=128,N=768,device_name=Fake_H200.json" ] || fail "no SGLang file"
has "config files are in out-a/configs/triton_3_6_0" "tune where"
has "run SGLang with SGLANG_MOE_CONFIG_DIR=$T/out-a" "tune where"
grep -q "<compiler>" "$T/out" && fail "a literal <compiler> in tune's output"
pass "tune --kernel sglang: the server's interpreter measures; the real folder and SGLANG_MOE_CONFIG_DIR= are printed"

# --kernel vllm where no interpreter has vLLM: one line, nothing started
mkdir -p "$T/empty-proc"
rc=0; PATH=$T/bin:$PATH VIRTUAL_ENV=$T/venv MOETUNE_PROC_ROOT=$T/empty-proc "$M" tune --backend triton --kernel vllm \
  "${SPACE[@]}" --db "$T/b.db" --out "$T/out-b" >"$T/out" 2>&1 || rc=$?
[ "$rc" = 1 ] || { cat "$T/out"; fail "tune --kernel vllm without vllm: exit $rc, expected 1"; }
[ "$(wc -l <"$T/out")" = 1 ] || { cat "$T/out"; fail "more than one line"; }
hasin "--kernel vllm: vllm is not importable in $T/venv/bin/python3 (no running vLLM server found; interpreters tried:" "tune no vllm"
[ ! -e "$T/b.db" ] || fail "tune --kernel vllm without vllm started a sweep"
pass "tune --kernel vllm with no interpreter that has vLLM: refused in one line"

# ---- tune without --backend: triton where the interpreter has torch and Triton, else cuda
mkdir -p "$T/good"
fake_python "$T/good/python3" no_engine
rc=0; (cd "$T" && PATH=$T/good:$PATH MOETUNE_PROC_ROOT=$T/empty-proc "$M" tune "${SPACE[@]}" --db "$T/c.db" --out out-c) \
  >"$T/out" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$T/out"; fail "tune without --backend (torch and Triton, no engine): exit $rc"; }
hasin "moetune tune: backend triton, moetune's own Triton kernel (sglang is not installed in python3), files for SGLang" "default triton"
[ -f "$T/out-c/configs/triton_3_6_0/E=128,N=768,device_name=Fake_H200.json" ] || fail "default triton: no SGLang file"
has "run SGLang with SGLANG_MOE_CONFIG_DIR=$T/out-c" "default triton"
rc=0; (cd "$T" && PATH=$T/bin:$PATH MOETUNE_PROC_ROOT=$T/empty-proc "$M" tune "${SPACE[@]}" --db "$T/d.db" --out out-d) \
  >"$T/out" 2>&1 || rc=$?
hasin "moetune tune: backend cuda: no torch in python3" "default cuda"
hasin "the files are for moetune's CUDA kernel, which no engine reads" "default cuda"
[ ! -d "$T/out-d/configs" ] || fail "default cuda wrote engine files"
pass "tune without --backend: triton with torch and Triton (moetune's kernel, SGLang's files), cuda without"

# ---- the model of the story: Qwen3.5-122B-A10B's config.json (text_config) at TP 4 is E=256,N=256;
# an AWQ checkpoint's config is refused in one line, not tuned as bf16
FX=$MT_SOURCE_DIR/tests/fixtures/models
SIM=(--backend sim --workers 1 --batch-sizes 1,16 --block-m 16 --block-n 64 --block-k 128 --group-m 1 --num-warps 4 --num-stages 3)
rc=0; "$M" tune "${SIM[@]}" --model-config "$FX/qwen3.5-122b-a10b/config.json" --tp 4 --db "$T/m.db" --out "$T/out-m" \
  >"$T/out" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$T/out"; fail "tune --model-config Qwen3.5-122B-A10B: exit $rc"; }
[ -f "$T/out-m/sim/E=256,N=256,device_name=NVIDIA_H200.json" ] || { ls -R "$T/out-m"; fail "no E=256,N=256 file"; }
rc=0; "$M" tune "${SIM[@]}" --model-config "$FX/qwen3.5-122b-a10b-awq/config.json" --tp 4 --db "$T/m2.db" --out "$T/out-m2" \
  >"$T/out" 2>&1 || rc=$?
[ "$rc" = 2 ] || { cat "$T/out"; fail "AWQ config: exit $rc, expected 2"; }
[ "$(wc -l <"$T/out")" = 1 ] || { cat "$T/out"; fail "AWQ config: more than one line"; }
hasin "quantization_config.quant_method awq is not one moetune tunes" "AWQ"
[ ! -e "$T/m2.db" ] || fail "AWQ config: a sweep was started"
rc=0; "$M" tune "${SIM[@]}" --model-config "$FX/qwen3.5-122b-a10b-awq/config.json" --tp 4 --dtype bf16 --db "$T/m3.db" \
  --out "$T/out-m3" >"$T/out" 2>&1 || rc=$?
[ "$rc" = 0 ] || { cat "$T/out"; fail "AWQ config with --dtype bf16: exit $rc"; }
pass "--model-config: Qwen3.5-122B-A10B at TP 4 is E=256,N=256; quant_method awq refused in one line unless --dtype"
