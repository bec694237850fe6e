#!/usr/bin/env bash
# The lease's third call: racing and halving on the same sample of 40
# Mixtral-8x7B TP2 configs, against the exhaustive run of the call before (B/sample/exhaustive.db.gz,
# the same kind of GPU, an H100, in a later lease): compare.py, then differing picks side by side.
set -u
W=/tmp/wc; rm -rf "$W"; mkdir -p "$W/sample"
export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib
here=$(cd "$(dirname "$0")" && pwd)
{ date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >"$W/host.txt"
m=(--model mixtral-8x7b --tp 2)
gunzip -c "$here/B/sample/exhaustive.db.gz" >"$W/sample/exhaustive.db" || exit 1
STRATEGIES="racing halving" timeout 420 bash bench/search/run.sh "$W/sample" "${m[@]}" --sample 40 \
  >"$W/sample.log" 2>&1; echo "rc $?" >>"$W/sample.log"
for s in racing halving; do
  timeout -k 5 70 bash bench/search/remeasure.sh "$W/sample/rm-$s" "$W/sample/exhaustive.db" \
    "$W/sample/$s.db" "${m[@]}" >"$W/remeasure-$s.log" 2>&1; echo "rc $?" >>"$W/remeasure-$s.log"
done
rm -f "$W/sample/exhaustive.db" "$W"/sample/*.db-* "$W"/sample/rm-*/*.db-* "$W"/sample/*.lock "$W"/sample/rm-*/*.lock
gzip -f "$W"/sample/*.db "$W"/sample/rm-*/*.db 2>/dev/null
tar czf "$OUT/r.tgz" -C "$W" .
