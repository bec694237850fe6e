#!/usr/bin/env bash
# A stand-in for PYTHON in `moetune doctor --python`: called as
#   fake_probe.sh HELPER --probe --engine E
# it prints the one probe line of worker/HELPER.md, chosen by environment variables:
#   FAKE_PROBE    ok (default) | no_torch | no_device | no_engine | silent | crash
#   FAKE_TRITON   Triton version (default 3.6.0)
#   FAKE_DEVICE   device name (default "NVIDIA H200")
#   FAKE_CONFIG_DIR  the engine's config_dir (default null)
#   FAKE_ENV_DIR     the engine's variable (SGLANG_MOE_CONFIG_DIR / VLLM_TUNED_CONFIG_FOLDER), default null
set -u
engine=sglang
while [ $# -gt 0 ]; do
  case "$1" in --engine) engine=$2; shift 2 ;; *) shift ;; esac
done
q() { if [ -n "${1:-}" ]; then printf '"%s"' "$1"; else printf null; fi; }
var=SGLANG_MOE_CONFIG_DIR
[ "$engine" = vllm ] && var=VLLM_TUNED_CONFIG_FOLDER
mode=${FAKE_PROBE:-ok}
torch=2.11.0 triton=${FAKE_TRITON:-3.6.0} device=${FAKE_DEVICE:-NVIDIA H200} err= ever=0.5.4 eerr=
cdir=${FAKE_CONFIG_DIR:-}
case "$mode" in
  no_torch) torch= triton= device= err="No module named 'torch'" ;;
  no_device) device= err="torch.cuda.is_available() is False" ;;
  no_engine) ever= cdir= eerr="No module named '$engine'" ;;
  silent) echo "Traceback (most recent call last):" >&2; echo "ImportError: something broke" >&2; exit 1 ;;
  crash) kill -SEGV $$ ;;
esac
echo "importing things" >&2
printf '{"probe": {"python": "%s", "python_version": "3.12.3", "torch": %s, "triton": %s, "error": %s, "device": %s, "engine": {"name": "%s", "version": %s, "config_dir": %s, "env": {"%s": %s}, "error": %s}}}\n' \
  "$0" "$(q "$torch")" "$(q "$triton")" "$(q "$err")" "$(q "$device")" "$engine" "$(q "$ever")" "$(q "$cdir")" \
  "$var" "$(q "${FAKE_ENV_DIR:-}")" "$(q "$eerr")"
