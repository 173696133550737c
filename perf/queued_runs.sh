#!/bin/bash
# The A/B runs waiting for the next H200 call. Edit as leads change; perf/NOTES.md says what each run decides.
# Usage on the device: OUT=$OUT bash perf/queued_runs.sh [run ...]   (all runs, in this order, when none is named;
# together they can take longer than one 10-minute device call, so name a part of them per call)
# Each run has its own time limit, so a hang (a prototype's barrier deadlock) costs only its own slot.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
RUNS=${*:-pipelined d256_check d256_bench d256_fwd d256_fwd_o_in_q d64_full launch_cache}
step() {
  name=$1; limit=$2; shift 2
  [[ " $RUNS " == *" $name "* ]] || return 0
  echo "== $name: $*"; t0=$(date +%s)
  timeout -s INT $limit python perf/"$@" > $OUT/$name.txt 2>&1
  echo "rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "MISMATCH|check done|Error" $OUT/$name.txt | head -5
}
# 1. d = 128 and 64: the dK/dV prototype with the row statistics prefetched (field 5 = 0) and the products
#    overlapped across steps (1), against backward_hopper's kernel (4 fields)
step pipelined 200 gluon_bwd.py --check --bench --head-dims 128 64 --kernels dkdv --lengths 2048 8192 16384 \
     --dkdv-configs 64,64,2,2 64,64,2,2,0 64,64,2,2,1
# 2. d = 256 backward: the wide dK/dV prototype and backward_hopper's dQ, against the portable kernels
step d256_check 150 gluon_bwd.py --check --head-dims 256 --kernels dkdv dq --dkdv-configs 64,64,2,2 \
     --dq-configs 64,32,2,2 64,32,3,2
step d256_bench 150 gluon_bwd.py --bench --head-dims 256 --kernels dkdv dq --dkdv-configs 64,64,2,2 \
     --dq-configs 64,32,2,2 64,32,3,2 --lengths 1024 4096 16384
# 3. d = 256 forward on forward_hopper (32-key tiles are what fits beside its Q and O tiles), and on the prototype
#    that stages O in Q's shared memory, which leaves room for 64-key tiles
step d256_fwd 120 gluon_fwd.py --check --bench --head-dims 256 --configs 64,32,2,2,1 64,32,3,2,1
step d256_fwd_o_in_q 120 gluon_fwd.py --check --bench --head-dims 256 --configs 64,64,2,2,1 64,32,3,2,1 --o-in-q
# 4. d = 64 without the mask, where both Gluon kernels lost to the portable ones with session 11's configs
#    (dK/dV (64, 64, 2 or 3, 2), dQ (64, 64 or 128, 2 or 3, 2)): 128-row steps, and dQ's 128-key tiles in 3 stages
step d64_full 120 gluon_bwd.py --bench --head-dims 64 --kernels dkdv dq --lengths 2048 8192 \
     --dkdv-configs 64,64,2,2 128,64,2,2 --dq-configs 64,128,2,2 128,64,2,2 64,128,3,2
# 5. the Gluon kernels' launches through a launch cache: bit-identical outputs, and the host time per call
step launch_cache 150 gluon_launch_cache.py --check --bench
for name in $RUNS; do [ -f $OUT/$name.txt ] && { echo "== $name"; grep -vE "Warning|warn" $OUT/$name.txt | tail -n 30; }; done
