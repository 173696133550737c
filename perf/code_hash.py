"""Compile the tuned configs of flashdoc's Gluon kernels for sm_90 without a GPU, and print a hash of each one's
generated code with ptxas's register and spill counts.

Run it before and after an edit that should not change the generated code (a refactor, a comment, a helper
shared between kernels): equal hashes show that the kernels the tables select are the same instructions as
before, which a CPU machine can check. A different hash means the edit needs an H200 run. Register allocation
on these kernels is sensitive to small source changes (perf/NOTES.md, session 11).

    PYTHONPATH=/tmp/t36:. TRITON_INTERPRET=0 python perf/code_hash.py   # a Triton 3.6 wheel unpacked in /tmp/t36
"""

import hashlib
import os
import re
import subprocess
import tempfile

import torch
import triton

from flashdoc.kernels import backward_hopper as bh
from flashdoc.kernels import forward_hopper as fh

POINTERS = {"LSE": "*fp32", "LSE2": "*fp32", "DELTA": "*fp32", "COUNTER": "*i32"}
FLOATS = {"qk_scale", "softmax_scale"}


def ptxas_info(ck):
    """ptxas's register count and spill stores for a kernel compiled for sm_90 (its PTX assembled again)."""
    with tempfile.NamedTemporaryFile("w", suffix=".ptx") as f:
        f.write(ck.asm["ptx"])
        f.flush()
        ptxas = os.path.join(os.path.dirname(triton.__file__), "backends/nvidia/bin/ptxas")
        res = subprocess.run([ptxas, "-v", "--gpu-name=sm_90a", f.name, "-o", "/dev/null"], capture_output=True,
                             text=True)
    return " ".join(re.findall(r"Used \d+ registers|\d+ bytes spill stores", res.stderr))


def code_hash(ptx):
    """A hash of the PTX's instructions alone: without the debug sections, line markers and comments, which move
    with the source's line numbers."""
    end = ptx.find(".section")
    lines = [line.strip() for line in (ptx if end < 0 else ptx[:end]).splitlines()]
    code = [line for line in lines if line and not line.startswith((".loc", ".file", "//", "$L__"))]
    return hashlib.sha1("\n".join(code).encode()).hexdigest()[:12]


def compile_sm90(kernel, descriptors, constants):
    """kernel compiled for sm_90: descriptors (name: host descriptor) and constants (name: value) by parameter
    name; other parameters are typed by name (pointers, float scales, else i32)."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    sig, consts = {}, {}
    for i, name in enumerate(kernel.arg_names):
        if name in descriptors:
            sig[name] = mangle_type(descriptors[name])
        elif name in constants:
            sig[name] = "constexpr"
            consts[(i,)] = constants[name]
        else:
            sig[name] = POINTERS.get(name, "fp32" if name in FLOATS else "i32")
    return triton.compile(GluonASTSource(kernel, sig, consts), target=GPUTarget("cuda", 90, 32),
                          options=dict(num_warps=4))


def tuned_kernels():
    """(label, kernel, descriptors, constants) for every entry of the three Hopper config tables, in bf16."""
    for (d, causal), (bm, bn, stages, consumers, _persistent) in fh.HOPPER_CONFIGS.items():
        t = torch.empty(2, 1024, 4, d, dtype=torch.bfloat16)
        descs = dict(zip(["q_desc", "k_desc", "v_desc", "o_desc"], fh.descriptors(t, t, t, t, bm, bn)))
        yield (f"fwd  d={d} causal={causal}", fh._attn_fwd_hopper, descs,
               dict(IS_CAUSAL=causal, BLOCK_M=bm, BLOCK_N=bn, STAGES=stages, N_CONSUMERS=consumers))
    for name, kernel, table, m_rows in (("dkdv", "_attn_bwd_dkdv_hopper", bh.HOPPER_DKDV_CONFIGS, ("q", "do")),
                                        ("dq  ", "_attn_bwd_dq_hopper", bh.HOPPER_DQ_CONFIGS, ("q", "do", "dq"))):
        kernel = getattr(bh, kernel)
        for (d, causal), (bm, bn, stages, consumers, *rest) in table.items():
            t = torch.empty(2, 1024, 4, d, dtype=torch.bfloat16)
            # Q, dO (and dQ) move in BLOCK_M rows, K, V (and dK, dV) in BLOCK_N
            descs = {n: fh.descriptor(t, bm if n[:-5] in m_rows else bn) for n in kernel.arg_names
                     if n.endswith("_desc")}
            consts = dict(IS_CAUSAL=causal, STAGES=stages, N_CONSUMERS=consumers)
            consts.update({k: v for k, v in (("PIPELINE", bool(rest and rest[0])),) if k in kernel.arg_names})
            yield f"{name} d={d} causal={causal}", kernel, descs, consts


if __name__ == "__main__":
    for label, kernel, descs, consts in tuned_kernels():
        ck = compile_sm90(kernel, descs, consts)
        print(f"{label}: code {code_hash(ck.asm['ptx'])}  {ptxas_info(ck)}", flush=True)
