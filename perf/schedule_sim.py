"""How evenly the Hopper forward's work items spread over the SMs, under a simple model (session 10).

An item of a causal forward costs its key tiles plus a fixed overhead per item (in tile units); SMs run one
program each. Compares, as the fraction of the ideal (total work / SMs) each achieves:

- one program per item, launched heaviest first: greedy, with the launch's per-program overhead;
- a persistent grid taking items round-robin, back and forth ("snake"), the static schedule tried first;
- a persistent grid claiming items from a counter (greedy, heaviest first): what forward_hopper.py does.

    python perf/schedule_sim.py

The H200 agreed on the ranking (perf/NOTES.md, session 10): the snake collapses at long causal N, the counter
does not. The model overstates how much persistence itself gains (its per-item overheads are guesses).
"""

import heapq

SMS = 132


def item_costs(seqlen, rows, block_n=128, heads=1):
    """Key tiles of each causal item: `heads` heads of ceil(seqlen / rows) items, the heaviest first."""
    n_items = -(-seqlen // rows)
    return [-(-min((t + 1) * rows, seqlen) // block_n) for _ in range(heads) for t in reversed(range(n_items))]


def greedy(costs, overhead):
    """Each item to the program that frees up first (a counter, or the hardware's block scheduler)."""
    finish = [0.0] * SMS
    for c in costs:
        heapq.heappush(finish, heapq.heappop(finish) + c + overhead)
    return max(finish)


def snake(costs, overhead):
    """Round r gives item r * SMS + p to program p (even r) or SMS - 1 - p (odd r)."""
    total = [0.0] * SMS
    for i, c in enumerate(costs):
        r, p = divmod(i, SMS)
        total[p if r % 2 == 0 else SMS - 1 - p] += c + overhead
    return max(total)


if __name__ == "__main__":
    print("fraction of ideal (total work / SMs); d = 128, 192-row items, 16k tokens per batch, 16 heads")
    for seqlen in (2048, 4096, 8192, 16384):
        costs = item_costs(seqlen, 192, heads=16384 // seqlen * 16)
        ideal = sum(costs) / SMS
        print(f"N={seqlen:>5}: one per item {ideal / greedy(costs, 3.6):.2f}  snake {ideal / snake(costs, 1):.2f}  "
              f"counter {ideal / greedy(costs, 1):.2f}")
