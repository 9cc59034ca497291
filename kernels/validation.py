"""Argument checks for the public operators.

Every check runs before anything is launched and raises ValueError/TypeError
naming the argument and what was expected, so bad input never turns into a
crash deep inside a kernel or into silent garbage.
"""

from __future__ import annotations

import math
import numbers

import torch

from .targets import HEAD_DIMS
from .tensor_memo import TensorMemo

HIGH_PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
# 8-bit floats: forward only (no backward kernel), where the backend has fp8 MMA.
FP8 = {torch.float8_e4m3fn: "fp8e4m3", torch.float8_e5m2: "fp8e5m2"}
DTYPE_NAMES = {**HIGH_PRECISION, **FP8}


def check_tensor(name: str, t, rank: int = 4, dtypes: dict = HIGH_PRECISION,
                 axes: str = "(batch, heads, seqlen, head_dim)") -> None:
    """A torch.Tensor of `rank` dims (named `axes` in the message) whose dtype is one of
    `dtypes` (dtype -> name)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(t).__name__}")
    if t.dim() != rank:
        raise ValueError(f"{name}: expected a rank-{rank} tensor {axes}, got shape {tuple(t.shape)}")
    if t.dtype not in dtypes:
        names = ", ".join(str(d) for d in dtypes)
        raise TypeError(f"{name}: expected dtype in ({names}), got {t.dtype}")


def check_same(names_and_tensors: dict, what: str) -> None:
    """All tensors agree on `what` ("dtype" or "device")."""
    items = list(names_and_tensors.items())
    first_name, first = items[0]
    for name, t in items[1:]:
        if getattr(t, what) != getattr(first, what):
            raise ValueError(f"{name}: expected the same {what} as {first_name} "
                             f"({getattr(first, what)}), got {getattr(t, what)}")


def check_device(name: str, t: torch.Tensor, target) -> None:
    """t lives where the kernels.targets.Target runs: CPU under the interpreter, else a GPU."""
    if t.device.type == target.device:
        return
    if t.device.type == "cpu":
        raise ValueError(f"{name}: tensor is on the CPU; the Triton kernels need a GPU tensor, "
                         "or Triton's CPU interpreter (set TRITON_INTERPRET=1 before importing kernels)")
    raise ValueError(f"{name}: tensor is on {t.device}, but the kernels' target {target.name} "
                     f"runs on {target.device}")


def check_dtype_supported(name: str, t: torch.Tensor, target) -> None:
    """The target supports t's dtype (fp8 needs fp8 MMA: sm_89 and newer, gfx950)."""
    dtype = DTYPE_NAMES[t.dtype]
    if dtype not in target.dtypes:
        raise ValueError(f"{name}: dtype {t.dtype} ({dtype}) is not supported on target {target.name}; "
                         f"supported: {', '.join(target.dtypes)}")


def check_forward_only(name: str, t: torch.Tensor) -> None:
    """fp8 has no backward kernel: refuse to build an autograd graph we cannot finish."""
    if t.dtype in FP8 and t.requires_grad and torch.is_grad_enabled():
        raise ValueError(f"{name}: {t.dtype} inputs are forward-only (there is no fp8 backward); "
                         "detach them or call under torch.no_grad()")


def check_head_dim(head_dim: int) -> None:
    if head_dim not in HEAD_DIMS:
        dims = ", ".join(str(d) for d in HEAD_DIMS)
        raise ValueError(f"q: head_dim {head_dim} is not supported by the kernels; "
                         f"supported head dims: {dims}")


def check_sm_scale(sm_scale) -> float:
    if isinstance(sm_scale, torch.Tensor) or not isinstance(sm_scale, (int, float)):
        raise TypeError(f"sm_scale: expected a Python float or None, got {type(sm_scale).__name__}")
    # The online softmax tracks the running max of unscaled scores, which is the
    # max of the scaled ones only for a positive scale.
    if not math.isfinite(sm_scale) or sm_scale <= 0:
        raise ValueError(f"sm_scale: expected a finite positive number, got {sm_scale}")
    return float(sm_scale)


def check_attention_shapes(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packed: bool = False) -> None:
    """Shapes of dense (batch, heads, seq, head_dim) inputs, or with `packed` of varlen
    (tokens, heads, head_dim) ones: k and v alike, one head dim, kv heads dividing heads."""
    if packed:
        _, heads, head_dim = q.shape
        kv_heads = k.shape[1]
    else:
        batch, heads, _, head_dim = q.shape
        kv_heads = k.shape[1]
        if k.shape[0] != batch or v.shape[0] != batch:
            raise ValueError(f"k, v: expected batch size {batch} (from q), got {k.shape[0]} and {v.shape[0]}")
    if k.shape != v.shape:
        raise ValueError(f"v: expected the same shape as k {tuple(k.shape)}, got {tuple(v.shape)}")
    if k.shape[-1] != head_dim:
        raise ValueError(f"k: expected head_dim {head_dim} (from q), got {k.shape[-1]}")
    if kv_heads == 0 or heads % kv_heads != 0:
        raise ValueError(f"k: number of kv heads ({kv_heads}) must divide the number of "
                         f"query heads ({heads})")


