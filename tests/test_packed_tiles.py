"""kernels.packed_tiles: the tiles of a packed batch that hold tokens, longest sequence first,
each sequence's heaviest tile first, made once per cu_seqlens tensor (the kernels that take the
list: tests/test_kernel_varlen.py)."""

import torch

from conformance.bundled.kernels import packed_tiles


def test_every_tile_with_tokens_once_longest_sequence_first():
    offsets = [0, 3, 3, 12, 13, 21]  # lengths 3, 0, 9, 1, 8
    assert packed_tiles.tile_order(offsets, 4, last_tile_first=True) == [
        (2, 2), (2, 1), (2, 0), (4, 1), (4, 0), (0, 0), (3, 0)]
    assert packed_tiles.tile_order(offsets, 4, last_tile_first=False) == [
        (2, 0), (2, 1), (2, 2), (4, 0), (4, 1), (0, 0), (3, 0)]


def test_a_batch_without_tokens_has_no_tiles():
    assert packed_tiles.tile_order([0, 0, 0], 16, True) == []
    assert packed_tiles.tile_list(torch.zeros(3, dtype=torch.int32), [0, 0, 0], 16, True) is None


def test_a_list_is_made_once_per_tensor_and_again_after_a_change():
    cu_seqlens = torch.tensor([0, 5, 7], dtype=torch.int32)
    tiles = packed_tiles.tile_list(cu_seqlens, [0, 5, 7], 2, True)
    assert tiles.dtype == torch.int32 and tiles.tolist() == [[0, 0, 0, 1], [2, 1, 0, 0]]
    assert packed_tiles.tile_list(cu_seqlens, [0, 5, 7], 2, True) is tiles
    assert packed_tiles.tile_list(cu_seqlens, [0, 5, 7], 4, True) is not tiles  # another tile size
    cu_seqlens[1] = 1  # in place: its version moves on
    assert packed_tiles.tile_list(cu_seqlens, [0, 1, 7], 2, True).tolist() == [[1, 1, 1, 0], [2, 1, 0, 0]]
