"""torch's FlexAttention, compiled, as an implementation under test.

    python -m conformance run --kernel flash_attention=flex

FlexAttention (`torch.nn.attention.flex_attention`, torch >= 2.5) is attention that
torch.compile turns into fused kernels: Inductor-generated Triton on GPUs, C++ on the CPU.
Called uncompiled it runs an unfused math path that materialises the whole score matrix,
which is not the FlexAttention anyone ships. The adapter judges the compiled kernels only:

* `torch.compile(..., fullgraph=True, dynamic=False)`: one static compilation per shape, as a
  model with fixed shapes gets. A case's kernel then never depends on which cases ran before
  it (automatic dynamic shapes would recompile symbolically after the second shape), so its
  reproduce command, run alone, compiles the same kernel.
* dynamo's recompile limit raised and made a hard failure, and a tripwire counting calls that
  ran uncompiled: either way the case is `error` (`EagerFallback`), never a verdict on the
  math path (conformance.peers.flex_compile);
* causal masks are bottom-right aligned, as the operator's and the reference's
  (`reference/attention.py`): key j is visible to query i iff j <= i + (Sk - Sq). FlexAttention
  has no causal flag, only a `mask_mod`; the usual `kv_idx <= q_idx` is top-left and differs
  whenever Sq != Sk (a decode query would see one key instead of all of them);
* GQA/MQA through `enable_gqa=True` (kv heads are never repeated by hand);
* `lse` from `return_aux=AuxRequest(lse=True)` (`return_lse=True` on torch before AuxRequest).
  Its base is the reference's: the kernels keep a base-2 statistic and torch multiplies it by
  ln 2 before returning it (`_finalize_outputs`; torch 2.5 did the same inline), so no conversion;
* `sm_scale` is flex's `scale`.

FlashAttention-2's variants (the rule: conformance.peers.masks):

* a sliding window is part of the `mask_mod`, with the causal mask (right = min(right, 0)),
  bottom-right aligned with the call's Sq and Sk like the causal mask;
* softcap and ALiBi are a `score_mod`: flex hands it the score already scaled, so the cap is
  c * tanh(score / c) and ALiBi's -slope * |i + Sk - Sq - j| is added after it, FlashAttention-2's
  order; (H,) slopes are read as slope[h], (B, H) ones as slope[b, h] (fp32, as the score);
* `--kernel flash_attention_varlen=flex`: the packed (total, H, D) tensors are flex's
  (1, H, total, D), and a document mask keeps each query to its own sequence's keys, with the
  causal mask, the window and ALiBi aligned bottom-right per sequence (its own len_k - len_q),
  from per-token sequence ids and positions taken from cu_seqlens. Its BlockMask is built from
  the sequences' key ranges (`packed_block_mask`), not by evaluating the mask over all
  total_q x total_k pairs as `create_block_mask` would (a thousand sequences make that a
  mask of billions of elements); every listed block is partial, so the `mask_mod` decides
  each pair. lse comes back as (H, total_q), the operator's layout.

Compile time is measured apart from the case (flex_compile.CompileClock).
"""

from __future__ import annotations

import functools
import importlib
import inspect

import torch

from conformance.peers import masks
from conformance.peers.flex_compile import CLOCK, run_compiled, uncompiled_calls, watch_compilation
from conformance.running.capabilities import NotSupported

MODULE = "torch.nn.attention.flex_attention"
MIN_TORCH = "2.5"
HEAD_DIMS = (16, 32, 64, 96, 128, 192, 256)  # the head dims of the harness's tiers
OPS = ("flash_attention", "flash_attention_varlen")
SPARSE_BLOCK = 128  # the BlockMask's tile of a packed batch (create_block_mask's default)
DTYPES = ("fp16", "bf16", "fp32")


_flex = None  # the flex_attention module, once imported


def load_flex():
    """torch's flex_attention module; ImportError naming the torch needed when it is missing."""
    global _flex
    if _flex is None:
        try:
            _flex = importlib.import_module(MODULE)
        except ImportError:
            raise ImportError(f"flex needs torch >= {MIN_TORCH} ({MODULE}); this is torch "
                              f"{torch.__version__}") from None
    return _flex


