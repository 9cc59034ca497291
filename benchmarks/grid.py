"""What the benchmark measures: the grid of problems and its FLOP arithmetic.

Shapes follow FlagAttention's benchmark: batch = 32k tokens / S and heads = 2048 / D,
so every problem moves the same number of tokens through the same model width and
a row's cost grows only through the S x S attention.

FLOPs count the matmuls only: forward 4·B·H·Sq·Sk·D (Q·Kᵀ and P·V, 2 FLOPs per
multiply-add), halved when causal; backward 2.5x the forward (five matmuls instead of
two: dV, dP, dQ, dK and the recomputed Q·Kᵀ), as FlashAttention's benchmarks count.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

TOKENS, MODEL_WIDTH = 32 * 1024, 2048
DIRECTIONS = ("fwd", "bwd")
BACKWARD_FLOP_FACTOR = 2.5

FULL = dict(seq_lens=(1024, 2048, 4096, 8192, 16384), head_dims=(64, 128), causal=(False, True),
            dtypes=("fp16", "bf16"))
QUICK = dict(seq_lens=(1024, 2048), head_dims=(64,), causal=(False, True), dtypes=("bf16",))


@dataclass(frozen=True)
class Problem:
    """One attention problem: q, k, v of shape (batch, heads, seq_len, head_dim)."""

    dtype: str
    head_dim: int
    causal: bool
    seq_len: int
    batch: int
    heads: int

    @classmethod
    def sized(cls, dtype: str, head_dim: int, causal: bool, seq_len: int) -> "Problem":
        """The problem of FlagAttention's shape rule for this S and D."""
        return cls(dtype, head_dim, causal, seq_len, max(1, TOKENS // seq_len), MODEL_WIDTH // head_dim)

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.heads, self.seq_len, self.head_dim)

    @property
    def panel(self) -> tuple[str, int, bool]:
        """(dtype, head_dim, causal): one table and one plot panel."""
        return (self.dtype, self.head_dim, self.causal)

    def flops(self, direction: str) -> float:
        return attention_flops(self.batch, self.heads, self.seq_len, self.seq_len, self.head_dim,
                               self.causal, direction)

    def fields(self) -> dict:
        return asdict(self)


def attention_flops(batch: int, heads: int, seq_q: int, seq_k: int, head_dim: int, causal: bool,
                    direction: str) -> float:
    """Matmul FLOPs of one attention call (see the module docstring)."""
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}, got {direction!r}")
    flops = 4.0 * batch * heads * seq_q * seq_k * head_dim
    if causal:
        flops /= 2
    return flops * (BACKWARD_FLOP_FACTOR if direction == "bwd" else 1.0)


def tflops(flops: float, milliseconds: float) -> float:
    """FLOPs per call and milliseconds per call -> TFLOP/s."""
    return flops / (milliseconds * 1e-3) / 1e12


def problems(seq_lens, head_dims, causal, dtypes) -> list[Problem]:
    """Every problem of the grid, panel by panel (dtype, head dim, causal), S ascending."""
    return [Problem.sized(dtype, head_dim, is_causal, seq_len)
            for dtype, head_dim, is_causal, seq_len in itertools.product(dtypes, head_dims, causal, sorted(seq_lens))]
