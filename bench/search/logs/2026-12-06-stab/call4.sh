#!/usr/bin/env bash
# Run as one command on the H100 that call3b.sh got (its first line: an H100, so it did nothing
# else), with 600 s of device time left: Mixtral-8x7B TP2's whole-space racing sweep, one box of
# 545 s (the first run of a stability pair on an H100; fullspace.sh resumes it from racing.db).
W=/tmp/w; mkdir -p $W; export PATH=$PWD/dist/bin:$PATH LD_LIBRARY_PATH=$PWD/dist/lib; { date; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv,noheader; nproc; } >$W/host.txt; MOETUNE_CUDA_PROFILE=1 timeout -k 5 565 bash bench/search/fullspace.sh $W/full 545 racing --model mixtral-8x7b --tp 2 >$W/fullspace.log 2>&1; echo "rc $?" >>$W/fullspace.log; gzip -f $W/full/racing.db; tar czf $OUT/r.tgz -C $W .
