"""Why divide by sqrt(d_k): measure what the softmax and its gradient do as d_k grows,
with and without the scale.

Queries and keys have i.i.d. standard-normal entries, as in the variance argument;
each query attends over 64 keys. For every d_k we measure the variance of the dot
products, how peaked the softmax is, and the size of the gradient that reaches the
queries from a random upstream gradient."""

import math

import matplotlib.pyplot as plt
import torch

torch.manual_seed(0)
n_queries, n_keys = 2000, 64
dims = [4, 16, 64, 256, 1024]


# --8<-- [start:experiment]
def measure(d_k, scaled):
    q = torch.randn(n_queries, d_k, requires_grad=True)
    k = torch.randn(n_keys, d_k)
    logits = q @ k.T / (math.sqrt(d_k) if scaled else 1.0)
    weights = torch.softmax(logits, dim=-1)
    # stands in for dLoss/dweights from the rest of the network
    upstream = torch.randn_like(weights)
    (weights * upstream).sum().backward()
    top = weights.max(dim=-1).values  # each row's largest weight
    return dict(
        var=logits.var().item(),
        # 1/64 = uniform, 1.0 = one-hot
        max_weight=top.mean().item(),
        # rows that are (almost) one-hot
        one_hot=(top > 0.99).float().mean().item(),
        # size of the gradient reaching each query
        grad=q.grad.norm(dim=-1).median().item(),
    )


# --8<-- [end:experiment]


results = {(d, s): measure(d, s) for d in dims for s in (False, True)}

# Each measure twice: "raw" scores q·k, and "scaled" ones q·k/√d_k; d_k along the
# columns keeps the table narrow.
measures = [
    ("Var", "var", "{:.1f}", "{:.2f}"),
    ("max weight", "max_weight", "{:.3f}", "{:.3f}"),
    ("one-hot", "one_hot", "{:.0%}", "{:.0%}"),
    ("‖∂L/∂q‖", "grad", "{:.3g}", "{:.3g}"),
]
rows = [
    "| d_k | " + " | ".join(str(d) for d in dims) + " |",
    "|---|" + "---|" * len(dims),
]
for name, key, raw_format, scaled_format in measures:
    for scaled, fmt in ((False, raw_format), (True, scaled_format)):
        cells = [fmt.format(results[d, scaled][key]) for d in dims]
        label = f"{name}, {'scaled' if scaled else 'raw'}"
        rows.append(f"| {label} | " + " | ".join(cells) + " |")
table = "\n".join(rows) + "\n"
print(
    f"{n_queries} queries, {n_keys} keys each "
    f"(a uniform softmax puts {1 / n_keys:.3f} on every key)\n"
    "raw: q·k; scaled: q·k/√d_k. Var: the scores' variance; max weight: each row's\n"
    "largest weight, averaged; one-hot: the share of rows whose largest weight is\n"
    "over 0.99; ‖∂L/∂q‖: the median norm of the gradient reaching a query.\n"
)
print(table)
with open("saturation.md", "w") as f:
    f.write(table)

fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
for scaled, style in ((False, "o-"), (True, "s-")):
    label = "q·k / √d_k" if scaled else "q·k (no scale)"
    runs = [results[d, scaled] for d in dims]
    left.plot(dims, [r["max_weight"] for r in runs], style, label=label)
    right.plot(dims, [r["grad"] for r in runs], style, label=label)
left.axhline(1 / n_keys, color="grey", ls=":", label="uniform (1/64)")
left.set(
    xscale="log",
    xlabel="d_k",
    ylabel="mean of each row's largest weight",
    title="Softmax saturates",
)
right.set(
    xscale="log",
    yscale="log",
    xlabel="d_k",
    ylabel="median ‖∂L/∂q‖",
    title="Gradient reaching the queries",
)
for ax in (left, right):
    ax.set_xticks(dims, [str(d) for d in dims])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig("saturation.png", dpi=150)

# Two heatmaps of the same 16 queries x 16 keys at d_k = 256, for a before/after
# slider on the page.
q, k = torch.randn(16, 256), torch.randn(16, 256)
for name, logits in (
    ("weights_unscaled.png", q @ k.T),
    ("weights_scaled.png", q @ k.T / math.sqrt(q.shape[-1])),
):
    fig, ax = plt.subplots(figsize=(4, 4))
    ax.imshow(torch.softmax(logits, dim=-1), cmap="viridis", vmin=0, vmax=1)
    # the slider's labels say which is which
    ax.set(xlabel="key", ylabel="query", xticks=[], yticks=[])
    fig.tight_layout()
    fig.savefig(name, dpi=120)
    plt.close(fig)
