#!/bin/bash
# The A/B runs waiting for the next H200 call, in one command (about 8 minutes). Edit as leads change; perf/NOTES.md
# says what each run decides. Usage on the device: OUT=$OUT bash perf/queued_runs.sh
# Each run has its own time limit, so a hang (a prototype's barrier deadlock) costs only its own slot.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
step() { name=$1; limit=$2; shift 2; echo "== $name: $*"; timeout -s INT $limit python perf/"$@" > $OUT/$name.txt 2>&1;
         echo "rc=$?"; grep -E "MISMATCH|check done|Error" $OUT/$name.txt | head -5; }
# 1. d = 256 backward (session 12): the wide dK/dV prototype and backward_hopper's dQ, against the portable kernels
step d256_check 150 gluon_bwd.py --check --head-dims 256 --kernels dkdv dq --dkdv-configs 64,64,2,2 \
     --dq-configs 64,32,2,2 64,32,3,2
step d256_bench 150 gluon_bwd.py --bench --head-dims 256 --kernels dkdv dq --dkdv-configs 64,64,2,2 \
     --dq-configs 64,32,2,2 64,32,3,2 --lengths 1024 4096 16384
# 2. d = 256 forward on forward_hopper: 32-key tiles are what fits beside the Q and O tiles
step d256_fwd 120 gluon_fwd.py --check --bench --head-dims 256 --configs 64,32,2,2,1 64,32,3,2,1
# 3. d = 64 without the mask, where both Gluon kernels lost to the portable ones with session 11's configs
#    (dK/dV (64, 64, 2 or 3, 2), dQ (64, 64 or 128, 2 or 3, 2)): 128-row steps, and dQ's 128-key tiles in 3 stages
step d64_full 120 gluon_bwd.py --bench --head-dims 64 --kernels dkdv dq --lengths 2048 8192 \
     --dkdv-configs 64,64,2,2 128,64,2,2 --dq-configs 64,128,2,2 128,64,2,2 64,128,3,2
for f in $OUT/*.txt; do echo "== $f"; grep -vE "Warning|warn" $f | tail -n 30; done
