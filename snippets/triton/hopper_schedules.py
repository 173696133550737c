"""Timelines of Hopper schedules: the producer/consumer ring, FA-3's two overlaps.

A model, not a measurement: every tile's QK^T and PV products take one time unit each on
the tensor cores, and its softmax takes `softmax` units on the other units (at head
dimension 64 the exponentials alone take about as long as both products). The program
lays out each schedule step by step, prints how busy it keeps the tensor cores, and
draws it.
"""

import matplotlib.pyplot as plt

TILES, softmax = 4, 2.0
COLOURS = {"QK": "#3f51b5", "PV": "#7986cb", "softmax": "#ff9800", "load": "#4caf50"}
LABEL = dict(ha="center", va="center", color="white")  # a label centred on its bar


# --8<-- [start:schedules]
def serial():
    """One warpgroup, one step after the other: QK^T, softmax, PV."""
    bars, t = [], 0.0
    for j in range(TILES):
        bars += [
            ("tensor cores", t, 1, "QK", j),
            ("WG 1", t + 1, softmax, "softmax", j),
            ("tensor cores", t + 1 + softmax, 1, "PV", j),
        ]
        t += 2 + softmax
    return bars


def intra_warpgroup():
    """One warpgroup: tile j's softmax runs while tile j-1's PV is on the tensor
    cores."""
    bars, t = [], 0.0
    for j in range(TILES + 1):
        if j < TILES:
            bars.append(("tensor cores", t, 1, "QK", j))
        if j > 0:  # issued after QK^T of the next tile, waited for after its softmax
            bars.append(("tensor cores", t + (j < TILES), 1, "PV", j - 1))
        if j < TILES:
            bars.append(("WG 1", t + 1, softmax, "softmax", j))
        t += 1 + max(1.0, softmax) if j < TILES else 1
    return bars


def ping_pong():
    """Two warpgroups take turns on the tensor cores: while one runs its softmax, the
    other issues its products (its next QK^T and its previous tile's PV)."""
    bars, free, ready = [], 0.0, {"WG 1": 0.0, "WG 2": 0.0}
    for j in range(TILES + 1):
        for wg in ("WG 1", "WG 2"):  # each warpgroup owns its own rows of queries
            start = max(free, ready[wg])
            if j < TILES:
                bars.append(("tensor cores", start, 1, "QK", j))
            if j > 0:
                bars.append(("tensor cores", start + (j < TILES), 1, "PV", j - 1))
            free = start + (j < TILES) + (j > 0)
            if j < TILES:
                bars.append((wg, free, softmax, "softmax", j))
                ready[wg] = free + softmax
    return bars


# --8<-- [end:schedules]


def busy(bars, tiles):
    end = max(start + length for _, start, length, _, _ in bars)
    products = sum(length for row, _, length, _, _ in bars if row == "tensor cores")
    return products / end, end / tiles


def draw(bars, rows, title, filename):
    fig, ax = plt.subplots(figsize=(7, 0.6 + 0.55 * len(rows)))
    for row, start, length, kind, j in bars:
        y = len(rows) - 1 - rows.index(row)
        ax.barh(y, length, left=start, color=COLOURS[kind], edgecolor="white")
        ax.text(start + length / 2, y, f"{kind} {j}", fontsize=7, **LABEL)
    ax.set_yticks(range(len(rows)), rows[::-1])
    ax.set_xlabel("time (one unit = one product of one tile)")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(filename, dpi=150)
    plt.close(fig)


table = ["| schedule | tensor cores busy | time per tile |", "|---|---|---|"]
for name, bars, tiles in [
    ("serial, one warpgroup", serial(), TILES),
    ("intra-warpgroup pipelining", intra_warpgroup(), TILES),
    ("ping-pong, two warpgroups", ping_pong(), 2 * TILES),
]:
    share, per_tile = busy(bars, tiles)
    table.append(f"| {name} | {share:.0%} | {per_tile:.2f} units |")
print(f"softmax = {softmax} units per tile, each product 1 unit\n")
print("\n".join(table))
with open("schedules.md", "w") as f:
    f.write("\n".join(table) + "\n")

draw(
    serial(),
    ["tensor cores", "WG 1"],
    "Serial: the tensor cores wait for each softmax",
    "serial.png",
)
draw(
    intra_warpgroup(),
    ["tensor cores", "WG 1"],
    "Intra-warpgroup pipelining: softmax j overlaps PV j-1",
    "intra_warpgroup.png",
)
draw(
    ping_pong(),
    ["tensor cores", "WG 1", "WG 2"],
    "Ping-pong: one warpgroup's softmax overlaps the other's products",
    "ping_pong.png",
)


# --8<-- [start:ring]
def ring(slots=2, load=1.0, compute=1.5):
    """The producer fills a ring of `slots` shared-memory slots with K, V tiles;
    two consumers both read each tile, and the slot is free once both are done."""
    bars, ready, freed = [], [], [0.0] * slots
    producer = 0.0
    for j in range(TILES + 2):
        s = j % slots
        start = max(producer, freed[s])  # wait on the slot's "empty" barrier
        bars.append(("producer (TMA)", start, load, "load", j))
        ready.append(start + load)  # the copy lands: the slot's "ready" barrier fires
        producer = start + load
        done = []
        for wg in ("consumer 1", "consumer 2"):
            prev = max([b[1] + b[2] for b in bars if b[0] == wg], default=0.0)
            begin = max(prev, ready[j])  # wait on "ready"
            bars.append((wg, begin, compute, "QK", j))
            done.append(begin + compute)
        freed[s] = max(done)  # both consumers arrive on "empty"
    return bars


# --8<-- [end:ring]


bars = ring()
fig, ax = plt.subplots(figsize=(7, 2.2))
rows = ["producer (TMA)", "consumer 1", "consumer 2"]
for row, start, length, kind, j in bars:
    y = 2 - rows.index(row)
    colour = COLOURS["load"] if kind == "load" else ("#3f51b5", "#ff9800")[j % 2]
    ax.barh(y, length, left=start, color=colour, edgecolor="white")
    label = f"K, V {j}\nslot {j % 2}" if kind == "load" else f"tile {j}, slot {j % 2}"
    ax.text(start + length / 2, y, label, fontsize=6, **LABEL)
ax.set_yticks(range(3), rows[::-1])
ax.set_xlabel("time")
ax.set_title(
    "A ring of two slots: loads of the next tiles overlap the consumers' work",
    fontsize=10,
)
fig.tight_layout()
fig.savefig("ring.png", dpi=150)
