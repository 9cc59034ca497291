"""The tiles of a packed (varlen) batch that hold tokens, in the order its programs take them.

A varlen launch over the longest sequence's tiles for every sequence (kernels.sequences) runs
a program for each (tile, sequence x head), and most of them, past a short sequence's end,
return at once.  They are not free: each takes a launch slot and its shared memory, and reads
its sequence's offsets before it knows to stop.  On the variants benchmark's packed batch (16
sequences of mixed lengths, S = 8192) three programs in four were such, and the forward ran
at 0.85-0.90 of the dense kernel's TFLOP/s for ~4 % of tile padding.

So a launch over a tile list runs one program per tile that holds tokens: program w of grid
axis 0 takes sequence tiles[0, w], tile tiles[1, w] (blocks.program_coordinates), and grid
axis 1 the heads.  The order is the one in which the GPU starts them: the longest sequence
first, and within a sequence the tile with the most work first -- a causal query tile's keys
grow with its index, a causal key tile's queries shrink with its -- so the launch ends on its
lightest tiles, not on the longest sequence's last query tile.  On an H100 (an fp16 sweep of
the forward, reports/h100-sm90/variants/tuning/tile-list/, whose 16 rows all launched the
varlen table's configuration, as found later: tuning/tune-varlen-judged/; so sixteen repeats
of one comparison) the lists were ahead of the longest sequence's grid in 14, by -1.1 % to
+7.0 %; the varlen forward's ratio to the dense kernel's TFLOP/s did not rise with them
(variants/benchmark-0a42d67/).

The host knows the offsets (kernels.validation checked them); a list is made once per
(cu_seqlens tensor, tile size, order) and kept while the tensor lives unchanged, as the
checked offsets are.  Under CUDA graph capture a list not made before is not made (its copy to
the device could not be captured): the launch then takes the grid over the longest sequence.
"""

from __future__ import annotations

import torch

from .launch import ceil_div
from .tensor_memo import TensorMemo

# Lists by (cu_seqlens tensor, tile size, order), kernels.tensor_memo.
_LISTS = TensorMemo(kept=64)


def tile_order(offsets: list[int], block: int, last_tile_first: bool) -> list[tuple[int, int]]:
    """(sequence, tile) of every tile of `block` tokens that holds one of a packed batch's
    sequences (`offsets`: cu_seqlens as ints): longest sequence first (ties in batch order),
    each sequence's tiles from its last with last_tile_first, else from its first."""
    lengths = [after - before for before, after in zip(offsets, offsets[1:])]
    by_length = sorted(range(len(lengths)), key=lambda sequence: -lengths[sequence])
    order = []
    for sequence in by_length:
        tiles = range(ceil_div(lengths[sequence], block))
        order.extend((sequence, tile) for tile in (reversed(tiles) if last_tile_first else tiles))
    return order


def tile_list(cu_seqlens: torch.Tensor, offsets: list[int], block: int, last_tile_first: bool):
    """tile_order as an int32 (2, n) tensor on cu_seqlens' device (row 0 the sequences, row 1
    the tiles), or None where the batch has no token or no list may be made now (capture).
    `offsets` are cu_seqlens' values as kernels.validation checked them."""
    key = (block, last_tile_first)
    tiles = _LISTS.get(cu_seqlens, key)
    if tiles is not None:
        return tiles
    if cu_seqlens.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return None
    order = tile_order(offsets, block, last_tile_first)
    if not order:
        return None
    tiles = torch.tensor(order, dtype=torch.int32).t().contiguous().to(cu_seqlens.device)
    _LISTS.put(cu_seqlens, tiles, key)
    return tiles
