"""Notebook 14: what a Triton kernel's program instances do.

- ``program_grid()`` (a schematic): a vector cut into blocks, one program instance per block, the last block's
  lanes past the end switched off by the mask;
- ``matmul_tile()`` (a schematic): one program instance's tile of C, and the strips of A and B it reads, a
  BK-wide piece at a time.
"""

from __future__ import annotations

from gpulab.figures import COLORS, arrow, box, canvas, label, rank_color

N, BLOCK = 14, 4  # the picture's vector: 14 elements, 4 per program instance


def program_grid(n: int = N, block: int = BLOCK):
    """Elements 0..n-1 in a row, coloured by the program instance that handles them; masked lanes greyed."""
    instances = -(-n // block)
    lanes = instances * block
    w = 0.55
    fig, ax = canvas(1.2 + lanes * w + 0.6, 4.3, f"A kernel's grid: {instances} program instances, BLOCK = {block}, "
                                                  f"n = {n}")
    x0, y = 1.2, 1.6
    label(ax, 0.1, y + 0.25, "data", ha="left", weight="bold")
    label(ax, 0.1, y + 1.55, "grid", ha="left", weight="bold")
    for pid in range(instances):
        left = x0 + pid * block * w
        box(ax, left, y + 1.25, block * w - 0.08, 0.6, f"program_id(0) = {pid}", color=rank_color(pid), fontsize=8)
        for lane in range(block):
            i = pid * block + lane
            inside = i < n
            box(ax, left + lane * w, y, w - 0.06, 0.5, str(i) if inside else "", rounded=False, fontsize=8,
                color=rank_color(pid) if inside else COLORS["idle"], alpha=1.0 if inside else 0.5)
            label(ax, left + lane * w + (w - 0.06) / 2, y - 0.25, "T" if inside else "F", fontsize=8)
        arrow(ax, (left + (block * w - 0.08) / 2, y + 1.25), (left + (block * w - 0.08) / 2, y + 0.55))
    label(ax, 0.1, y - 0.25, "mask", ha="left", weight="bold", fontsize=9)
    label(ax, x0, 0.55, f"offsets = pid * BLOCK + tl.arange(0, BLOCK);  mask = offsets < n  (T: load and store, "
                         "F: switched off)", ha="left", fontsize=9)
    label(ax, x0 + n * w + 0.05, y + 0.75, "past the end", ha="left", fontsize=8, color=COLORS["text"])
    return fig


def matmul_tile():
    """C = A @ B: the tile of C one program instance computes, and the strips of A and B it reads."""
    fig, ax = canvas(9.4, 6.2, "One program instance: a tile of C, from a strip of A and a strip of B")
    # B on top (K x N), A on the left (M x K), C bottom right (M x N)
    ax_, ay, side = 0.4, 0.5, 3.6
    cx, cy = ax_ + side + 0.5, ay
    bx, by = cx, ay + side + 0.5
    box(ax, ax_, ay, side, side, "", color=COLORS["light"], rounded=False)
    box(ax, bx, by, side, 1.3, "", color=COLORS["light"], rounded=False)
    box(ax, cx, cy, side, side, "", color=COLORS["light"], rounded=False)
    label(ax, ax_ + side / 2, ay - 0.25, "A  (M x K)", weight="bold")
    label(ax, bx + side + 0.3, by + 0.65, "B\n(K x N)", weight="bold", ha="left")
    label(ax, cx + side + 0.3, cy + side / 2, "C = A @ B\n(M x N)", weight="bold", ha="left")
    t = 0.9  # the tile's side in the picture
    row0, col0 = 1, 2  # this instance's tile: program_id(0) = 1, program_id(1) = 2
    tile_y = cy + side - (row0 + 1) * t
    tile_x = cx + col0 * t
    box(ax, tile_x, tile_y, t, t, "tile\nBM x BN", color=COLORS["gpu"], rounded=False, fontsize=8)
    box(ax, ax_, tile_y, side, t, "", color=COLORS["cpu"], rounded=False, alpha=0.35)
    box(ax, tile_x, by, t, 1.3, "", color=COLORS["memory"], rounded=False, alpha=0.35)
    for k, x in enumerate((ax_, ax_ + 1.2, ax_ + 2.4)):  # BK-wide pieces along K
        box(ax, x + 0.05, tile_y + 0.05, 1.1, t - 0.1, f"k = {k}", color=COLORS["cpu"], rounded=False, fontsize=8)
    for k, y in enumerate((by + 0.87, by + 0.44, by + 0.01)):
        box(ax, tile_x + 0.05, y, t - 0.1, 0.4, f"k = {k}", color=COLORS["memory"], rounded=False, fontsize=7)
    arrow(ax, (ax_ + side, tile_y + t / 2), (tile_x, tile_y + t / 2), "BM rows of A")
    arrow(ax, (tile_x + t / 2, by), (tile_x + t / 2, tile_y + t), "")
    label(ax, tile_x + t + 0.1, by - 0.25, "BN columns of B", ha="left", fontsize=9)
    label(ax, 0.4, by + 1.1, "program_id(0) picks the rows,\nprogram_id(1) the columns;\nthe loop over k adds "
                             "tl.dot(a_piece, b_piece)\ninto the tile, BK at a time", ha="left", fontsize=9)
    return fig


STATIC = {"14-program-grid": program_grid, "14-matmul-tile": matmul_tile}
