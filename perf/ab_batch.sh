#!/bin/bash
# One device call of A/B runs: compile every variant in parallel processes first (Triton's disk cache keeps
# them), then time them one process at a time. Usage on the device: OUT=... bash perf/ab_batch.sh
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/warm
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
BWD="--variants base,new,ptr --fwd-variants= --bwd-variants base,fused,ptr"
SPLIT="--variants new,split --fwd-variants= --bwd-variants new,split --ds 256"
FWD="--variants new --bwd-variants= --fwd-configs ${FWD_CONFIGS}"
t0=$(date +%s)
for d in 64 128 256; do for c in False True; do
  python perf/ab.py $BWD --ds $d --causal $c --ns 2048 --warm --out /tmp/w$d$c.json > $OUT/warm/bwd$d$c.txt 2>&1 &
done; done
python perf/ab.py $SPLIT --ns 2048 --warm --out /tmp/ws.json > $OUT/warm/split.txt 2>&1 &
python perf/ab.py $FWD --ns 2048 --warm --out /tmp/wf.json > $OUT/warm/fwd.txt 2>&1 &
wait; echo "compiled in $(( $(date +%s) - t0 )) s"
grep -h "Error" $OUT/warm/*.txt | sort | uniq -c | head
python perf/ab.py $BWD --out $OUT/ab_bwd.json 2>&1 | tee $OUT/ab_bwd.txt | cut -c1-900
python perf/ab.py $SPLIT --out $OUT/ab_split.json 2>&1 | tee $OUT/ab_split.txt | cut -c1-600
python perf/ab.py $FWD --ds 64,128 --out $OUT/ab_fwd.json 2>&1 | tee $OUT/ab_fwd.txt
timeout 120 python perf/small_n.py 2>&1 | tee $OUT/small_n.txt
echo "total $(( $(date +%s) - t0 )) s"
