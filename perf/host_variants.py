"""Write forward-kernel variants that read some of Q, K/V, O through host-side 4-D tensor descriptors (made once
per launch, tiles (1, rows, 1, BLOCK_D)) and the rest through the package's in-kernel 2-D ones, for perf/ab.py:

    python perf/host_variants.py      # writes perf/_host_{kvo,kv,o,all,none}/forward.py (git-ignored)
    PYTHONPATH=. python perf/ab.py --variants base,perf/_host_none,perf/_host_kvo --bwd-variants= ...

Session 3's measurements are in perf/NOTES.md. The edits below assume the package's forward.py as of commit
573cdcf; each one fails loudly if its anchor text has changed.
"""
import pathlib

root = pathlib.Path(__file__).resolve().parent.parent
src = (root / "flashdoc/kernels/forward.py").read_text()

def rep(s, o, n):
    assert s.count(o) == 1, o
    return s.replace(o, n)

s = src
s = rep(s, "import triton.language as tl\n",
        "import triton.language as tl\nfrom triton.tools.tensor_descriptor import TensorDescriptor\n")
s = rep(s, '''def _cfg(block_m, block_n, stages, warps, across_heads=False):''', '''HOST_Q = tl.constexpr(@Q@)
HOST_KV = tl.constexpr(@KV@)
HOST_O = tl.constexpr(@O@)


def set_block_shapes(nargs):
    for arg in nargs.values():
        if isinstance(arg, TensorDescriptor):
            arg.block_shape = [1, nargs[arg.block_rows], 1, nargs["BLOCK_D"]]


def head_tiles(t, block_rows):
    desc = TensorDescriptor(t, list(t.shape), list(t.stride()), [1, 16, 1, 16])
    desc.block_rows = block_rows
    return desc


def _cfg(block_m, block_n, stages, warps, across_heads=False):''')
s = rep(s, '''                         num_stages=stages, num_warps=warps)''', '''                         num_stages=stages, num_warps=warps, pre_hook=set_block_shapes)''')
s = rep(s, '''def _attn_fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, offs_m, seqlen_k, causal_offset, qk_scale, lo, hi,
                    BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
                    DOT_PRECISION: tl.constexpr):''', '''def _attn_fwd_inner(acc, l_i, m_i, q, k_desc, v_desc, offs_m, seqlen_k, causal_offset, qk_scale, lo, hi,
                    BLOCK_N: tl.constexpr, IS_CAUSAL: tl.constexpr, MASKED: tl.constexpr,
                    DOT_PRECISION: tl.constexpr, off_b=0, off_hk=0, BLOCK_D: tl.constexpr = 16):''')
s = rep(s, '''        k = k_desc.load([start_n, 0])  # (BLOCK_N, BLOCK_D); rows past seqlen_k read as zeros''',
'''        if HOST_KV:
            k = k_desc.load([off_b, start_n, off_hk, 0]).reshape(BLOCK_N, BLOCK_D)
        else:
            k = k_desc.load([start_n, 0])''')
s = rep(s, '''        v = v_desc.load([start_n, 0])''', '''        if HOST_KV:
            v = v_desc.load([off_b, start_n, off_hk, 0]).reshape(BLOCK_N, BLOCK_D)
        else:
            v = v_desc.load([start_n, 0])''')
s = rep(s, '''    off_b = (pid_bh // n_heads).to(tl.int64)''', '''    off_b = pid_bh // n_heads
    off_b64 = off_b.to(tl.int64)''')
s = rep(s, '''    q_desc = _head_desc(Q + off_b * stride_qb + off_h * stride_qh, seqlen_q, stride_qs, HEAD_DIM, BLOCK_M, BLOCK_D)
    k_desc = _head_desc(K + off_b * stride_kb + off_hk * stride_kh, seqlen_k, stride_ks, HEAD_DIM, BLOCK_N, BLOCK_D)
    v_desc = _head_desc(V + off_b * stride_vb + off_hk * stride_vh, seqlen_k, stride_vs, HEAD_DIM, BLOCK_N, BLOCK_D)
    q = q_desc.load([pid_m * BLOCK_M, 0])
''', '''    if HOST_Q:
        q = Q.load([off_b, pid_m * BLOCK_M, off_h, 0]).reshape(BLOCK_M, BLOCK_D)
    else:
        q = _head_desc(Q + off_b64 * stride_qb + off_h * stride_qh, seqlen_q, stride_qs, HEAD_DIM, BLOCK_M,
                       BLOCK_D).load([pid_m * BLOCK_M, 0])
    if HOST_KV:
        k_desc = K
        v_desc = V
    else:
        k_desc = _head_desc(K + off_b64 * stride_kb + off_hk * stride_kh, seqlen_k, stride_ks, HEAD_DIM, BLOCK_N, BLOCK_D)
        v_desc = _head_desc(V + off_b64 * stride_vb + off_hk * stride_vh, seqlen_k, stride_vs, HEAD_DIM, BLOCK_N, BLOCK_D)
''')
s = rep(s, '''                                    0, full_hi, BLOCK_N, IS_CAUSAL, False, DOT_PRECISION)''',
           '''                                    0, full_hi, BLOCK_N, IS_CAUSAL, False, DOT_PRECISION, off_b, off_hk, BLOCK_D)''')
s = rep(s, '''                                    full_hi, masked_hi, BLOCK_N, IS_CAUSAL, True, DOT_PRECISION)''',
           '''                                    full_hi, masked_hi, BLOCK_N, IS_CAUSAL, True, DOT_PRECISION, off_b, off_hk, BLOCK_D)''')
s = rep(s, '''    o_desc = _head_desc(O + off_b * stride_ob + off_h * stride_oh, seqlen_q, stride_os, HEAD_DIM, BLOCK_M, BLOCK_D)
    o_desc.store([pid_m * BLOCK_M, 0], acc.to(O.dtype.element_ty))''', '''    if HOST_O:
        O.store([off_b, pid_m * BLOCK_M, off_h, 0], acc.to(O.dtype).reshape(1, BLOCK_M, 1, BLOCK_D))
    else:
        o_desc = _head_desc(O + off_b64 * stride_ob + off_h * stride_oh, seqlen_q, stride_os, HEAD_DIM, BLOCK_M,
                            BLOCK_D)
        o_desc.store([pid_m * BLOCK_M, 0], acc.to(O.dtype.element_ty))''')
s = rep(s, '''        kernel[grid(config.kwargs)](*args, **meta, **config.kwargs, num_warps=config.num_warps,''',
        '''        set_block_shapes({**dict(enumerate(args)), **meta, **config.kwargs})
        kernel[grid(config.kwargs)](*args, **meta, **config.kwargs, num_warps=config.num_warps,''')
s = rep(s, '''    args = (q, k, v, out, lse,''', '''    host = lambda t, rows, flag: head_tiles(t, rows) if flag else t
    args = (host(q, "BLOCK_M", HOST_Q.value), host(k, "BLOCK_N", HOST_KV.value), host(v, "BLOCK_N", HOST_KV.value),
            host(out, "BLOCK_M", HOST_O.value), lse,''')
for name, flags in {"kvo": (False, True, True), "kv": (False, True, False), "o": (False, False, True),
                    "all": (True, True, True), "none": (False, False, False)}.items():
    d = root / "perf" / f"_host_{name}"
    d.mkdir(exist_ok=True)
    t = s.replace("@Q@", str(flags[0])).replace("@KV@", str(flags[1])).replace("@O@", str(flags[2]))
    (d / "forward.py").write_text(t)
print("wrote", ", ".join(f"perf/_host_{n}" for n in ("kvo", "kv", "o", "all", "none")))