def adapter(op: str, variant: str):
    """The operator function `flex` for `op`; ValueError/ImportError naming what is wrong."""
    if variant:
        raise ValueError(f"flex takes no variant, got flex:{variant} (use --kernel {op}=flex)")
    if op not in OPS:
        raise ValueError(f"flex implements {' and '.join(OPS)} only, not {op}")
    load_flex()
    watch_compilation()

    if op == "flash_attention":
        def flex_attention(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False,
                           window_size=None, softcap=None, alibi_slopes=None):
            return _call(q, k, v, causal, sm_scale, return_log_normalizer, window_size, softcap, alibi_slopes)
    else:
        def flex_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                           sm_scale=None, return_log_normalizer=False, window_size=None, softcap=None,
                           alibi_slopes=None):
            return _call_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal, sm_scale, return_log_normalizer,
                                window_size, softcap, alibi_slopes)
        flex_attention.__name__ = flex_attention.__qualname__ = "flex_attention_varlen"

    flex_attention.capabilities = functools.partial(capabilities, _active_device())
    flex_attention.compile_clock = CLOCK
    return flex_attention


def _active_device() -> str:
    from conformance.backends import active_profile

    return active_profile().device


def head_dims() -> list[int]:
    """The tiers' head dims flex compiles: Inductor's Triton templates need at least 16 (tl.dot;
    the tiers' smallest is 16), and older torch (2.6 still) refused non-powers of two in
    `_validate_embed_dim` ("NYI: Currently non power of 2 embedding dimension are not
    supported"), recognisable by its helper `_supported_head_dim`."""
    powers_only = hasattr(load_flex(), "_supported_head_dim")
    return [dim for dim in HEAD_DIMS if not (powers_only and dim & (dim - 1))]


def capabilities(device: str) -> dict:
    """What flex declares on `device` ("cuda" or "cpu"); see the reasons."""
    reasons = {
        "dtypes": "flex computes in its input dtype: fp8 inputs give fp8 outputs, the operator's fp8 "
                  "forward returns fp16 (and Inductor's CPU flex takes fp32, fp16 and bf16 only)",
        "head_dims": "torch: flex's kernels take head dims >= 16"
                     + ("" if len(head_dims()) == len(HEAD_DIMS) else ", powers of two only in this torch"),
        "total": "flex returns the output and the log-sum-exp only",
        "dropout": "flex has no dropout",
        "window": "a mask_mod, with the causal mask, bottom-right aligned",
        "softcap": "a score_mod on the scaled score: c * tanh(score / c)",
        "alibi": "a score_mod after the cap: -slope * |i + Sk - Sq - j|",
        "varlen": "a document mask over the packed batch, flex on (1, H, total, D)",
    }
    declared = {"dtypes": list(DTYPES), "head_dims": head_dims(), "total": False, "dropout": False,
                "window": True, "softcap": True, "alibi": True, "varlen": True}
    if device == "cpu":
        declared.update(directions=["fwd"], lse=False)
        reasons["directions"] = "torch: \"FlexAttention does not support backward on CPU\""
        reasons["lse"] = "torch: \"torch.compile on CPU only supports inference and `return_lse` is not supported yet\""
    return {**declared, "reasons": reasons}


def bottom_right_causal(seq_q: int, seq_k: int):
    """The operator's causal mask as a flex `mask_mod`: key j visible to query i iff
    j <= i + (Sk - Sq) (see the module doc for why not flex's usual top-left j <= i)."""
    return dense_mask_mod(seq_q, seq_k, True, None)


def dense_mask_mod(seq_q: int, seq_k: int, causal: bool, window):
    """The causal mask and the window as one flex `mask_mod`, bottom-right aligned (key j
    visible to query i iff i + off - left <= j <= i + off + right, off = Sk - Sq, right =
    min(right, 0) when causal); None when every key is visible."""
    left, right = masks.window_bounds(causal, window)
    if left < 0 and right < 0:
        return None
    offset = seq_k - seq_q

    def bottom_right(batch, head, q_idx, kv_idx):
        return masks.in_band(q_idx + offset, kv_idx, left, right)

    return bottom_right


def dense_score_mod(seq_q: int, seq_k: int, softcap, slopes):
    """Softcap and ALiBi as one flex `score_mod` (flex's score is already scaled): c * tanh(s / c),
    then -slope[b, h] * |i + Sk - Sq - j| (slopes fp32 (B, H)); None without either."""
    offset = seq_k - seq_q
    return score_mod_of(softcap, slopes, lambda batch, q_idx: batch, lambda batch, q_idx: q_idx + offset,
                      lambda kv_idx: kv_idx)


