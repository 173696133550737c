#!/bin/bash
# The whole GPU test suite in parallel shards, from the repository's root: OUT=DIR bash benchmarks/kernels/gpu_suite.sh
# Triton's compiles are CPU-bound, so the shards run side by side (a 16-core box takes them in ~4 minutes); each
# is stopped with SIGINT at TEST_TIMEOUT seconds so that pytest still prints its summary.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
T=${TEST_TIMEOUT:-230}
run() { name=$1; shift; timeout -s INT $T python -m pytest -q -rfE --tb=short -p no:cacheprovider "$@" > $OUT/logs/$name.txt 2>&1; echo "$name rc=$?"; }
F=tests/kernels/test_flash_attn.py
run seq16 $F -k "test_gpu_seqlens and fp16" &
run seqbf $F -k "test_gpu_seqlens and bf16" &
run seq32 $F -k "test_gpu_seqlens and fp32" &
run hdF $F -k "test_gpu_head_dims and False" &
run hdT $F -k "test_gpu_head_dims and True" &
run gqa $F -k "test_gpu_gqa or non_contiguous_packed or gpu_huge or every_autotune" &
run hopF $F -k "hopper and not backward" &
run hopB $F -k "hopper and backward" &
run auto $F -k "test_gpu_autotuned" &
run sdpa tests/kernels/test_sdpa.py tests/kernels/test_determinism.py tests/kernels/test_launch_cache.py &
# every other test file (new ones included) except the browser tests; the snippets are recorded on the GPU by
# `python3 -m tools.record_snippets`, not run here
run other tests --ignore=tests/site --ignore=$F --ignore=tests/kernels/test_sdpa.py \
    --ignore=tests/kernels/test_determinism.py --ignore=tests/kernels/test_launch_cache.py \
    --deselect tests/pipeline/test_snippets.py::test_snippet_runs &
run rest $F -k "not test_gpu_seqlens and not test_gpu_head_dims and not test_gpu_gqa and not non_contiguous_packed and not gpu_huge and not every_autotune and not test_gpu_autotuned and not hopper" &
wait
for f in $OUT/logs/*.txt; do echo "== $f: $(tail -n 1 $f)"; done
grep -h -E "^(FAILED|ERROR)" $OUT/logs/*.txt | head -30
