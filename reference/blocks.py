"""What every chunked reference computation shares: the per-call setup (sizes,
scale, mask, precision, chunk plan), the (batch, kv head) unit views, and the
softmax steps of one block.

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
    top_left: bool = False  # a causal mask aligned top-left (j <= i), not bottom-right (j <= i + Sk - Sq)

    @property
    def diagonal(self) -> int:
        """Key j is visible to query i iff j <= i + diagonal (under a causal mask)."""
        return 0 if self.top_left else self.dims.sk - self.dims.sq

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
        return max(0, min(self.dims.sk, row_stop + self.diagonal))


def grouped(x: Tensor, dims: Dims) -> Tensor:
    """(B, H, S, ...) -> (U, G, S, ...): query heads grouped under their kv head."""
    return x.reshape(dims.units, dims.group, *x.shape[2:])


def units(x: Tensor, dims: Dims) -> Tensor:
    """(B, Hkv, Sk, D) -> (U, Sk, D)."""
    return x.reshape(dims.units, dims.sk, dims.head_dim)


def probabilities(s: Tensor, lse: Tensor) -> Tensor:
    """P = exp(S - lse) in place on ``s``. Rows with lse = -inf (no visible key) give 0, not NaN."""
    finite_lse = torch.where(torch.isneginf(lse), torch.zeros_like(lse), lse)
    return s.sub_(finite_lse.unsqueeze(-1)).exp_()


def _finite_row_max(s: Tensor) -> Tensor:
    """max over keys, keeping the key axis; 0 for rows that see no key (all -inf, or none)."""
    if s.shape[-1] == 0:
        return s.new_zeros((*s.shape[:-1], 1))
    row_max = s.amax(dim=-1, keepdim=True)
    return torch.where(torch.isneginf(row_max), 0.0, row_max)


def softmax_values(st: BlockSetup, s: Tensor, vb: Tensor, keep: Tensor | None = None,
                   keep_scale: float = 1.0) -> Tensor:
    """softmax(S) V of one block, consuming ``s`` (n, G, rows, Sk'); vb (n, Sk', D) ->
    (n, G, rows, D) in the accumulate dtype.

    As in an online-softmax kernel, the weights enter P @ V un-normalised -- relative to
    their row max, so in [0, 1] -- rounded per the precision (after the dropout keep mask,
    if any: masking is exact), and the product is divided by the row sum afterwards, then
    scaled by ``keep_scale``. Rounding the normalised P instead would push the weights of
    long rows (P ~ 1/Sk) into fp16 and fp8 subnormals: worse than any fused kernel.
    """
    n, g, rows, _ = s.shape
    weights = s.sub_(_finite_row_max(s)).exp_()
    row_sum = weights.sum(dim=-1, keepdim=True)
    if keep is not None:
        weights.mul_(keep)
    out = torch.matmul(st.rounded(weights).view(n, g * rows, -1), vb).view(n, g, rows, vb.shape[-1])
    out.div_(torch.where(row_sum > 0, row_sum, 1.0))  # rows that see no key stay 0
    return out.mul_(keep_scale) if keep is not None else out
