"""How much memory the N x N matrices of naive attention take: the bytes PyTorch actually allocates for the
scores, and the bytes autograd keeps alive for the backward pass, for one head in float32."""

import torch

torch.manual_seed(0)
d = 64  # head dimension
rows = ["| N | scores S (bytes) | = N² × 4? | S in MiB | kept for backward (MiB) | of which N × N (MiB) |",
        "|---|---|---|---|---|---|"]

# --8<-- [start:measure]
for n in (1024, 2048, 4096, 8192):
    q, k, v = (torch.randn(n, d, requires_grad=True) for _ in range(3))
    saved = {}  # storage address -> (bytes, shape) of every tensor autograd saves for the backward pass

    def keep(t):
        saved[t.untyped_storage().data_ptr()] = (t.untyped_storage().nbytes(), tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(keep, lambda t: t):
        scores = q @ k.T * d**-0.5  # (N, N)
        out = torch.softmax(scores, dim=-1) @ v
    s_bytes = scores.untyped_storage().nbytes()
    kept = sum(b for b, _ in saved.values())
    square = sum(b for b, shape in saved.values() if shape == (n, n))
    rows.append(f"| {n} | {s_bytes:,} | {s_bytes == n * n * 4} | {s_bytes / 2**20:.0f} | {kept / 2**20:.1f} | "
                f"{square / 2**20:.0f} |")
# --8<-- [end:measure]
    del q, k, v, scores, out, saved

table = "\n".join(rows) + "\n"
print(table)
# The seed post's arithmetic, redone from the measured size of one head's score matrix at N = 8192:
print(f"32 heads x {s_bytes / 2**20:.0f} MiB = {32 * s_bytes / 2**30:.0f} GiB of scores per layer, batch 1, float32")
with open("score_memory.md", "w") as f:
    f.write(table)
