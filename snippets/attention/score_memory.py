"""How much memory the N x N matrices of naive attention take: the bytes PyTorch
allocates for the scores, and the bytes autograd keeps alive for the backward pass,
for one head in float32; then what heads, and GPT-3's sizes, do to that."""

import torch


def emit(filename, text):
    """Print a result and keep it as a file a page can show on its own."""
    print(text)
    with open(filename, "w") as f:
        f.write(text + "\n")


torch.manual_seed(0)
d = 64  # head dimension
rows = [
    "| N | scores S (bytes) | = N² × 4? | S in MiB "
    "| kept for backward (MiB) | of which N × N (MiB) |",
    "|---|---|---|---|---|---|",
]

# --8<-- [start:measure]
for n in (1024, 2048, 4096, 8192):
    q, k, v = (torch.randn(n, d, requires_grad=True) for _ in range(3))
    saved = {}  # storage address -> (bytes, shape) of each tensor saved for backward

    def keep(t):
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = (storage.nbytes(), tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        scores = q @ k.T * d**-0.5  # (N, N)
        out = torch.softmax(scores, dim=-1) @ v
    s_bytes = scores.untyped_storage().nbytes()
    kept = sum(b for b, _ in saved.values())
    square = sum(b for b, shape in saved.values() if shape == (n, n))
    rows.append(
        f"| {n} | {s_bytes:,} | {s_bytes == n * n * 4} | {s_bytes / 2**20:.0f} "
        f"| {kept / 2**20:.1f} | {square / 2**20:.0f} |"
    )
    # --8<-- [end:measure]
    del q, k, v, scores, out, saved

table = "\n".join(rows) + "\n"
print(table)
# The seed post's arithmetic, redone from the measured size of one head's scores at
# the loop's last length:
mib, gib = s_bytes / 2**20, 32 * s_bytes / 2**30
emit(
    "seed_arithmetic.txt",
    f"N = {n:,}: 32 heads x {mib:.0f} MiB = {gib:.0f} GiB of scores per layer, "
    "batch 1, float32",
)
with open("score_memory.md", "w") as f:
    f.write(table)

# --8<-- [start:heads]
# h heads of width d_model / h against one head of full width, same input
n, d_model, h = 1024, 512, 8
x = torch.randn(n, d_model)
one_head = x @ x.T  # (N, N)
heads = x.view(n, h, d_model // h).transpose(0, 1)  # (h, N, d_model / h)
many_heads = heads @ heads.transpose(-2, -1)  # (h, N, N)
flops_one, flops_many = 2 * n * n * d_model, h * 2 * n * n * (d_model // h)
emit(
    "heads.txt",
    f"{h} heads of {d_model // h} vs one head of {d_model}, N = {n}:\n"
    f"  FLOPs of QK^T: {flops_many:,} vs {flops_one:,}\n"
    f"  score bytes:   {many_heads.untyped_storage().nbytes():,} vs "
    f"{one_head.untyped_storage().nbytes():,}",
)
# --8<-- [end:heads]

# --8<-- [start:gpt3]
# GPT-3 175B (Brown et al., 2020, table 2.1): 96 layers of 96 heads, 2,048 tokens
layers, n_heads, n_ctx, params = 96, 96, 2048, 175e9
half = 2  # bytes per float16 number
per_layer = n_heads * n_ctx**2 * half  # one layer's scores, one sequence
emit(
    "gpt3.txt",
    f"GPT-3 175B at {n_ctx:,} tokens, float16:\n"
    f"  weights:                            {params * half / 2**30:,.0f} GiB\n"
    f"  scores of one layer, one sequence:  {per_layer / 2**20:,.0f} MiB\n"
    f"  P of all {layers} layers, one sequence: {layers * per_layer / 2**30:,.0f} GiB",
)
# --8<-- [end:gpt3]
