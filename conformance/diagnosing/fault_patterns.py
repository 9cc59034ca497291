"""Naming the shape of a failure from where its excess sits (localization.Profiles).

Each check below looks for one fault class's footprint and, when it finds it, says so with
the evidence (the share of the excess in the region, and what the region is). The checks
run from the most specific to the most general; the first that matches names the pattern.
"unclassified" is an honest answer: the evidence then lists where the excess is largest.

All functions are pure: Profiles and Geometry in, (pattern, evidence) out.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

from conformance.diagnosing.geometry import GRID, Geometry, pattern_grid
from conformance.diagnosing.localization import Profiles, binned

# A region "holds" the excess when it carries at least this share of it; "clean" when at most.
ONLY = 0.9
CLEAN = 0.001
# The causal band must be at most this share of its cells, or every failure would lie in it.
BAND_AT_MOST = 0.6
Named = Optional[tuple[str, str]]


def _share(x: torch.Tensor) -> float:
    return float(x.sum())


def _rows_word(g: Geometry) -> str:
    return "key" if g.key_rows else "query"


def no_visible_key(found: Profiles, g: Geometry) -> Named:
    rows = 0 if g.key_rows else g.no_visible_key_rows()
    share = _share(found.rows[:rows])
    if rows and share >= ONLY:
        return ("rows with no visible key",
                f"{share:.0%} of the excess in the first {rows} query rows, which see no key "
                f"(causal, Sq {g.seq_q} > Sk {g.seq_k})")
    return None


def one_element(found: Profiles, g: Geometry) -> Named:
    if found.elements > 1 and found.largest_element >= ONLY:
        return "one element", f"{found.largest_element:.0%} of the excess in a single element of {found.elements}"
    return None


def head_dim_tail(found: Profiles, g: Geometry) -> Named:
    columns = found.columns
    if columns is None or columns.numel() < 2:
        return None
    tail_from = int((columns.flip(0).cumsum(0) < ONLY).sum())  # columns counted from the end
    start = columns.numel() - tail_from - 1
    if start >= 1 and columns.numel() - start <= columns.numel() // 2:
        return ("a head-dim tail",
                f"{_share(columns[start:]):.0%} of the excess in head-dim columns {start}..{columns.numel() - 1} "
                f"of {columns.numel()}, {_share(columns[:start]):.1%} before them")
    return None


def _heads(found: Profiles) -> torch.Tensor:
    return found.slices.sum(dim=0)


def kv_head_mapping(found: Profiles, g: Geometry) -> Named:
    """Damaged query heads that are not whole kv groups, the same in every batch."""
    if g.key_rows or not 1 <= g.kv_heads < g.query_heads:
        return None
    damaged = found.slices > CLEAN
    group = g.query_heads // g.kv_heads
    per_group = damaged.any(dim=0).reshape(g.kv_heads, group)
    partial_groups = (per_group.any(dim=1) & ~per_group.all(dim=1)).any()
    same_in_batches = bool((damaged == damaged[0]).all())
    if not partial_groups or not same_in_batches or not damaged[0].any():
        return None
    bad = [h for h in range(g.query_heads) if damaged[0, h]]
    good = [h for h in range(g.query_heads) if not damaged[0, h]]
    return ("the kv-head mapping (GQA)",
            f"query heads {_listed(bad)} of {g.query_heads} carry the excess in every batch, heads "
            f"{_listed(good)} none: not whole kv groups of {group}, as a wrong query -> kv head map gives")


def one_kv_group(found: Profiles, g: Geometry) -> Named:
    if g.kv_heads < 2:
        return None
    heads = _heads(found)
    groups = heads if g.key_rows else heads.reshape(g.kv_heads, -1).sum(dim=1)
    share, worst = float(groups.max()), int(groups.argmax())
    if share >= ONLY:
        return "one kv-head group", f"{share:.0%} of the excess in kv head {worst}'s group of {g.kv_heads} groups"
    return None


def all_but_first(found: Profiles, g: Geometry) -> Named:
    """Every batch (or head) but the first damaged: an offset dropped from a pointer."""
    for axis, word, count in ((1, "batch", g.batch), (0, "head", g.heads)):
        words = "batches" if word == "batch" else "heads"
        shares = found.slices.sum(dim=axis)
        if count > 1 and float(shares[0]) <= CLEAN and bool((shares[1:] > CLEAN).all()):
            return (f"every {word} but the first",
                    f"{word} 0 carries {float(shares[0]):.1%} of the excess, each of {words} 1..{count - 1} some: "
                    f"the first {word}'s offset (zero) is the only one right")
    return None


def one_slice(found: Profiles, g: Geometry) -> Named:
    if found.slices.numel() > 1 and float(found.slices.max()) >= ONLY:
        b, h = divmod(int(found.slices.argmax()), found.slices.shape[1])
        return "one (batch, head) slice", f"{float(found.slices.max()):.0%} of the excess in batch {b}, head {h}"
    return None


# Tile sizes tried, largest first, when the kernel's are not known: kernels tile by powers of two.
GUESSED_TILES = (128, 64, 32, 16)


def _tiles(tile: int | None) -> list[tuple[int, str]]:
    """Block sizes a region is looked for at: the kernel's tile when known, else every
    power-of-two tile a kernel might use (the largest that fits is named)."""
    if tile:
        return [(tile, "the kernel's tile")]
    return [(size, f"a {size}-row tile") for size in GUESSED_TILES]


def partial_last_rows(found: Profiles, g: Geometry) -> Named:
    for tile, what in _tiles(g.row_tile):
        tail = g.rows % tile
        start = g.rows - tail
        if tail and 2 * tail <= g.rows and _share(found.rows[start:]) >= ONLY:
            return (f"the last partial {_rows_word(g)} block",
                    f"{_share(found.rows[start:]):.0%} of the excess in {_rows_word(g)} rows {start}..{g.rows - 1}, "
                    f"the partial last block of {tile} ({what}) of {g.rows} rows")
    return None


def first_rows(found: Profiles, g: Geometry) -> Named:
    for tile, what in _tiles(g.row_tile):
        if 2 * tile <= g.rows and _share(found.rows[:tile]) >= ONLY:
            return (f"the first {_rows_word(g)} block only",
                    f"{_share(found.rows[:tile]):.0%} of the excess in {_rows_word(g)} rows 0..{tile - 1} "
                    f"({what}) of {g.rows}")
    return None


def partial_last_keys(found: Profiles, g: Geometry) -> Named:
    if found.map is None or g.key_rows:
        return None
    keys = found.map.sum(dim=0) if found.padding_keys is not None else found.map[:, :-1].sum(dim=0)
    for tile, what in _tiles(g.key_tile):
        tail = g.seq_k % tile
        start = g.seq_k - tail
        share = _share(keys[start // found.map_grid:])
        if tail and 2 * tail <= g.seq_k and tile >= found.map_grid and share >= ONLY:
            padding = (f" and the padding after them (every damaged row as if {found.padding_keys:.0f} zero keys "
                       "were visible)") if found.padding_keys is not None else ""
            return ("the last partial key block",
                    f"{share:.0%} of the excess attributed to keys {start}..{g.seq_k - 1}{padding}, the partial last "
                    f"block of {tile} ({what})")
    return None


def row_scaling(found: Profiles, g: Geometry) -> Named:
    """Each row of out scaled by a factor of its own that padding does not explain."""
    if found.map is None or found.padding_keys is not None:
        return None
    share = float(found.map[:, -1].sum())
    if share >= ONLY:
        return ("each row scaled by its own factor",
                f"{share:.0%} of the excess is along each row's own output (kernel row = c_i x reference row, "
                "c_i varying): a row sum or normaliser wrong")
    return None


def one_other_block(found: Profiles, g: Geometry) -> Named:
    """One block of the other axis (a key block of every query row, or a query block of
    every key row) holds the excess: a tile of the loop dropped or taken twice."""
    if found.map is None:
        return None
    other = found.map.sum(dim=1) if g.key_rows else found.map[:, :-1].sum(dim=0)
    word, length = ("query", g.seq_q) if g.key_rows else ("key", g.seq_k)
    for tile, what in _tiles(g.other_tile):
        if tile < found.map_grid or 2 * tile > length:
            continue
        blocks = binned(other, tile // found.map_grid)
        share, block = float(blocks.max()), int(blocks.argmax())
        if share >= ONLY:
            which = "the first " if block == 0 else "the last " if (block + 1) * tile >= length else ""
            return (f"one {word} block",
                    f"{share:.0%} of the excess attributed to {which}{'queries' if g.key_rows else 'keys'} {block * tile}.."
                    f"{min(length, (block + 1) * tile) - 1} ({what}) of {length}, in the {_rows_word(g)} rows "
                    "that carry it")
    return None


def causal_band(found: Profiles, g: Geometry) -> Named:
    """The cells the diagonal crosses (a mask off by one), or those and the key tile after
    them (a mask a tile late), hold the excess while being a minority of the cells."""
    if found.map is None or not g.causal:
        return None
    keys = found.map[:, :-1]
    for after, what in ((0, "crosses"), (g.key_tile or found.map_grid, "crosses or the key tile after")):
        band, cells = band_cells(keys.shape, found.map_grid, after, g.seq_q, g.seq_k)
        share = _share(keys[band])
        if share >= ONLY - 0.1 and int(band.sum()) <= BAND_AT_MOST * int(cells.sum()):
            return ("the causal diagonal band",
                    f"{share:.0%} of the excess in the (query block, key block) cells the diagonal j = i + Sk - Sq "
                    f"{what} ({int(band.sum())} of {int(cells.sum())} cells of visible or bordering keys)")
    return None


def band_cells(shape, grid: int, after: int, seq_q: int, seq_k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(band, cells) masks over the map's cells: a key bin is in a query bin's band when it
    holds a diagonal key j = i + Sk - Sq of the bin's rows or lies in the `after` keys past
    them (where a tile-late mask lets future keys in); `cells` is the band and every visible
    cell. Rows that see no key have no band."""
    shift = seq_k - seq_q
    first_row = torch.arange(shape[0]) * grid
    last_row = (first_row + grid - 1).clamp_max(seq_q - 1)
    key_start = torch.arange(shape[1]) * grid
    diagonal_lo = ((first_row + shift).clamp_min(0) // grid) * grid
    diagonal_hi = ((last_row + shift) // grid + 1) * grid + after
    band = ((key_start[None, :] >= diagonal_lo[:, None]) & (key_start[None, :] < diagonal_hi[:, None])
            & (last_row + shift >= 0)[:, None])
    visible = key_start[None, :] <= (last_row + shift)[:, None]
    return band, visible | band


def dropout_rescale(found: Profiles, g: Geometry) -> Named:
    if not g.dropout or found.factor is None:
        return None
    for expected, what in ((1 - g.dropout, "kept weights not rescaled by 1/(1-p)"),
                           (1 / (1 - g.dropout), "rescaled twice")):
        if abs(found.factor - expected) <= 0.02 * expected:
            return ("dropout-kept elements only",
                    f"kernel = {found.factor:.4g} x reference everywhere, = {expected:.4g} for p = {g.dropout:g}: {what}")
    return None


def common_factor(found: Profiles, g: Geometry) -> Named:
    if found.factor is None:
        return None
    meaning = ("nothing of it was computed or accumulated" if abs(found.factor) < 0.05
               else "a scale or a normalisation")
    return ("every element by a common factor",
            f"kernel = {found.factor:.4g} x reference explains >= 90% of the squared error: {meaning}")


def every_row(found: Profiles, g: Geometry) -> Named:
    skipped = 0 if g.key_rows else g.no_visible_key_rows()
    grid = pattern_grid(g.rows - skipped)
    blocks = binned(found.rows[skipped:], grid)
    if blocks.numel() < 4:
        return None
    damaged = int((blocks > CLEAN / blocks.numel()).sum())
    largest = float(blocks.max()) * blocks.numel()
    if damaged >= 0.75 * blocks.numel() and largest <= 3:
        return ("every row uniformly",
                f"excess in {damaged} of {blocks.numel()} blocks of {grid} {_rows_word(g)} rows, none above "
                f"{largest:.1f}x its even share: a formula or scale error, not a region")
    return None


CHECKS: tuple[Callable[[Profiles, Geometry], Named], ...] = (
    no_visible_key, one_element, head_dim_tail, kv_head_mapping, one_kv_group, all_but_first, one_slice,
    causal_band, partial_last_rows, first_rows, partial_last_keys, one_other_block, dropout_rescale,
    common_factor, row_scaling, every_row,
)


def name(found: Profiles, g: Geometry) -> tuple[str, str]:
    """(pattern, evidence) of a failing tensor: the first check that matches, or unclassified."""
    for check in CHECKS:
        named = check(found, g)
        if named:
            return named
    return "unclassified", _largest_regions(found, g)


def specificity(pattern: str) -> int:
    """A pattern's rank, most specific first: the order of CHECKS; unclassified last."""
    names = [check.__name__ for check in CHECKS]
    return names.index(PATTERN_CHECK[pattern]) if pattern in PATTERN_CHECK else len(names)


# The check that names each pattern (for specificity; patterns with a variable word share it).
PATTERN_CHECK = {
    "rows with no visible key": "no_visible_key", "one element": "one_element",
    "a head-dim tail": "head_dim_tail", "the kv-head mapping (GQA)": "kv_head_mapping",
    "one kv-head group": "one_kv_group", "every batch but the first": "all_but_first",
    "every head but the first": "all_but_first", "one (batch, head) slice": "one_slice",
    "the last partial query block": "partial_last_rows", "the last partial key block": "partial_last_rows",
    "the first query block only": "first_rows", "the first key block only": "first_rows",
    "one query block": "one_other_block", "one key block": "one_other_block",
    "the causal diagonal band": "causal_band", "each row scaled by its own factor": "row_scaling",
    "dropout-kept elements only": "dropout_rescale",
    "every element by a common factor": "common_factor", "every row uniformly": "every_row",
    # regions of non-finite elements (nonfinite_regions), ranked beside their nearest kin
    "one query row": "one_element", "one key row": "one_element", "head-dim columns": "head_dim_tail",
    "one head": "one_slice", "some heads": "one_slice", "one batch": "all_but_first",
    "some batches": "all_but_first", "some (batch, head) slices": "all_but_first",
    "query blocks": "first_rows", "key blocks": "first_rows", "query rows": "first_rows", "key rows": "first_rows",
}


def _largest_regions(found: Profiles, g: Geometry) -> str:
    blocks = binned(found.rows, GRID)
    top = torch.argsort(blocks, descending=True)[:3].tolist()
    rows = ", ".join(f"{_rows_word(g)} rows {i * GRID}.. ({float(blocks[i]):.0%})" for i in top if blocks[i] > 0)
    slices = int((found.slices > CLEAN).sum())
    return f"no single region: largest {rows}; {slices} of {found.slices.numel()} (batch, head) slices"


def _listed(values: list[int]) -> str:
    return ",".join(str(v) for v in values)
