"""A paged KV cache: three sequences of different lengths share one pool of fixed-size
pages, and a block table maps each sequence's positions to pages. Draws the block table
and the pool, then checks that attention over the paged cache equals attention over the
same keys stored contiguously, after appending one token to each sequence."""

import matplotlib.pyplot as plt
import torch

import flashdoc

device = "cuda" if torch.cuda.is_available() else "cpu"
g = torch.Generator().manual_seed(0)

# --8<-- [start:pool]
page_size, n_pages = 16, 14  # vLLM's default page size; any multiple of 16 works
lengths = [40, 90, 20]  # tokens already cached per sequence
kv_heads, head_dim = 2, 32
pages_per_seq = [-(-(n + 1) // page_size) for n in lengths]  # room for one more token
max_pages = max(pages_per_seq)

# Pages are handed out in any order (here: shuffled), as an allocator that recycles
# the pages of finished sequences would. Unused table entries hold 0, which may also
# be a page in use: they are never read, because each sequence's length says where
# its keys end.
order = torch.randperm(n_pages, generator=g).tolist()
block_table = torch.zeros(len(lengths), max_pages, dtype=torch.int32)
for b, n in enumerate(pages_per_seq):
    block_table[b, :n] = torch.tensor([order.pop() for _ in range(n)])
# --8<-- [end:pool]
print("block_table (sequence x logical page -> page in the pool):")
print(block_table)

# --8<-- [start:figure]
colors = ["#4C72B0", "#DD8452", "#55A868"]
fig, (ax_table, ax_pool) = plt.subplots(
    2, 1, figsize=(9, 4.6), gridspec_kw=dict(height_ratios=[3, 1.4])
)
owner = {}  # pool page -> (sequence, logical page, tokens used)
for b, n in enumerate(pages_per_seq):
    for j in range(max_pages):
        if j < n:
            page = int(block_table[b, j])
            used = min(page_size, lengths[b] + 1 - j * page_size)
            owner[page] = (b, j, used)
            alpha = 0.35 + 0.65 * used / page_size
            cell = plt.Rectangle((j, -b - 1), 1, 1, color=colors[b], alpha=alpha)
            ax_table.add_patch(cell)
            ax_table.text(
                j + 0.5, -b - 0.5, str(page), ha="center", va="center", fontsize=11
            )
        else:
            ax_table.add_patch(plt.Rectangle((j, -b - 1), 1, 1, color="#eeeeee"))
for x in range(max_pages + 1):
    ax_table.plot([x, x], [0, -len(lengths)], color="white", lw=2)
ax_table.set_xlim(0, max_pages)
ax_table.set_ylim(-len(lengths), 0)
ax_table.set_yticks(
    [-b - 0.5 for b in range(len(lengths))],
    [f"seq {b}: {n}+1 tokens" for b, n in enumerate(lengths)],
)
ax_table.set_xticks(
    [j + 0.5 for j in range(max_pages)],
    [f"{j * page_size}-{(j + 1) * page_size - 1}" for j in range(max_pages)],
)
ax_table.set_xlabel("positions held by the logical page (a block-table column)")
ax_table.set_title(
    f"block_table[b, j]: the pool page holding positions "
    f"{page_size}j .. {page_size}j+{page_size - 1} of sequence b",
    fontsize=10,
)
for page in range(n_pages):
    b, j, used = owner.get(page, (None, None, 0))
    color = colors[b] if b is not None else "#eeeeee"
    alpha = 0.35 + 0.65 * used / page_size if used else 1.0
    ax_pool.add_patch(plt.Rectangle((page, 0), 0.95, 1, color=color, alpha=alpha))
    label = f"{page}\nfree" if b is None else f"{page}\ns{b} p{j}"
    ax_pool.text(page + 0.47, 0.5, label, ha="center", va="center", fontsize=8)
ax_pool.set_xlim(0, n_pages)
ax_pool.set_ylim(0, 1)
ax_pool.axis("off")
ax_pool.set_title(
    f"the pool: {n_pages} pages of {page_size} tokens (paler: partly filled)",
    fontsize=10,
)
fig.tight_layout()
fig.savefig("paged_cache.png", dpi=150)
# --8<-- [end:figure]

# --8<-- [start:check]
# The pool as k_cache/v_cache of shape (pages, page_size, kv_heads, head_dim); each
# sequence's keys also laid out contiguously, to compare with.
k_pool = torch.randn(n_pages, page_size, kv_heads, head_dim, generator=g)
v_pool = torch.randn(n_pages, page_size, kv_heads, head_dim, generator=g)
q = torch.randn(len(lengths), 1, 4, head_dim, generator=g)  # 4 query heads, GQA
k_new = torch.randn(len(lengths), 1, kv_heads, head_dim, generator=g)
v_new = torch.randn(len(lengths), 1, kv_heads, head_dim, generator=g)
cap = max_pages * page_size
# pool[block_table] gathers each sequence's pages in order: (batch, max_pages, ...)
k_flat = k_pool[block_table].reshape(len(lengths), cap, kv_heads, head_dim)
v_flat = v_pool[block_table].reshape(len(lengths), cap, kv_heads, head_dim)
seqlens = torch.tensor(lengths, dtype=torch.int32, device=device)
k_pool, v_pool, k_flat, v_flat, q, k_new, v_new = (
    t.to(device) for t in (k_pool, v_pool, k_flat, v_flat, q, k_new, v_new)
)
# one decode step on each: append the new token at position lengths[b], then attend
table = block_table.to(device)
paged = flashdoc.flash_attn_with_kvcache(
    q, k_pool, v_pool, k_new, v_new, cache_seqlens=seqlens, block_table=table
)
flat = flashdoc.flash_attn_with_kvcache(
    q, k_flat, v_flat, k_new, v_new, cache_seqlens=seqlens
)
diff = (paged - flat).abs().max()
print(f"paged vs contiguous output: largest difference {diff:.1e}")
b, pos = 1, lengths[1]  # where sequence 1's new key went
page = int(block_table[b, pos // page_size])
print(
    f"sequence {b}'s new key is row {pos % page_size} of pool page {page}: "
    f"{torch.equal(k_pool[page, pos % page_size], k_new[b, 0])}"
)
# --8<-- [end:check]
