#!/bin/bash
# A Triton wheel cut down to what the GPU tests load and packed small enough to carry to a GPU machine that takes
# files in calls of 64 MiB (for triton_matrix.sh), from the repository's root:
#
#   bash benchmarks/kernels/slim_triton.sh triton-3.9.0-cp312-abi3-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl OUT
#
# writes OUT/triton-<version>.txz, cut into parts .txz.00, .txz.01, ... of PART_MB megabytes (default 55) when it
# is larger, and OUT/triton-<version>.sha256 with every file's sum. Dropped: CUPTI and the Proton profiler's library
# (profiling only), the AMD backend, and libtriton.so's debug information (3.7.1: 462 MB to 180 MB). Without the AMD
# backend, Triton's discovery of backends must look only inside the folder: run it with TRITON_BACKENDS_IN_TREE=1,
# as triton_matrix.sh does. Both ptxas binaries stay: Triton 3.9 compiles for sm_90 with ptxas-blackwell. There:
#
#   sha256sum -c triton-3.9.0.sha256 && mkdir -p /tmp/t39 && cat triton-3.9.0.txz* | xz -d | tar x -C /tmp/t39
set -euo pipefail
wheel=$(realpath "$1")
out=$2
part_mb=${PART_MB:-55}
version=$(basename "$wheel" | cut -d- -f2)
name=triton-$version
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out" "$work/tree"
python3 -m zipfile -e "$wheel" "$work/tree"
tree=$work/tree/triton
rm -rf "$tree/backends/amd" "$tree"/backends/nvidia/lib/cupti* "$tree/_C/libproton.so"
strip --strip-unneeded "$tree/_C/libtriton.so"
chmod +x "$tree"/backends/nvidia/bin/*  # zip extraction drops the executable bits
rm -f "$out/$name".txz*
tar cf - -C "$work/tree" . | xz -T0 -6 > "$out/$name.txz"
if [ "$(stat -c %s "$out/$name.txz")" -gt $((part_mb * 1000000)) ]; then
    split -b "${part_mb}MB" -d "$out/$name.txz" "$out/$name.txz."
    rm "$out/$name.txz"
fi
(cd "$out" && sha256sum "$name".txz* > "$name.sha256")
ls -l "$out/$name".txz*
