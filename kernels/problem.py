"""One attention call as the launches see it: shapes, layout, mask and score options.

`AttentionProblem` carries what flash_attention and flash_attention_varlen have
validated into the kernels' arguments: the strides of each tensor in the kernels'
(batch, head, row, dim) order, the resolved window, the score variant, and the
constexpr flags that switch the variants on.  Plain attention passes None for every
variant argument and sets no flag, so its kernels compile as before the variants.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .dropout import DropoutParams


def resolve_window(window_size: tuple[int, int] | None, causal: bool, seq_q: int, seq_k: int):
    """(causal, band): FlashAttention-2's (window_size, causal) as the kernels run them.

    causal is right = 0; -1 is unbounded.  No bound at all is plain attention and
    (-1, 0) is causal: those run the plain kernels (band None), whose causal path is the
    tuned one.  Anything else is a band (left, right) of finite bounds >= 0, an unbounded
    side (and any larger bound) clamped to seq_q + seq_k, which reaches past every key
    from every row -- so the kernels' index arithmetic stays far inside int32.  seq_q,
    seq_k: the longest sequences (varlen)."""
    left, right = (-1, -1) if window_size is None else window_size
    if causal:
        right = 0
    if left < 0 and right < 0:
        return False, None
    if left < 0 and right == 0:
        return True, None
    reach = seq_q + seq_k
    return False, (reach if left < 0 else min(left, reach), reach if right < 0 else min(right, reach))


def table_choice(band: tuple[int, int] | None, varlen: bool) -> dict:
    """The launch tables a problem with this band (resolve_window's) and packing may take, as
    launch_config's keywords: `variants` first preferred -- "window" for a band (where the
    tables hold rows for a band that narrow: LaunchTable.widest_band), "varlen" for a packed
    batch -- and `band_keys`, the most keys a row of the band sees (left + right + 1).  A
    target without a variant's table takes the kernel's own.  The kernels' calls, the launch
    sweeps (benchmarks/tune_launch.py) and the reports' tile geometry all choose by it."""
    variants = ("window",) * (band is not None) + ("varlen",) * varlen
    return dict(variants=variants, band_keys=None if band is None else band[0] + band[1] + 1)


@dataclass(frozen=True, eq=False)
class AttentionProblem:
    """batch (sequences, for varlen), heads, kv_heads, seq_q and seq_k (the longest, for
    varlen), head_dim; causal and band as `resolve_window` returns them; softcap (None:
    off) and alibi_slopes (None, or contiguous fp32 (H,) or (B, H)); cu_seqlens_q/k, their
    checked offsets (ints) and total_q (the tokens of q) for a packed varlen batch, None for
    a dense one."""

    batch: int
    heads: int
    kv_heads: int
    seq_q: int
    seq_k: int
    head_dim: int
    causal: bool
    sm_scale: float
    dropout: DropoutParams | None
    band: tuple[int, int] | None = None
    softcap: float | None = None
    alibi_slopes: torch.Tensor | None = None
    cu_seqlens_q: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    total_q: int | None = None
    offsets_q: list[int] | None = None
    offsets_k: list[int] | None = None

    @property
    def varlen(self) -> bool:
        return self.cu_seqlens_q is not None

    def table_choice(self) -> dict:
        """launch_kwargs' `variants` and `band_keys` for this problem (`table_choice`)."""
        return table_choice(self.band, self.varlen)

    def strides(self, t: torch.Tensor) -> tuple[int, ...]:
        """(batch, head, row, dim) strides of an input, output or gradient: a packed
        (tokens, heads, dim) tensor has no batch stride (each program moves to its
        sequence's first token itself, kernels.sequences)."""
        if self.varlen:
            return 0, t.stride(1), t.stride(0), t.stride(2)
        return t.stride()

    def score_args(self) -> tuple:
        """window_left, window_right, softcap, ALIBI_SLOPES, stride_alibi_b (None when off)."""
        return score_arguments(self.band, self.softcap, self.alibi_slopes)

    def variant_args(self) -> tuple:
        """The forward's and backward kernels' variant arguments: CU_SEQLENS_Q,
        CU_SEQLENS_K, total_q, then score_args()."""
        return (self.cu_seqlens_q, self.cu_seqlens_k, self.total_q, *self.score_args())

    def score_flags(self) -> dict:
        """The constexpr flags of the variants that change which pairs count and their
        scores, only those set (a plain launch passes none)."""
        flags = dict(WINDOW=self.band is not None, SOFTCAP=self.softcap is not None,
                     ALIBI=self.alibi_slopes is not None)
        return {name: True for name, on in flags.items() if on}

    def variant_flags(self) -> dict:
        """score_flags(), and VARLEN for a packed batch."""
        return {**self.score_flags(), **({"VARLEN": True} if self.varlen else {})}

    def varlen_kwargs(self) -> dict:
        """What the delta pre-pass takes for a packed batch (nothing for a dense one)."""
        if not self.varlen:
            return {}
        return dict(CU_SEQLENS_Q=self.cu_seqlens_q, total_q=self.total_q, VARLEN=True)


def score_arguments(band, softcap, alibi_slopes) -> tuple:
    """The score function's kernel arguments (kernels.scores): window_left, window_right, softcap,
    ALIBI_SLOPES, stride_alibi_b, None where a variant is off; (H,) slopes have batch stride 0."""
    left, right = band if band is not None else (None, None)
    stride_batch = None if alibi_slopes is None else (alibi_slopes.stride(0) if alibi_slopes.dim() == 2 else 0)
    return left, right, softcap, alibi_slopes, stride_batch