def check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name}: expected a bool, got {type(value).__name__}")
    return value


def check_dropout_p(p) -> float:
    """A real number in [0, 1): the probability of dropping an attention weight."""
    if isinstance(p, (bool, torch.Tensor)) or not isinstance(p, numbers.Real):
        raise TypeError(f"dropout_p: expected a Python float in [0, 1), got {type(p).__name__}")
    if not 0.0 <= p < 1.0:  # also rejects NaN
        raise ValueError(f"dropout_p: expected a probability in [0, 1), got {p}")
    return float(p)


def check_dropout_seed(seed):
    """None (draw one) or a Python int; ints are used mod 2^64 (Philox's 64-bit key)."""
    if seed is None:
        return None
    if isinstance(seed, (bool, torch.Tensor)) or not isinstance(seed, numbers.Integral):
        raise TypeError(f"dropout_seed: expected an int or None, got {type(seed).__name__}")
    return int(seed)



def check_window_size(window_size) -> tuple[int, int] | None:
    """None, or a pair (left, right) of ints >= -1 (-1: unbounded on that side)."""
    if window_size is None:
        return None
    if (not isinstance(window_size, (tuple, list)) or len(window_size) != 2
            or not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in window_size)):
        raise TypeError(f"window_size: expected None or a pair (left, right) of ints, got {window_size!r}")
    left, right = (int(w) for w in window_size)
    if left < -1 or right < -1:
        raise ValueError(f"window_size: expected bounds >= -1 (-1 = unbounded), got ({left}, {right})")
    return left, right


def check_softcap(softcap) -> float | None:
    """None (no cap) or a finite number > 0."""
    if softcap is None:
        return None
    if isinstance(softcap, (bool, torch.Tensor)) or not isinstance(softcap, numbers.Real):
        raise TypeError(f"softcap: expected a Python float > 0 or None, got {type(softcap).__name__}")
    if not math.isfinite(softcap) or softcap <= 0:
        raise ValueError(f"softcap: expected a finite number > 0 (None for no cap), got {softcap}")
    return float(softcap)


def check_alibi_slopes(slopes, batch: int, heads: int, device: torch.device) -> torch.Tensor | None:
    """None, or an fp32 tensor of shape (heads,) or (batch, heads) on the inputs' device."""
    if slopes is None:
        return None
    if not isinstance(slopes, torch.Tensor):
        raise TypeError(f"alibi_slopes: expected a torch.Tensor or None, got {type(slopes).__name__}")
    if slopes.dtype != torch.float32:
        raise TypeError(f"alibi_slopes: expected dtype torch.float32, got {slopes.dtype}")
    if tuple(slopes.shape) not in ((heads,), (batch, heads)):
        raise ValueError(f"alibi_slopes: expected shape ({heads},) or ({batch}, {heads}), "
                         f"got {tuple(slopes.shape)}")
    if slopes.device != device:
        raise ValueError(f"alibi_slopes: expected a tensor on {device} (the inputs' device), got {slopes.device}")
    return slopes


