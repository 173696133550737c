"""The log-sum-exp merge, worked on one query row, then the whole ring checked: three
processes on the CPU (gloo, Triton's interpreter) run flashdoc.parallel's ring attention
forward and backward and compare their shards with one process's flash_attn_func.
Everything here runs on CPU tensors: on a machine with a GPU, run it with
TRITON_INTERPRET=1, so that flashdoc's kernels run in the interpreter there too."""

import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from flashdoc import flash_attn_func
from flashdoc.parallel import ring_flash_attn_func, zigzag_shard, zigzag_unshard

W, N, H, D = 3, 24, 2, 16  # ranks, tokens, heads, head dim


def worked_example():
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 1, N, H, D)  # (batch, tokens, heads, head_dim)
    out, lse = flash_attn_func(q, k, v, return_lse=True)
    # --8<-- [start:merge]
    # all queries against each third of the keys, as the three ring steps see them
    shards = zip(k.chunk(W, dim=1), v.chunk(W, dim=1))
    parts = [flash_attn_func(q, k_s, v_s, return_lse=True) for k_s, v_s in shards]
    lse_all = torch.logsumexp(torch.stack([lse_s for _, lse_s in parts]), dim=0)
    weights = [torch.exp(lse_s - lse_all) for _, lse_s in parts]  # (batch, heads, n)
    merged = sum(
        out_s * w.transpose(1, 2)[..., None] for (out_s, _), w in zip(parts, weights)
    )
    # --8<-- [end:merge]
    lines = [
        "| keys | lse of the shard | its weight, exp(lse of the shard - lse of all) |",
        "|---|---|---|",
    ]
    for s, ((_, lse_s), w) in enumerate(zip(parts, weights)):
        keys = f"{s * N // W} to {(s + 1) * N // W - 1}"
        lines.append(f"| {keys} | {lse_s[0, 0, 0]:.4f} | {w[0, 0, 0]:.4f} |")
    lines.append(
        f"| all (logsumexp of the three) | {lse_all[0, 0, 0]:.4f} "
        f"| {sum(w[0, 0, 0] for w in weights):.4f} |"
    )
    lines.append(f"| all (flash_attn_func) | {lse[0, 0, 0]:.4f} | |")
    table = "\n".join(lines) + "\n"
    print(f"Query 0, head 0, attending to {N} keys in {W} shards of {N // W}:\n{table}")
    error = (merged - out).abs().max()
    print(f"max |merged output - output| over every row: {error:.1e}")
    with open("merge.md", "w") as f:
        f.write(table)


# (name, causal, window_size); the window, narrower than a shard, ends the contiguous
# ring after one hop
MASKS = (
    ("full", False, (-1, -1)),
    ("causal", True, (-1, -1)),
    ("causal, window (5, 0)", True, (5, 0)),
)


def ring_check(rank, port):
    """One rank of the ring: its shards in, its output and gradient shards out."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=W)
    torch.manual_seed(1)  # the same full tensors on every rank
    lines = ["| layout | mask | out | dq | dk | dv |", "|---|---|---|---|---|---|"]
    q, k, v, dout = torch.randn(4, 1, N, H, D)
    for layout in ("contiguous", "zigzag"):
        for mask, causal, window in MASKS:

            def shard(x):
                if layout == "zigzag":
                    return zigzag_shard(x, W, rank)
                return x.chunk(W, dim=1)[rank]

            # --8<-- [start:ring]
            q_s, k_s, v_s = (shard(t).requires_grad_() for t in (q, k, v))
            out_s = ring_flash_attn_func(
                q_s, k_s, v_s, causal=causal, window_size=window, layout=layout
            )
            out_s.backward(shard(dout))
            # --8<-- [end:ring]
            errors = []
            full = [t.clone().requires_grad_() for t in (q, k, v)]
            out = flash_attn_func(*full, causal=causal, window_size=window)
            out.backward(dout)
            rank_shards = (out_s, q_s.grad, k_s.grad, v_s.grad)
            one_process = (out, *(t.grad for t in full))
            for mine, whole in zip(rank_shards, one_process):
                gathered = [torch.empty_like(mine) for _ in range(W)]
                dist.all_gather(gathered, mine.detach().contiguous())
                if layout == "zigzag":
                    ring = zigzag_unshard(gathered)
                else:
                    ring = torch.cat(gathered, dim=1)
                errors.append(f"{(ring - whole).abs().max():.1e}")
            lines.append(f"| {layout} | {mask} | " + " | ".join(errors) + " |")
    if rank == 0:
        table = "\n".join(lines) + "\n"
        print(table)
        with open("ring_check.md", "w") as f:
            f.write(table)
    dist.destroy_process_group()


if __name__ == "__main__":
    worked_example()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(
        f"\nRing of {W} gloo processes, {N // W} tokens each, float32: "
        "max |ring - one process| over the gathered shards:"
    )
    mp.spawn(ring_check, args=(port,), nprocs=W, join=True)
