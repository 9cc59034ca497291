"""What every chunked reference computation shares: the per-call setup (sizes,
scale, mask, precision, chunk plan) and the (batch, kv head) unit views.

Layout: q-like tensors are viewed as (U, G, S, ...) and k-like ones as (U, Sk, D),
where U = B * Hkv (batch, kv head) units and G = H // Hkv query heads per kv head.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .chunking import ChunkPlan
from .precision import Precision
from .validation import Dims

Tensor = torch.Tensor


@dataclass(frozen=True)
class BlockSetup:
    """Everything a block computation needs besides its tensors."""

    dims: Dims
    scale: float
    causal: bool
    precision: Precision
    input_dtype: torch.dtype
    plan: ChunkPlan

    @property
    def acc(self) -> torch.dtype:
        return self.precision.accumulate_dtype

    @property
    def out_dtype(self) -> torch.dtype:
        return self.precision.output_dtype_for(self.input_dtype)

    def operand(self, x: Tensor) -> Tensor:
        return self.precision.as_operand(x, self.input_dtype)

    def rounded(self, x: Tensor) -> Tensor:
        return self.precision.round_intermediate(x, self.input_dtype)

    def key_end(self, row_stop: int) -> int:
        """Keys at or beyond this index are invisible to every row before ``row_stop``."""
        if not self.causal:
            return self.dims.sk
        return max(0, min(self.dims.sk, row_stop + self.dims.sk - self.dims.sq))


def grouped(x: Tensor, dims: Dims) -> Tensor:
    """(B, H, S, ...) -> (U, G, S, ...): query heads grouped under their kv head."""
    return x.reshape(dims.units, dims.group, *x.shape[2:])


def units(x: Tensor, dims: Dims) -> Tensor:
    """(B, Hkv, Sk, D) -> (U, Sk, D)."""
    return x.reshape(dims.units, dims.sk, dims.head_dim)