def score_mod_of(softcap, slopes, sequence, diagonal, key_position):
    """The score_mod of softcap c and ALiBi slopes (sequences, H); `sequence(b, q_idx)`,
    `diagonal(b, q_idx)` and `key_position(kv_idx)` locate a pair in its own sequence."""
    if not softcap and slopes is None:
        return None
    cap = float(softcap or 0.0)

    def variants(score, batch, head, q_idx, kv_idx):
        if cap:
            score = cap * torch.tanh(score / cap)
        if slopes is not None:
            score = score + masks.alibi_bias(slopes[sequence(batch, q_idx), head], diagonal(batch, q_idx),
                                             key_position(kv_idx))
        return score

    return variants


def _flex_call(query, key, value, block_mask, score_mod, scale, enable_gqa: bool, want_lse: bool):
    """The function torch compiles. Dynamo folds `is_compiling()` to True while tracing, so
    the tripwire's count runs only when this frame runs uncompiled."""
    if not torch.compiler.is_compiling():
        uncompiled_calls[0] += 1
    options = dict(score_mod=score_mod, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa)
    if not want_lse:
        return _flex.flex_attention(query, key, value, **options)
    if hasattr(_flex, "AuxRequest"):
        out, aux = _flex.flex_attention(query, key, value, **options, return_aux=_flex.AuxRequest(lse=True))
        return out, aux.lse
    return _flex.flex_attention(query, key, value, **options, return_lse=True)


@functools.lru_cache(maxsize=None)
def _compiled():
    return torch.compile(_flex_call, fullgraph=True, dynamic=False)


def _call(q, k, v, causal: bool, sm_scale, want_lse: bool, window=None, softcap=None, alibi_slopes=None):
    _refuse_unsupported_cpu(q)
    batch, heads, seq_q, seq_k = q.shape[0], q.shape[1], q.shape[2], k.shape[2]
    masks.check_options(window, softcap, alibi_slopes, heads, batch)
    block_mask = None
    mask_mod = dense_mask_mod(seq_q, seq_k, causal, window)
    if mask_mod is not None:
        block_mask = _flex.create_block_mask(mask_mod, None, None, seq_q, seq_k, device=q.device)
    score_mod = dense_score_mod(seq_q, seq_k, softcap, masks.slopes_by_batch(alibi_slopes, batch, heads, q.device))
    return _run(q, k, v, block_mask, score_mod, sm_scale, want_lse)


def _call_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, causal: bool, sm_scale, want_lse: bool, window=None,
                 softcap=None, alibi_slopes=None):
    """flash_attention_varlen: flex on the packed batch as one (1, H, total, D) sequence under a
    document mask (module doc); out (total_q, H, D), lse (H, total_q)."""
    _refuse_unsupported_cpu(q)
    heads = q.shape[1]
    layout = PackedLayout.of(cu_seqlens_q, cu_seqlens_k)
    masks.check_options(window, softcap, alibi_slopes, heads, layout.sequences)
    mask_mod = layout.mask_mod(causal, window)
    block_mask = packed_block_mask(layout, causal, window, mask_mod)
    slopes = masks.slopes_by_batch(alibi_slopes, layout.sequences, heads, q.device)
    q_sequence, q_diagonal, k_position = layout.q_sequence, layout.q_diagonal, layout.k_position
    score_mod = score_mod_of(softcap, slopes, lambda batch, q_idx: q_sequence[q_idx],
                             lambda batch, q_idx: q_diagonal[q_idx], lambda kv_idx: k_position[kv_idx])
    as_flex = [x.transpose(0, 1).unsqueeze(0) for x in (q, k, v)]  # (total, H, D) -> (1, H, total, D)
    result = _run(*as_flex, block_mask, score_mod, sm_scale, want_lse)
    if want_lse:
        out, lse = result
        return out[0].transpose(0, 1), lse[0]
    return result[0].transpose(0, 1)


def _run(q, k, v, block_mask, score_mod, sm_scale, want_lse: bool):
    """The compiled flex call, its eager math path refused (flex_compile)."""
    return run_compiled(_compiled(), q, k, v, block_mask, score_mod, sm_scale, k.shape[1] != q.shape[1],
                        bool(want_lse))


