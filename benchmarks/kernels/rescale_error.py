"""The forward's online softmax with a conditional rescale, emulated on the CPU: how much accuracy it costs and how
often it skips the accumulator's rescaling.

    python3 benchmarks/kernels/rescale_error.py [--trials 40] [--threshold 8] [--block-n 64] [--dtype bf16]

The Gluon forward rescales its fp32 accumulator by exp2(m_old - m_new) after every key tile (64 multiplies a thread
per tile at d = 128; with a window's 64-key tiles that is twice per 128 keys what dense causal's 128-key tiles pay).
FlashAttention-4's conditional rescale keeps each row's old offset until some row's maximum has grown by more than
a threshold (8, in the log2 units of the scaled scores): the probabilities then reach at most 2^8, well inside the
16-bit P's range, and the tile skips the rescale. The result is the same softmax; only its rounding differs, since
a row's largest probability is no longer exactly 1.

This script runs both rules tile by tile as the kernel's consumer does (fp32 scores and sums, P rounded to the
16-bit dtype before P V, fp32 accumulator, one 64-row query tile), on random inputs shaped like flash-attn's tests
(keys 256 to 1,088, queries scaled by 1, 4 or 16 for peaked rows, half of the trials with scores that grow along the
keys so the maximum keeps moving), and prints per rule the worst error against a float64 reference, that error over
the same-dtype PyTorch reference's own (flash-attn's rule allows 2x), and the share of tiles that skipped the rescale.
"""

import argparse
import math

import torch

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
LOG2E = 1.4426950408889634


def online_softmax(q, k, v, block_n: int, dtype: torch.dtype, threshold: float | None):
    """O for one query tile, computed key tile by key tile as the forward's consumer does. threshold None: rescale
    after every tile (the shipped rule); else only when some row's maximum grew by more than threshold.
    Returns (O in fp32, tiles that skipped the rescale, tiles)."""
    scale = LOG2E / math.sqrt(q.shape[1])
    rows = q.shape[0]
    m = torch.full((rows,), -math.inf)
    l = torch.zeros(rows)
    acc = torch.zeros(rows, v.shape[1])
    skipped = tiles = 0
    for start in range(0, k.shape[0], block_n):
        s = q @ k[start : start + block_n].T
        m_new = torch.maximum(m, s.amax(1) * scale)
        tiles += 1
        if threshold is None or (m_new - m).max() > threshold:
            alpha = torch.exp2(m - m_new)
            l, acc, m = l * alpha, acc * alpha[:, None], m_new
        else:
            skipped += 1
        p = torch.exp2(s * scale - m[:, None])
        l = l + p.sum(1)
        acc = acc + p.to(dtype).float() @ v[start : start + block_n]
    return acc / l[:, None], skipped, tiles


def exact_attention(q, k, v):
    """The float64 reference both rules are measured against."""
    return torch.softmax(q.double() @ k.double().T / math.sqrt(q.shape[1]), -1) @ v.double()


def trial_inputs(gen: torch.Generator, dtype: torch.dtype, head_dim: int, growing: bool):
    """(q, k, v) in fp32 holding dtype's values: 64 query rows, a key count from flash-attn's odd lengths, q scaled
    up for peaked rows, and with ``growing`` keys leaning towards the mean query more and more along the sequence."""
    n_keys = (256, 1023, 1024, 1088)[int(torch.randint(4, (1,), generator=gen))]
    q_scale = (1.0, 4.0, 16.0)[int(torch.randint(3, (1,), generator=gen))]
    q = torch.randn(64, head_dim, generator=gen) * q_scale
    k = torch.randn(n_keys, head_dim, generator=gen)
    v = torch.randn(n_keys, head_dim, generator=gen)
    if growing:
        direction = q.mean(0) / (q.mean(0).norm() ** 2 + 1e-6)
        k = k + torch.linspace(0, 24, n_keys)[:, None] * direction[None, :]
    return tuple(x.to(dtype).float() for x in (q, k, v))


def compare(trials: int, threshold: float, block_n: int, dtype: torch.dtype, head_dim: int = 128, seed: int = 0):
    """Per rule ("eager", "conditional"): the worst error against float64, the worst ratio of the output's error
    (rounded to dtype, as the kernel writes it) to the same-dtype PyTorch reference's, and the share of tiles that
    skipped the rescale, over the trials with random keys and over those with growing scores."""
    gen = torch.Generator().manual_seed(seed)
    rules = ("eager", "conditional")
    out = {rule: {"error": 0.0, "over_reference": 0.0, "skipped": [0, 0], "tiles": [0, 0]} for rule in rules}
    for t in range(trials):
        growing = t % 2
        q, k, v = trial_inputs(gen, dtype, head_dim, growing=bool(growing))
        exact = exact_attention(q, k, v)
        scores = (q.to(dtype) @ k.to(dtype).T).float() / math.sqrt(head_dim)
        same_dtype = torch.softmax(scores, -1).to(dtype) @ v.to(dtype)
        reference_error = (same_dtype.double() - exact).abs().max().item()
        for rule, tau in (("eager", None), ("conditional", threshold)):
            o, skipped, tiles = online_softmax(q, k, v, block_n, dtype, tau)
            row = out[rule]
            row["error"] = max(row["error"], (o.double() - exact).abs().max().item())
            written = (o.to(dtype).double() - exact).abs().max().item()
            row["over_reference"] = max(row["over_reference"], written / reference_error)
            row["skipped"][growing] += skipped
            row["tiles"][growing] += tiles
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--threshold", type=float, default=8.0)
    parser.add_argument("--block-n", type=int, default=64)
    parser.add_argument("--dtype", choices=DTYPES, default="bf16")
    args = parser.parse_args(argv)
    result = compare(args.trials, args.threshold, args.block_n, DTYPES[args.dtype])
    print(
        "| rule | worst error vs float64 (fp32 O) | worst written error / same-dtype reference's "
        "| tiles skipped (random keys / growing scores) |"
    )
    print("|---|---|---|---|")
    for rule, row in result.items():
        random, growing = (s / t for s, t in zip(row["skipped"], row["tiles"]))
        print(f"| {rule} | {row['error']:.2e} | {row['over_reference']:.2f} | {random:.0%} / {growing:.0%} |")
    return result


if __name__ == "__main__":
    main()
