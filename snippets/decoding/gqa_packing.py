"""GQA packing: how the decode kernel fills the rows of one tile with the query heads
that share a KV head, at every query position, so that each K and V tile is loaded
once per KV head. Prints the rows of the tile of KV head 1, with the last key each row
may see under the bottom-right causal mask."""

heads, kv_heads, seqlen_q, seqlen_k = 8, 2, 3, 10
group = heads // kv_heads  # query heads per KV head

# --8<-- [start:rows]
# Row r of KV head hk's tile is query position r // group of query head
# hk * group + r % group: for one position, the group's heads are adjacent rows (and
# adjacent in memory, in the (batch, seqlen, heads, head_dim) layout).
kv_head = 1
rows = group * seqlen_q
print(
    f"{heads} query heads over {kv_heads} KV heads (groups of {group}), "
    f"{seqlen_q} queries, {seqlen_k} keys in the cache"
)
print(f"tile of KV head {kv_head}: {rows} rows (padded to 16 for the tensor cores)")
for r in range(rows):
    position, head = r // group, kv_head * group + r % group
    last_key = position + seqlen_k - seqlen_q  # bottom-right alignment
    print(f"  row {r:2d}: query {position}, head {head}, sees keys 0..{last_key}")
# --8<-- [end:rows]

# --8<-- [start:traffic]
# Without packing, each query head's program loads its group's K and V itself.
head_dim, cache, bytes_per = 128, 32768, 2
kv = 2 * cache * head_dim * bytes_per  # K and V of one KV head, one sequence
mib = kv / 2**20
print(f"\nK+V of one KV head at {cache} tokens, d = {head_dim}, bf16: {mib:.0f} MiB")
print(
    f"loaded once per query head: {group * mib:.0f} MiB per group; "
    f"packed: {mib:.0f} MiB"
)
# --8<-- [end:traffic]
