#!/bin/bash
# Several benchmarks/kernels/ab.py runs in one GPU session. Each argument is one run's options. Every run is
# compiled first, all in parallel processes (Triton's disk cache keeps the binaries; compilation is CPU-bound),
# then timed one run at a time so the timings do not disturb each other.
#   OUT=... bash benchmarks/kernels/ab_batch.sh "--variants base,new --bwd-variants= --ds 64" "--variants new,split ..."
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
t0=$(date +%s)
i=0
for run in "$@"; do
  for causal in False True; do
    python benchmarks/kernels/ab.py $run --causal $causal --ns 2048 --warm --out /tmp/warm$i$causal.json > /tmp/warm$i$causal.txt 2>&1 &
  done
  i=$((i + 1))
done
wait; echo "compiled in $(( $(date +%s) - t0 )) s"
cat /tmp/warm*.txt | grep -E "Error|error" | sort | uniq -c | head
i=0
for run in "$@"; do
  echo "== ab.py $run"
  python benchmarks/kernels/ab.py $run --out $OUT/ab$i.json 2>&1 | tee $OUT/ab$i.txt | cut -c1-700
  i=$((i + 1))
done
echo "total $(( $(date +%s) - t0 )) s"
