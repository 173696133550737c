"""How long the exponentials of an attention tile take next to its matrix products, on
Hopper (H100, H200)."""

# --8<-- [start:budget]
# Per SM and clock cycle on Hopper: 4096 dense bf16/fp16 FLOPs on the tensor
# cores, only 16 exp2 on the multi-function units. FlashAttention-3's paper
# quotes the same rates for a whole H100: 989 TFLOP/s against 3.9 T exp2/s.
TENSOR_FLOPS_PER_CLOCK = 4096
EXP2_PER_CLOCK = 16

# Work per attention score, per unit of head dimension d (a product of length
# d is 2d FLOPs), and the exp2 calls per score:
# - forward: Q K^T and P V, one exp2 for P;
# - backward in two kernels (Part 4's): S, dV, dP, dK in one, S, dP, dQ in the
#   other (7 products), and P, with its exp2, recomputed in each; the fused
#   Hopper kernel that takes most d = 64 calls does 5 products and one exp2.
WORK = {"forward": (2 * 2, 1), "backward": (7 * 2, 2)}

header = ["head dim"]
for phase in WORK:
    header += [
        f"{phase}: exp2 time ÷ product time",
        f"{phase}: ceiling if they never overlap",
    ]
rows = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
for head_dim in (64, 128, 256):
    cells = [str(head_dim)]
    for flops_per_d, exps in WORK.values():
        product_clocks = flops_per_d * head_dim / TENSOR_FLOPS_PER_CLOCK
        exp_clocks = exps / EXP2_PER_CLOCK
        # the share of the tensor cores' peak left if exp2 runs in between
        ceiling = product_clocks / (product_clocks + exp_clocks)
        cells += [f"{exp_clocks / product_clocks:.2f}", f"{ceiling:.0%} of peak"]
    rows.append("| " + " | ".join(cells) + " |")
# --8<-- [end:budget]
print("\n".join(rows))
with open("exp_budget.md", "w") as f:
    f.write("\n".join(rows) + "\n")
