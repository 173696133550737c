"""FlashAttention's tiles sweeping over the score matrix, as a video: first without a
mask, then causal.

The forward kernel runs one program per block of queries (a row of tiles). Every program
walks along its row one key/value block at a time, computing a tile of scores in on-chip
memory, folding it into a running max, sum and output, and never writing the tile out.
All programs run at once, so a whole column of tiles is in flight at each step. Under a
causal mask a program stops at the diagonal: tiles above it are never computed, and only
the tiles on the diagonal need the mask itself. Writing the video needs imageio-ffmpeg
(pip install imageio-ffmpeg), which brings its own ffmpeg.
"""

import imageio_ffmpeg
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import Patch, Rectangle

T = 8  # tiles per side: e.g. 1024 tokens in blocks of 128
FPS, FRAMES_PER_STEP, HOLD_STEPS = 4, 2, 3
COLORS = {"todo": "#eceff1", "done": "#90caf9", "now": "#ff7043", "skipped": "#ffffff"}
EDGE = "#607d8b"  # the tiles' outlines
LEGEND = {
    "now": "computing now",
    "done": "computed",
    "todo": "not yet",
    "skipped": "never computed",
}


def steps(causal):
    """Per step k: the state of each tile (i, j). Program i handles tile (i, k)
    at step k."""
    for k in range(T + HOLD_STEPS):
        state = np.full((T, T), "todo", dtype=object)
        for i in range(T):
            last = i if causal else T - 1  # a causal program stops at the diagonal tile
            for j in range(T):
                if j > last:
                    state[i, j] = "skipped"
                elif j < k or k > last:
                    state[i, j] = "done"
                elif j == k:
                    state[i, j] = "now"
        yield k, state


def draw(ax_grid, ax_rows, k, state, causal):
    ax_grid.clear()
    ax_rows.clear()
    for (i, j), s in np.ndenumerate(state):
        ax_grid.add_patch(
            Rectangle(
                (j, i),
                1,
                1,
                facecolor=COLORS[s],
                edgecolor=EDGE,
                linewidth=0.8,
                hatch="//" if causal and i == j and s != "todo" else None,
            )
        )
    ax_grid.set(
        xlim=(0, T),
        ylim=(T, 0),
        aspect="equal",
        xticks=np.arange(T) + 0.5,
        yticks=np.arange(T) + 0.5,
        xticklabels=[f"K{j}" for j in range(T)],
        yticklabels=[f"Q{i}" for i in range(T)],
    )
    ax_grid.tick_params(length=0)
    handles = [
        Patch(facecolor=COLORS[s], edgecolor=EDGE, label=label)
        for s, label in LEGEND.items()
    ]
    if causal:
        handles.append(
            Patch(facecolor="white", edgecolor=EDGE, hatch="//", label="mask applied")
        )
    ax_grid.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.06),
        ncols=3,
        fontsize=8,
        frameon=False,
    )
    mask = "Causal" if causal else "No mask"
    ax_grid.set_title(f"{mask} — step {min(k, T - 1) + 1} of {T}")

    finished = [k > (i if causal else T - 1) for i in range(T)]
    visited = [min(k + 1, (i + 1) if causal else T) for i in range(T)]
    total = [(i + 1) if causal else T for i in range(T)]
    ax_rows.barh(range(T), total, color=COLORS["todo"], edgecolor=EDGE, linewidth=0.8)
    colors = [COLORS["done"] if f else COLORS["now"] for f in finished]
    ax_rows.barh(range(T), visited, color=colors)
    for i in range(T):
        label = "O written" if finished[i] else f"{visited[i]}/{total[i]} tiles"
        ax_rows.text(T + 0.2, i, label, va="center", fontsize=9)
    ax_rows.set(
        xlim=(0, T + 3),
        ylim=(T - 0.5, -0.5),
        yticks=range(T),
        yticklabels=[f"program {i}" for i in range(T)],
        xticks=[],
        title="Each program's row",
    )
    for side in ("top", "right", "bottom"):
        ax_rows.spines[side].set_visible(False)


fig, (ax_grid, ax_rows) = plt.subplots(
    1, 2, figsize=(9.6, 5.4), dpi=100, width_ratios=(1, 0.8), layout="constrained"
)
fig.get_layout_engine().set(w_pad=0.3)
fig.suptitle(
    "FlashAttention forward: one program per block of queries, "
    "one tile of scores at a time"
)
width, height = fig.canvas.get_width_height()
writer = imageio_ffmpeg.write_frames(
    "tile_sweep.mp4",
    (width, height),
    fps=FPS,
    codec="libx264",
    pix_fmt_out="yuv420p",
    macro_block_size=2,  # 960x540 is even, which is all yuv420p needs
    # metadata first, so a browser can show it before downloading
    output_params=["-movflags", "+faststart"],
)
writer.send(None)  # start the encoder

computed = {}
for causal in (False, True):
    for k, state in steps(causal):
        draw(ax_grid, ax_rows, k, state, causal)
        fig.canvas.draw()
        frame = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy(order="C")
        for _ in range(FRAMES_PER_STEP):
            writer.send(frame)
        if causal and k == T // 2:
            fig.savefig("tile_sweep_poster.png")
    computed[causal] = int((state == "done").sum())
writer.close()
plt.close(fig)

print(
    f"{T}x{T} tiles; tiles computed without a mask: {computed[False]}, "
    f"with a causal mask: {computed[True]}"
)
print(
    f"the causal kernel computes {computed[True] / computed[False]:.0%} of the tiles "
    f"(the limit for large T is 50%); only the {T} diagonal tiles need the mask applied"
)