def check_cu_seqlens(name: str, cu_seqlens, tokens: int, device: torch.device) -> list[int]:
    """Cumulative sequence offsets: a 1-D int32 tensor on `device`, starting at 0,
    non-decreasing, ending at `tokens`; returns them as Python ints (one copy to the host,
    which a tensor checked before and unchanged since is spared: checked_offsets)."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"{name}: expected a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype != torch.int32:
        raise TypeError(f"{name}: expected dtype torch.int32, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] == 0:
        raise ValueError(f"{name}: expected a 1-D tensor of batch + 1 offsets, got shape {tuple(cu_seqlens.shape)}")
    if cu_seqlens.device != device:
        raise ValueError(f"{name}: expected a tensor on {device} (q's device), got {cu_seqlens.device}")
    offsets = checked_offsets(cu_seqlens, tokens)
    if offsets is not None:
        return offsets
    offsets = cu_seqlens.tolist()
    if offsets[0] != 0:
        raise ValueError(f"{name}: expected the offsets to start at 0, got {offsets[0]}")
    for index, (before, after) in enumerate(zip(offsets, offsets[1:])):
        if after < before:
            raise ValueError(f"{name}: expected non-decreasing offsets, got {after} after {before} (index {index + 1})")
    if offsets[-1] != tokens:
        raise ValueError(f"{name}: expected the last offset to equal the number of tokens ({tokens}), "
                         f"got {offsets[-1]}")
    _remember_offsets(cu_seqlens, tokens, offsets)
    return offsets


# The offsets of the cu_seqlens tensors checked last (kernels.tensor_memo says when they are
# used again).  Before every varlen call the read back to the host left the GPU idle while the
# host checked and launched (0.2-0.3 ms a forward on an H100: reports/h100-sm90/variants/tuning/),
# though a model passes one cu_seqlens to every layer, forward and backward.
_CHECKED_OFFSETS = TensorMemo(kept=16)


def checked_offsets(cu_seqlens: torch.Tensor, tokens: int) -> list[int] | None:
    """The offsets of a cu_seqlens tensor checked before against `tokens`, unchanged since; else None."""
    offsets = _CHECKED_OFFSETS.get(cu_seqlens, tokens)
    return None if offsets is None else list(offsets)


def _remember_offsets(cu_seqlens: torch.Tensor, tokens: int, offsets: list[int]) -> None:
    _CHECKED_OFFSETS.put(cu_seqlens, offsets, tokens)


def check_max_seqlen(name: str, max_seqlen, offsets: list[int]) -> int:
    """An int at least as large as the longest sequence of `offsets`."""
    if isinstance(max_seqlen, (bool, torch.Tensor)) or not isinstance(max_seqlen, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {type(max_seqlen).__name__}")
    longest = max((after - before for before, after in zip(offsets, offsets[1:])), default=0)
    if max_seqlen < longest:
        raise ValueError(f"{name}: expected at least the longest sequence's length ({longest}), got {max_seqlen}")
    return int(max_seqlen)


# ---- kv_cache_attention (kernels.kv_cache)

def check_cache_seqlens(cache_seqlens, batch: int, device: torch.device) -> None:
    """Each sequence's cache length before the append: an int32 (batch,) tensor on `device`
    (its values: check_cache_values)."""
    if not isinstance(cache_seqlens, torch.Tensor):
        raise TypeError(f"cache_seqlens: expected a torch.Tensor, got {type(cache_seqlens).__name__}")
    if cache_seqlens.dtype != torch.int32:
        raise TypeError(f"cache_seqlens: expected dtype torch.int32, got {cache_seqlens.dtype}")
    if tuple(cache_seqlens.shape) != (batch,):
        raise ValueError(f"cache_seqlens: expected shape ({batch},) (one length per sequence of q), "
                         f"got {tuple(cache_seqlens.shape)}")
    if cache_seqlens.device != device:
        raise ValueError(f"cache_seqlens: expected a tensor on {device} (q's device), got {cache_seqlens.device}")


def check_cache_values(cache_seqlens: torch.Tensor, appended: int, capacity: int, block_table: torch.Tensor | None,
                       num_pages: int, page_size: int) -> None:
    """The values of the device tensors: each length >= 0 and, with `appended` new tokens after
    it, within the cache's `capacity` positions per sequence; with a block table, the entries
    sequences reach (their first ceil(L_b / page_size)) in [0, num_pages), the others never read.

    One read back to the host for all of it (a few reductions stacked): on a GPU that read waits
    for the work queued before the call, which is why the operator lets a caller that builds its
    own tables skip it (kv_cache_attention's check_values).  Only when something is wrong are the
    values read again, to name the first offending sequence and entry."""
    if cache_seqlens.numel() == 0:
        return
    lengths = cache_seqlens.to(torch.int64)
    stats = [lengths.min(), lengths.max()]
    if block_table is not None and block_table.shape[1] > 0:
        stats.append(_outside_table(block_table, lengths + appended, num_pages, page_size).any())
    shortest, longest, *table_outside = torch.stack([stat.to(torch.int64) for stat in stats]).tolist()
    if shortest < 0 or longest + appended > capacity:
        _name_bad_length(cache_seqlens.tolist(), appended, capacity)
    if any(table_outside):
        outside = _outside_table(block_table, lengths + appended, num_pages, page_size)
        sequence, page = (int(i) for i in outside.nonzero()[0])
        raise ValueError(f"block_table: expected the pages sequences reach in [0, {num_pages}) (the cache's pages), "
                         f"got {int(block_table[sequence, page])} at [{sequence}, {page}]")


def _outside_table(block_table: torch.Tensor, lengths: torch.Tensor, num_pages: int, page_size: int) -> torch.Tensor:
    """(batch, max_pages) bool: entries a sequence of `lengths` keys reaches that are no page."""
    pages = torch.arange(block_table.shape[1], device=block_table.device)
    reached = pages[None, :] < ((lengths + page_size - 1) // page_size)[:, None]
    return reached & ((block_table < 0) | (block_table >= num_pages))


def _name_bad_length(lengths: list[int], appended: int, capacity: int) -> None:
    for index, length in enumerate(lengths):
        if length < 0:
            raise ValueError(f"cache_seqlens: expected lengths >= 0, got {length} (sequence {index})")
        if length + appended > capacity:
            new = f" plus the {appended} new tokens" if appended else ""
            raise ValueError(f"cache_seqlens: sequence {index} holds {length}{new}, more than the cache's "
                             f"{capacity} positions per sequence")


def check_block_table(block_table, batch: int, device: torch.device) -> None:
    """An int32 (batch, max_pages) tensor on `device` (check_block_table_entries: its pages)."""
    if not isinstance(block_table, torch.Tensor):
        raise TypeError(f"block_table: expected a torch.Tensor or None, got {type(block_table).__name__}")
    if block_table.dtype != torch.int32:
        raise TypeError(f"block_table: expected dtype torch.int32, got {block_table.dtype}")
    if block_table.dim() != 2 or block_table.shape[0] != batch:
        raise ValueError(f"block_table: expected shape ({batch}, max_pages), got {tuple(block_table.shape)}")
    if block_table.device != device:
        raise ValueError(f"block_table: expected a tensor on {device} (q's device), got {block_table.device}")


def check_new_kv(k_new, v_new, shape: tuple, dtype: torch.dtype, device: torch.device) -> bool:
    """Both None (nothing appended), or both tensors of `shape` (B, Sq, Hkv, D), the cache's
    dtype, on `device`; returns whether they are given."""
    if (k_new is None) != (v_new is None):
        given, missing = ("k_new", "v_new") if v_new is None else ("v_new", "k_new")
        raise ValueError(f"{missing}: expected a tensor since {given} is given (both or neither)")
    if k_new is None:
        return False
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: expected a torch.Tensor or None, got {type(t).__name__}")
        if tuple(t.shape) != tuple(shape):
            raise ValueError(f"{name}: expected shape {tuple(shape)} (batch, seqlen_q, kv_heads, head_dim), "
                             f"got {tuple(t.shape)}")
        if t.dtype != dtype:
            raise TypeError(f"{name}: expected the cache's dtype {dtype}, got {t.dtype}")
        if t.device != device:
            raise ValueError(f"{name}: expected a tensor on {device} (q's device), got {t.device}")
    return True


def check_num_splits(num_splits) -> int:
    """An int >= 0: 0 for the kernel's own choice, n >= 1 for n splits of every sequence's keys."""
    if isinstance(num_splits, (bool, torch.Tensor)) or not isinstance(num_splits, numbers.Integral):
        raise TypeError(f"num_splits: expected an int, got {type(num_splits).__name__}")
    if num_splits < 0:
        raise ValueError(f"num_splits: expected an int >= 0 (0: the kernel's choice), got {num_splits}")
    return int(num_splits)


def check_optional_softcap(softcap) -> float | None:
    """FlashAttention-2's kv-cache convention: 0 (or None) for no cap, else check_softcap's."""
    if softcap is None or (isinstance(softcap, numbers.Real) and not isinstance(softcap, bool) and softcap == 0):
        return None
    if isinstance(softcap, (bool, torch.Tensor)) or not isinstance(softcap, numbers.Real):
        raise TypeError(f"softcap: expected a Python float >= 0 (0 for no cap), got {type(softcap).__name__}")
    if not math.isfinite(softcap) or softcap < 0:
        raise ValueError(f"softcap: expected a finite number >= 0 (0 for no cap), got {softcap}")
    return float(softcap)


def check_descale(name: str, descale, cache_dtype: torch.dtype) -> float:
    """The per-tensor dequantisation scale of an fp8 cache: None (1), a Python number, or a
    0-dim / 1-element fp32 tensor (read once, on the host), finite and > 0; given only with
    an fp8 cache."""
    if descale is None:
        return 1.0
    if cache_dtype not in FP8:
        raise ValueError(f"{name}: a descale applies to fp8 caches only; the cache is {cache_dtype}")
    if isinstance(descale, torch.Tensor):
        if descale.dtype != torch.float32 or descale.numel() != 1:
            raise TypeError(f"{name}: expected a float or a 1-element torch.float32 tensor, "
                            f"got a {descale.dtype} tensor of shape {tuple(descale.shape)}")
        descale = descale.item()
    elif isinstance(descale, bool) or not isinstance(descale, numbers.Real):
        raise TypeError(f"{name}: expected a float or a 1-element torch.float32 tensor, got {type(descale).__name__}")
    if not math.isfinite(descale) or descale <= 0:
        raise ValueError(f"{name}: expected a finite number > 0, got {descale}")
    return float(descale)