class PackedLayout:
    """Where each token of a packed batch is: per query token its sequence and its diagonal in
    that sequence (position + len_k - len_q), per key token its sequence and position; int32
    tensors of (total_q,) and (total_k,), on cu_seqlens' device."""

    def __init__(self, len_q: torch.Tensor, len_k: torch.Tensor, cu_k: torch.Tensor):
        self.sequences = len_q.numel()
        self.len_q, self.len_k, self.key_start = len_q, len_k, cu_k[:-1]
        self.q_sequence, q_position = _tokens(len_q)
        self.k_sequence, self.k_position = _tokens(len_k)
        self.q_diagonal = (q_position + (len_k - len_q)[self.q_sequence]).to(torch.int32)

    @classmethod
    def of(cls, cu_seqlens_q: torch.Tensor, cu_seqlens_k: torch.Tensor) -> "PackedLayout":
        cu_q, cu_k = cu_seqlens_q.to(torch.int64), cu_seqlens_k.to(torch.int64)
        return cls(cu_q[1:] - cu_q[:-1], cu_k[1:] - cu_k[:-1], cu_k)

    def mask_mod(self, causal: bool, window):
        """The document mask: a query sees keys of its own sequence only, within the band
        (causal, window) around its own diagonal."""
        left, right = masks.window_bounds(causal, window)
        q_sequence, q_diagonal = self.q_sequence, self.q_diagonal
        k_sequence, k_position = self.k_sequence, self.k_position

        def document(batch, head, q_idx, kv_idx):
            same = q_sequence[q_idx] == k_sequence[kv_idx]
            band = masks.in_band(q_diagonal[q_idx], k_position[kv_idx], left, right)
            return same if band is None else same & band

        return document

    def key_ranges(self, causal: bool, window) -> tuple[torch.Tensor, torch.Tensor]:
        """(first, last) packed key index each query token sees, int64 (total_q,); first > last
        when it sees none."""
        left, right = masks.window_bounds(causal, window)
        sequence = self.q_sequence.to(torch.int64)
        diagonal = self.q_diagonal.to(torch.int64)
        len_k = self.len_k[sequence]
        first = torch.zeros_like(diagonal) if left < 0 else (diagonal - left).clamp(min=0)
        last = len_k - 1 if right < 0 else torch.minimum(diagonal + right, len_k - 1)
        start = self.key_start[sequence]
        return start + first, start + last


def _tokens(lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(sequence, position) of each packed token of sequences of these lengths, int32."""
    sequence = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    position = torch.arange(sequence.numel(), device=lengths.device) - starts[sequence]
    return sequence.to(torch.int32), position.to(torch.int32)


def packed_block_mask(layout: PackedLayout, causal: bool, window, mask_mod, block: int = SPARSE_BLOCK):
    """The BlockMask of a packed batch without a total_q x total_k mask: each query tile lists
    the key tiles from the first to the last packed key any of its rows sees (a superset of
    the tiles with a visible pair, since each row sees one interval of its own sequence's keys),
    all partial, so that `mask_mod` decides every pair."""
    first, last = layout.key_ranges(causal, window)
    total_q, total_k = first.numel(), int(layout.k_sequence.numel())
    if "seq_lengths" not in inspect.signature(_flex.BlockMask.from_kv_blocks).parameters:
        # torch before 2.6 sizes a BlockMask by its tiles: let it evaluate the mask itself
        return _flex.create_block_mask(mask_mod, 1, None, total_q, total_k, device=first.device)
    q_tiles, k_tiles = -(-total_q // block), -(-total_k // block)
    device = first.device
    sees = first <= last
    tile = torch.arange(total_q, device=device) // block
    big = torch.iinfo(torch.int64).max
    low = torch.full((q_tiles,), big, dtype=torch.int64, device=device)
    high = torch.full((q_tiles,), -1, dtype=torch.int64, device=device)
    low = low.scatter_reduce(0, tile, torch.where(sees, first, big), "amin")
    high = high.scatter_reduce(0, tile, torch.where(sees, last, -1), "amax")
    any_key = high >= 0
    low_tile = torch.where(any_key, low // block, 0)
    count = torch.where(any_key, high // block - low_tile + 1, 0)
    indices = (low_tile[:, None] + torch.arange(k_tiles, device=device)[None, :]).clamp(max=k_tiles - 1)
    return _flex.BlockMask.from_kv_blocks(count.to(torch.int32)[None, None], indices.to(torch.int32)[None, None],
                                          BLOCK_SIZE=block, mask_mod=mask_mod, seq_lengths=(total_q, total_k))


def _refuse_unsupported_cpu(q) -> None:
    """NotSupported where Inductor cannot compile flex for this CPU (it needs AVX2, not macOS)."""
    if q.device.type != "cpu":
        return
    try:
        from torch._inductor.kernel.flex.flex_cpu import check_cpu_supported
    except ImportError:
        return  # an older layout of Inductor: let torch say what it cannot do
    if not check_cpu_supported():
        raise NotSupported("torch: \"torch.compile on current platform is not supported for CPU\" "
                           "(Inductor's CPU flex needs AVX2)")
