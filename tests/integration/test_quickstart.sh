#!/usr/bin/env bash
# deploy/quickstart.sh's choice, on CPU: a fake nvidia-smi makes this a GPU host, fake interpreters
# (shell scripts answering the helper's probe, tests/tools/fake_probe.sh) stand in for python3 and for
# a running server's, and the fake helper (tests/tools/fake_helper.py) measures. With torch and
# Triton the quick start tunes with the triton backend and writes the engine's files (the engine of a
# running server, else the one installed), printing the line that points the engine at them; without
# them it falls back to the cuda backend and says no engine reads its files; without a GPU, sim.
source "$(dirname "$0")/lib.sh"
: "${MT_SOURCE_DIR:?}"
[ -x /usr/bin/python3 ] || { echo "SKIP: no /usr/bin/python3 for the fake helper"; exit 77; }
export MOETUNE_HELPER=$MT_SOURCE_DIR/tests/tools/fake_helper.py MOETUNE_BIN=$BIN/moetune
export MOETUNE_PROC_ROOT=$T/proc
unset FAKE_PROBE FAKE_TRITON FAKE_DEVICE FAKE_CONFIG_DIR FAKE_ENV_DIR VIRTUAL_ENV CONDA_PREFIX
mkdir -p "$T/proc" "$T/gpu" "$T/nogpu"
printf '#!/bin/sh\necho "GPU 0: NVIDIA H200 (UUID: GPU-fake)"\n' >"$T/gpu/nvidia-smi"
printf '#!/bin/sh\nexit 0\n' >"$T/nogpu/nvidia-smi"
chmod +x "$T/gpu/nvidia-smi" "$T/nogpu/nvidia-smi"
ARGS=(--shape E=128,N=768,K=2048,topk=8 --batch-sizes 1,16 --block-m 16,64 --block-n 64 --block-k 128 --group-m 1
      --num-warps 4 --num-stages 3)

# fake_python PATH MODE [BODY]: an interpreter whose probe answers in MODE (fake_probe.sh, sourced so
# that it reports PATH); BODY runs first; anything else runs the system python3
fake_python() {
  mkdir -p "$(dirname "$1")"
  cat >"$1" <<EOS
#!/bin/bash
${3:-}
case " \$* " in *" --probe "*) FAKE_PROBE=\${FAKE_PROBE:-$2}; source "$MT_SOURCE_DIR/tests/tools/fake_probe.sh"; exit ;; esac
exec /usr/bin/python3 "\$@"
EOS
  chmod +x "$1"
}
# quick BIN_DIR NAME: runs the quick start with BIN_DIR first on PATH, into $T/NAME; output in $T/out
quick() {
  rc=0
  PATH=$1:$PATH "$MT_SOURCE_DIR/deploy/quickstart.sh" "${ARGS[@]}" --db "$T/$2.db" --out "$T/$2" >"$T/out" 2>&1 || rc=$?
}
has() { grep -qF -- "$1" "$T/out" || { cat "$T/out"; fail "$2: nothing with '$1'"; }; }

# python3 with torch, Triton and SGLang, no server running: SGLang's kernel and files
fake_python "$T/gpu/python3" ok
quick "$T/gpu" a
[ "$rc" = 0 ] || { cat "$T/out"; fail "quick start with SGLang: exit $rc"; }
has "moetune tune: backend triton, kernel sglang, files for SGLang: no running SGLang server found" "with SGLang"
[ -f "$T/a/configs/triton_3_6_0/E=128,N=768,device_name=Fake_H200.json" ] || fail "with SGLang: no SGLang file"
has "run SGLang with SGLANG_MOE_CONFIG_DIR=$T/a" "with SGLang"
pass "GPU host, python3 with torch, Triton and SGLang: SGLang's kernel, SGLang's files, SGLANG_MOE_CONFIG_DIR="

# python3 without torch, a vLLM server running in a venv that has everything: that server decides
fake_python "$T/gpu/python3" no_torch
fake_python "$T/vllm-env/bin/python" ok
mkdir -p "$T/proc/5000"
printf '%s\0' "$T/vllm-env/bin/python" "$T/vllm-env/bin/vllm" serve Qwen/Qwen3.5-35B-A3B >"$T/proc/5000/cmdline"
ln -s /usr/bin/python3.12 "$T/proc/5000/exe"
quick "$T/gpu" b
[ "$rc" = 0 ] || { cat "$T/out"; fail "quick start with a vLLM server: exit $rc"; }
has "moetune tune: backend triton, kernel vllm, files for vLLM: vLLM server pid 5000" "vLLM server"
[ -f "$T/b/E=128,N=768,device_name=NVIDIA_H200.json" ] || fail "vLLM server: no vLLM file"
has "run vLLM with VLLM_TUNED_CONFIG_FOLDER=$T/b" "vLLM server"
rm -rf "${T:?}/proc/5000"
pass "GPU host, a vLLM server running: its interpreter, vLLM's kernel and files, VLLM_TUNED_CONFIG_FOLDER="

# torch and Triton but no engine anywhere: moetune's Triton kernel, still SGLang's files
fake_python "$T/gpu/python3" no_engine
quick "$T/gpu" c
[ "$rc" = 0 ] || { cat "$T/out"; fail "quick start without an engine: exit $rc"; }
has "backend triton, moetune's own Triton kernel (sglang is not installed in python3), files for SGLang" "no engine"
[ -f "$T/c/configs/triton_3_6_0/E=128,N=768,device_name=Fake_H200.json" ] || fail "no engine: no file"
has "run SGLang with SGLANG_MOE_CONFIG_DIR=$T/c" "no engine"
pass "GPU host, torch and Triton without an engine: moetune's Triton kernel, SGLang's layout"

# no torch anywhere: cuda, and the output says no engine reads its files
fake_python "$T/gpu/python3" no_torch
quick "$T/gpu" d
has "moetune tune: backend cuda: no torch in python3" "no torch"
has "the files are for moetune's CUDA kernel, which no engine reads" "no torch"
[ ! -d "$T/d/configs" ] || fail "no torch: engine files written"
pass "GPU host without torch: the cuda backend, said to make files no engine reads"

# no GPU: sim
fake_python "$T/nogpu/python3" ok
quick "$T/nogpu" e
[ "$rc" = 0 ] || { cat "$T/out"; fail "quick start without a GPU: exit $rc"; }
has "quickstart: no GPU here: tuning with the sim backend" "no GPU"
has "config files are in $T/e/sim (simulated numbers, not for engines)" "no GPU"
pass "no GPU: the sim backend"
