#!/bin/bash
# The GPU suite and the cuDNN ratio rows under several Triton releases, from the repository's root:
#
#   TRITONS="/opt/t37 /opt/t38 /opt/t39" OUT=DIR bash benchmarks/kernels/triton_matrix.sh
#
# Each entry of TRITONS is a folder with a Triton release unpacked into it (`pip install --no-deps --target DIR
# triton==X`, a wheel unzipped there, or the archive benchmarks/kernels/slim_triton.sh makes of one); it goes
# ahead of the installed Triton on PYTHONPATH, which torch accepts for raw Triton kernels. Backends are found in
# that folder only (TRITON_BACKENDS_IN_TREE: a cut-down release has no AMD backend, which the installed release's
# entry points would otherwise ask for). The installed release runs too. The suites run side by side (their own caches;
# Triton's compiles are CPU-bound), the benchmarks one after another (timings alone on the GPU). Results:
# $OUT/suite-<release>/ and $OUT/bench-<release>/results.json; `python -m benchmarks.triton_versions $OUT/bench-*`
# turns them into the table.
set -u
export PYTHONUNBUFFERED=1 TRITON_BACKENDS_IN_TREE=1
OUT=${OUT:-/tmp/out}
PATHS=("" ${TRITONS:-})
name() { PYTHONPATH=${1:+$1:}$PWD python3 -c "import triton; print(triton.__version__)"; }
if [ "${SUITES:-1}" = 1 ]; then
  for p in "${PATHS[@]}"; do
    v=$(name "$p"); mkdir -p $OUT/suite-$v
    sed "s|PYTHONPATH=\$PWD|PYTHONPATH=${p:+$p:}\$PWD|" benchmarks/kernels/gpu_suite.sh > /tmp/gpu_suite-$v.sh
    (TRITON_CACHE_DIR=/tmp/triton-cache-$v OUT=$OUT/suite-$v TEST_TIMEOUT=${TEST_TIMEOUT:-480} \
      bash /tmp/gpu_suite-$v.sh > $OUT/suite-$v/summary.txt 2>&1) &
  done
  wait
  for p in "${PATHS[@]}"; do v=$(name "$p"); echo "== Triton $v"; tail -n 14 $OUT/suite-$v/summary.txt; done
fi
if [ "${BENCH:-1}" = 1 ]; then
  for p in "${PATHS[@]}"; do
    v=$(name "$p")
    PYTHONPATH=${p:+$p:}$PWD TRITON_CACHE_DIR=/tmp/triton-cache-$v timeout 300 python3 -m benchmarks.run \
      --out $OUT/bench-$v --peers sdpa-cudnn,flashdoc --head-dims 64,128 --dtypes bf16 --seqlens 4096,16384 \
      --memory-seqlens 0 --no-first-call --passes ${PASSES:-1} --no-progress > $OUT/bench-$v.log 2>&1
    echo "bench Triton $v: rc=$?"
  done
fi
