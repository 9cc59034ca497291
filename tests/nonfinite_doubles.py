"""Attention doubles whose output is exact except for an Inf planted in one chosen region,
for testing that a `nonfinite` verdict's `where` names that region.

Select one with `--kernel flash_attention=tests.nonfinite_doubles:<name>`. Regions are
given in (batch, head, query row, head-dim column) index ranges of the output.
"""

from __future__ import annotations

import math

from tests.fake_kernels import exact, without_variants

EVERY = slice(None)


def _inf_in(batches=EVERY, heads=EVERY, rows=EVERY, columns=EVERY):
    """A double: `exact`, then +Inf written into out[batches, heads, rows, columns]."""

    def kernel(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
        result = exact(q, k, v, causal, sm_scale, return_log_normalizer)
        out = result[0] if return_log_normalizer else result
        out[batches, heads, rows, columns] = math.inf
        return result

    kernel.capabilities = without_variants()
    return kernel


# At Sq 2048 (32 blocks of 64 rows) the first 24 blocks are rows 0..1535.
first_24_of_32_blocks = _inf_in(rows=slice(0, 1536))
one_head = _inf_in(heads=1)
blocks_of_one_head = _inf_in(heads=2, rows=slice(64, 128))
second_batch = _inf_in(batches=1)
one_row = _inf_in(heads=0, rows=77)
one_element = _inf_in(batches=0, heads=1, rows=5, columns=3)
head_dim_tail = _inf_in(columns=slice(8, 16))
middle_columns_of_some_rows = _inf_in(rows=slice(5, 18), columns=slice(2, 5))
heads_of_one_batch = _inf_in(batches=0, heads=slice(1, 3))
everywhere = _inf_in()


def two_regions_apart(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
    """Rows 0..31 of head 0 and rows 480..511 of head 1: not one product region."""
    out = exact(q, k, v, causal, sm_scale, return_log_normalizer)
    out[0, 0, 0:32] = math.inf
    out[0, 1, 480:512] = math.inf
    return out


two_regions_apart.capabilities = without_variants()
