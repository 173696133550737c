#!/bin/bash
# Does having other peers in the benchmark's process slow flashdoc's d = 64 full fwd+bwd rows? (session 15)
# One-configuration sweeps (bf16, d=64, full, 1k/2k/4k) with different peer sets, each in a fresh process;
# prints flashdoc's median ms per N for each sweep. Usage on the device: OUT=$OUT bash perf/peer_isolation.sh
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
sweep() {
  tag=$1; peers=$2; dtype=${3:-bf16}
  timeout 150 python3 -m flashdoc.bench --peers $peers --modes fwd_bwd --dtypes $dtype --head-dims 64 --causal no \
    --seqlens 1024,2048,4096 --memory-seqlens 0 --no-first-call --no-progress --out /tmp/iso_$tag > $OUT/iso_$tag.txt 2>&1
  python3 - /tmp/iso_$tag/results.json "$tag" "$peers" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {}
for x in r["records"]:
    if x["kind"] == "speed" and x["status"] == "ok":
        rows.setdefault(x["peer"], {})[x["seqlen"]] = x["ms"]
print(f"{sys.argv[2]:12s} [{sys.argv[3]}]  " + "  ".join(
    f"{p}: " + " ".join(f"{n}={ms:.3f}" for n, ms in sorted(v.items())) for p, v in rows.items()))
PY
}
for tag in ${*:-all1 alone1 flex1 cudnn1 all2 alone2 flex2}; do
  case $tag in
    all*) sweep $tag flashdoc,sdpa-flash,sdpa-cudnn,sdpa-efficient,flex,naive ;;
    alone*) sweep $tag flashdoc ;;
    flex*) sweep $tag flashdoc,flex ;;
    cudnn*) sweep $tag flashdoc,sdpa-cudnn ;;
    fp16all*) sweep $tag flashdoc,sdpa-flash,sdpa-cudnn,sdpa-efficient,flex,naive fp16 ;;
  esac
done
