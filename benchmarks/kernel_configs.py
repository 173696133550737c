"""Which tile configs flashdoc's kernels ran with in a benchmark: the autotuner's picks for the portable kernels,
and the fixed configs of the Hopper (Gluon) kernels for the rows the dispatch sends them.

The one module of ``benchmarks`` that reads flashdoc's kernel internals (config tables, dispatch predicates).
"""

from __future__ import annotations

import torch

from benchmarks.timing import DTYPES


def autotuned_configs():
    """The config flashdoc's autotuner picked, so far in this process, for each kernel and autotuning key
    (sequence-length bucket, head dim, causal, dtypes): which tiles each flashdoc row ran with. Empty under
    Triton's interpreter, which does not autotune."""
    from flashdoc.kernels import backward, forward

    picks = []
    for kernel, tuned in (
        ("fwd", forward._attn_fwd_tuned),
        ("dkdv", backward._attn_bwd_dkdv_tuned),
        ("dq", backward._attn_bwd_dq_tuned),
    ):
        for key, config in tuned.cache.items() if tuned is not None else ():
            named = dict(zip(tuned.keys, key))  # SEQ_BUCKET, HEAD_DIM and the variant flags, by name
            seq_bucket, head_dim, causal = named["SEQ_BUCKET"], named["HEAD_DIM"], named["IS_CAUSAL"]
            # after the named values the autotuner appends the tensor arguments' dtypes; the first is the inputs'
            dtypes = key[len(tuned.keys) :]
            dtype = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}.get(
                str(dtypes[0]) if dtypes else "", "?"
            )
            picks.append(
                dict(
                    kernel=kernel,
                    dtype=dtype,
                    seq_bucket=seq_bucket,
                    head_dim=head_dim,
                    causal=bool(causal),
                    key=str(key),
                    block_m=config.kwargs["BLOCK_M"],
                    block_n=config.kwargs["BLOCK_N"],
                    num_stages=config.num_stages,
                    num_warps=config.num_warps,
                )
            )
    return sorted(picks, key=lambda p: (p["kernel"], p["key"]))


def hopper_configs(sweep):
    """The configs of the Hopper (Gluon) kernels for the sweep's rows that they take, as picks like
    ``autotuned_configs``'s with ``gluon=True`` and their consumer warpgroups: these kernels do not autotune, so
    the autotuner's cache does not know them. Empty where they do not run (another GPU or Triton, the CPU)."""
    from flashdoc.kernels import backward, backward_hopper, forward_hopper
    from flashdoc.kernels.forward import seq_bucket

    picks = []
    for dtype in sweep.dtypes:
        for head_dim in sweep.head_dims:
            for causal in sweep.causals:
                for seqlen in sweep.seqlens:
                    batch, heads = sweep.batch_heads(seqlen, head_dim)
                    # what the dispatch looks at (shape, dtype, device), with no memory behind it
                    q = torch.empty(1, 1, 1, head_dim, device=sweep.device, dtype=DTYPES[dtype]).expand(
                        batch, seqlen, heads, head_dim
                    )
                    key = (head_dim, causal)
                    kernels = [("fwd", forward_hopper.supports(q, causal), forward_hopper.HOPPER_CONFIGS)]
                    # flashdoc is timed with flash_attn_func's default, deterministic=False
                    fused = backward.fused_dq_runs(q, q, causal, deterministic=False)  # (keys shaped as queries)
                    if fused:  # one kernel for the three gradients
                        kernels.append(("dkdv", True, backward_hopper.FUSED_DQ_CONFIGS))
                    else:
                        kernels += [
                            ("dkdv", backward_hopper.supports_dkdv(q, causal), backward_hopper.HOPPER_DKDV_CONFIGS),
                            ("dq", backward_hopper.supports_dq(q, causal), backward_hopper.HOPPER_DQ_CONFIGS),
                        ]
                    for kernel, taken, table in kernels:
                        if taken:
                            block_m, block_n, stages, consumers = table[key][:4]
                            pick = dict(
                                kernel=kernel,
                                gluon=True,
                                dtype=dtype,
                                seq_bucket=seq_bucket(seqlen),
                                head_dim=head_dim,
                                causal=causal,
                                block_m=block_m,
                                block_n=block_n,
                                num_stages=stages,
                                consumers=consumers,
                            )
                            if kernel == "fwd":
                                pick["o_in_q"] = head_dim > forward_hopper.MAX_SEPARATE_O_HEAD_DIM
                            if kernel == "dkdv":
                                pick["wide"] = head_dim > backward_hopper.MAX_NARROW_HEAD_DIM
                                pick["fused_dq"] = fused
                            picks.append(pick)
    return picks
