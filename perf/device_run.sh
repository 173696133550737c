#!/bin/bash
# One device call: the GPU test suite in parallel shards (compilation is CPU-bound; 16 cores there), then the
# timing probe. Usage on the device: bash perf/device_run.sh
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
T=${TEST_TIMEOUT:-330}
run() { name=$1; shift; timeout $T python -m pytest -q -p no:cacheprovider "$@" > $OUT/logs/$name.txt 2>&1; echo "$name rc=$?"; }
run seq16 tests/test_flash_attn.py -k "test_gpu_seqlens and float16 and not bfloat16" &
run seqbf tests/test_flash_attn.py -k "test_gpu_seqlens and bfloat16" &
run seq32 tests/test_flash_attn.py -k "test_gpu_seqlens and float32" &
run hdbf tests/test_flash_attn.py -k "test_gpu_head_dims and bfloat16" &
run hd16 tests/test_flash_attn.py -k "test_gpu_head_dims and float16 and not bfloat16" &
run gqa tests/test_flash_attn.py -k "test_gpu_gqa or non_contiguous or huge or every_autotune" &
run rest tests/test_flash_attn.py tests/test_sdpa.py tests/test_errors.py tests/test_determinism.py tests/test_compile.py -k "not test_gpu_seqlens and not test_gpu_head_dims and not test_gpu_gqa and not non_contiguous_packed and not gpu_huge and not every_autotune" &
wait
for f in $OUT/logs/*.txt; do echo "== $f"; tail -n 3 $f; done
grep -h -E "^(FAILED|ERROR)" $OUT/logs/*.txt | head -40
if [ "${PROBE:-1}" = 1 ]; then timeout ${PROBE_TIMEOUT:-200} python perf/probe.py --out $OUT/probe.json ${PROBE_ARGS} 2>&1 | tee $OUT/probe.txt; fi
