export PYTHONPATH=. CUDA_LAUNCH_BLOCKING=1
first=""
for s in 1,128,128,1,1,0 1,1024,1024,1,1,0 2,1024,1024,4,4,0 1,1000,1000,3,3,0 2,333,777,4,2,0 1,777,333,2,1,0 1,64,4000,2,2,0 2,2048,2048,8,2,0 1,1000,777,3,1,0 1,777,1000,2,2,0 1,1024,1024,1,1,1; do
  if timeout 60 python3 perf/fused_probe.py $s > /tmp/p.txt 2>&1; then cat /tmp/p.txt; else echo "FAIL $s: $(grep -m1 -i error /tmp/p.txt)"; [ -z "$first" ] && first=$s; fi
done
if [ -n "$first" ]; then timeout 200 compute-sanitizer --print-limit 5 python3 perf/fused_probe.py $first 2>&1 | head -60; fi
