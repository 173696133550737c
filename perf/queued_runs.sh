#!/bin/bash
# The A/B runs waiting for the next H200 call. Edit as leads change; perf/NOTES.md says what each run decides.
# Usage on the device: OUT=$OUT bash perf/queued_runs.sh [run ...]   (all runs, in this order, when none is named;
# together they can take longer than one 10-minute device call, so name a part of them per call)
# Each run has its own time limit, so a hang (a prototype's barrier deadlock) costs only its own slot.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
RUNS=${*:-causal_order}
step() {
  name=$1; limit=$2; shift 2
  [[ " $RUNS " == *" $name "* ]] || return 0
  echo "== $name: $*"; t0=$(date +%s)
  timeout -s INT $limit python perf/"$@" > $OUT/$name.txt 2>&1
  echo "rc=$? in $(( $(date +%s) - t0 )) s"; grep -E "MISMATCH|check done|Error" $OUT/$name.txt | head -5
}
# Runs kept as tools, no longer queued: flex_in_process (session 15), causal_end_aligned and bwd_sections (session 16,
# both shipped; qk_pipeline lost and its kernel is gone). perf/NOTES.md says what each decided.
step flex_in_process 150 flex_in_process.py
step causal_end_aligned 200 causal_end_aligned.py ${BASE_FILE:+--base $BASE_FILE}
step bwd_sections 200 bwd_sections.py --head-dims 256 --sections 1 2 4
# (ran in session 16: the shipped config stays) the d = 256 causal forward at 512-2k tokens: 32-key tiles with the
# output staged, and the non-persistent grid, which releases each query tile without holding the next item back
step d256_fwd_short 150 gluon_fwd.py --check --bench --causal-only --head-dims 256 --lengths 512 1024 2048 \
     --configs 64,64,2,2,1 64,64,2,2,0 64,32,3,2,1
# (ran in session 17: lost, +10-16% time) the d = 64 full backward with 8-warp, 64x128 dK/dV tiles, which compile
# without spills where the table's 32x128 4-warp tile spills 52 B: every (dK/dV, dQ) pair as one backward
step d64_dkdv_extra 240 d64_bwd_configs.py --extra 64,128,2,8 64,128,3,8 64,64,2,4
# the causal order A/B (forward: sections of one head, L2 sections, all heads), as a check after any change to
#    forward_hopper's scheduling
step causal_order 200 causal_order.py
for name in $RUNS; do [ -f $OUT/$name.txt ] && { echo "== $name"; grep -vE "Warning|warn" $OUT/$name.txt | tail -n 30; }; done
