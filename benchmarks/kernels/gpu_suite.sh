#!/bin/bash
# The GPU test suite in parallel shards, from the repository's root, in two halves that each fit a 10-minute
# command on a 16-core box:
#   OUT=DIR bash benchmarks/kernels/gpu_suite.sh dense      # the dense and causal kernels, SDPA API, launch cache
#   OUT=DIR bash benchmarks/kernels/gpu_suite.sh features   # variants, varlen, decoding, transformers, the rest
# (no argument: both, one after the other). Triton's compiles are CPU-bound, so the shards run side by side; each
# is stopped with SIGINT at TEST_TIMEOUT seconds so that pytest still prints its summary. ONLY="vl hop" runs just
# the shards whose names start with one of those words.
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT/logs
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu --format=csv,noheader
T=${TEST_TIMEOUT:-230}
HALF=${1:-all}
run() {
    name=$1; shift
    if [ -n "$ONLY" ]; then
        local keep=no word
        for word in $ONLY; do [[ $name == $word* ]] && keep=yes; done
        [ $keep = yes ] || return 0
    fi
    timeout -s INT $T python -m pytest -q -rfE --tb=short -p no:cacheprovider "$@" > $OUT/logs/$name.txt 2>&1
    echo "$name rc=$?"
}
F=tests/kernels/test_flash_attn.py
V=tests/kernels/test_variants.py
L=tests/kernels/test_varlen.py
# the files the named shards take; "rest" runs every other test file (new ones included) except the browser
# tests, whose snippets are recorded on the GPU by `python3 -m tools.record_snippets`, not run here
NAMED="$F $V $L tests/kernels/test_sdpa.py tests/kernels/test_determinism.py tests/kernels/test_launch_cache.py
       tests/kernels/test_transformers.py tests/kernels/test_kvcache.py tests/kernels/test_hopper_variants.py"
if [ "$HALF" != features ]; then
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
    run flash $F -k "not test_gpu_seqlens and not test_gpu_head_dims and not test_gpu_gqa and not non_contiguous_packed and not gpu_huge and not every_autotune and not test_gpu_autotuned and not hopper" &
    wait
fi
if [ "$HALF" != dense ]; then
    run winmha $V -k "test_gpu_window and mha" &
    run wingqa $V -k "test_gpu_window and gqa" &
    run winmqa $V -k "test_gpu_window and not mha and not gqa" &
    run softcap $V -k "test_gpu_softcap" &
    run alibi $V -k "test_gpu_alibi or test_gpu_all_variants_together" &
    run oddd $V -k "test_gpu_odd_head_dims" &
    run variants $V -k "not test_gpu_window and not test_gpu_softcap and not test_gpu_alibi and not test_gpu_all_variants_together and not test_gpu_odd_head_dims" &
    run vlwin $L -k "window and not gluon" &
    run vlmod $L -k "(softcap or alibi) and not gluon" &
    run vlplain $L -k "(plain or dropout) and not gluon" &
    run vlrest $L -k "not window and not softcap and not alibi and not plain and not dropout and not gluon" &
    # the varlen forward on the Gluon kernel (the shards above pin the portable one)
    run vlgwin $L -k "gluon and window" &
    run vlgrest $L -k "gluon and not window" &
    run hf tests/kernels/test_transformers.py &
    run kvcache tests/kernels/test_kvcache.py &
    # the Hopper variant paths: --runxfail reports each case that misses while the dispatcher keeps them off
    H=tests/kernels/test_hopper_variants.py
    run hopFh $H --runxfail -k "forward_variants and fp16" &
    run hopFb $H --runxfail -k "forward_variants and bf16" &
    run hopB64 $H --runxfail -k "backward_variants and d64" &
    run hopB128 $H --runxfail -k "backward_variants and d128" &
    run hopB256 $H --runxfail -k "backward_variants and d256" &
    run hoprest $H --runxfail -k "not forward_variants and not backward_variants" &
    run rest tests --ignore=tests/site $(for f in $NAMED; do echo --ignore=$f; done) \
        --deselect tests/pipeline/test_snippets.py::test_snippet_runs &
fi
wait
for f in $OUT/logs/*.txt; do echo "== $f: $(tail -n 1 $f)"; done
grep -h -E "^(FAILED|ERROR)" $OUT/logs/*.txt | head -30
