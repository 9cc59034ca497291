"""torch's scaled_dot_product_attention, forced to one backend, as an implementation under test.

    python -m conformance run --kernel flash_attention=sdpa:cudnn     # or flash, efficient, math
    python -m conformance run --kernel flash_attention=sdpa:flash_is_causal   # torch's own causal mask

Each adapter runs SDPA inside `sdpa_kernel(<that backend>)` only, so torch cannot fall back
to another backend behind the verdict. Semantics are the operator's:

* causal masks are bottom-right aligned. When Sq == Sk, `is_causal=True` (top-left and
  bottom-right agree). Otherwise the flash backend gets torch's own lower-right causal bias
  (`causal_lower_right`, which torch runs on the flash kernel's native bottom-right mask),
  and the other backends the materialised bottom-right boolean mask (torch's lower-right
  bias would silently run the flash or efficient kernel instead of the one named);
* GQA/MQA through `enable_gqa=True` (the kv heads are never repeated by hand);
* `sm_scale` is SDPA's `scale`.

A variant ending in `_is_causal` (`sdpa:flash_is_causal`, ...) calls SDPA with `is_causal=True`
for every causal case -- torch's meaning, top-left aligned (key j visible to query i iff
j <= i) -- and declares `causal_alignment = "top_left"`, so that its causal Sq != Sk cases
are judged against a top-left reference (conformance.judging.conventions) instead of
being emulated bottom-right.

FlashAttention-2's variants (conformance.peers.masks has the rule):

* a sliding window and ALiBi go through one explicit float (additive) `attn_mask`: 0 where a
  key is visible, -inf where it is not (the causal mask folded in, bottom-right), and ALiBi's
  -slope * |i + Sk - Sq - j| on the visible keys. Each row's bias is shifted so that its
  largest visible value is 0 (softmax is unchanged, and SDPA returns no lse that would see
  the shift), so a mask rounded to the query dtype is rounded at the size of the keys that
  carry the row's weight, not at the size of their distance to the diagonal. The efficient
  backend takes its mask in the query dtype only ("invalid dtype for bias - should match
  query's dtype"); cuDNN's graph reads its bias in the input dtype, and gets -65504 where a key
  is masked, as torch writes its own boolean masks for cuDNN ("to workaround -inf issue with
  cuDNN"); math takes the mask in fp32. torch's flash backend takes no attn_mask at all
  (CUDA): it declares no window, ALiBi or packed batch;
* softcap: SDPA has none (its only change to the scores is additive), declared so;
* `flash_attention_varlen` (`--kernel flash_attention_varlen=sdpa:math`): the packed
  sequences padded to (B, H, max_seqlen, D), each sequence masked to its own lengths
  (bottom-right per sequence), SDPA run on that, and the real rows packed back. A padding
  query row is given its batch's key 0 (bias 0) so that no backend meets a row of padding
  that sees nothing; its output is dropped and its zero upstream gradient adds nothing to dK
  or dV. The flash backend (no mask) declares no varlen.

A variant ending in `_is_causal` calls torch's own `is_causal`, which torch does not combine
with an explicit mask ("Explicit attn_mask should not be set when is_causal=True"): its causal
cases that need a mask (a window, ALiBi, a packed batch) are `unsupported` with that reason.

What an adapter declares (`capabilities`): the dtypes its backend takes, and no lse, total
or dropout -- SDPA's public API returns the output only, and its dropout mask is drawn
inside the kernel with no way to replay it. Everything else is asked of torch per case:
where torch's backend selection refuses the inputs (head dim, alignment, device, GQA with
a mask, ...), the adapter raises `NotSupported` with torch's own reasons before launching.
"""

from __future__ import annotations

import functools
import re
import warnings

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from conformance.peers import masks
from conformance.running.capabilities import NotSupported

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
OPS = ("flash_attention", "flash_attention_varlen")
_DTYPES = {"flash": ["fp16", "bf16"], "cudnn": ["fp16", "bf16"],
           "efficient": ["fp16", "bf16", "fp32"], "math": ["fp16", "bf16", "fp32"]}
# The backends that take an explicit attn_mask (a window, ALiBi and a packed batch's bounds go through one).
_TAKES_MASK = ("cudnn", "efficient", "math")
# The backends whose float mask is given in the query dtype: efficient takes no other (torch: "invalid
# dtype for bias - should match query's dtype"), and cuDNN's graph reads its bias in the input dtype
# (torch's MHA.cpp sets no dtype of its own for it); math takes fp32.
_MASK_IN_QUERY_DTYPE = ("efficient", "cudnn")
# What torch itself writes for a masked-out key in the bias it gives cuDNN (its boolean masks become
# -65504, "to workaround -inf issue with cuDNN"): the adapter's -inf becomes that there too.
CUDNN_MASKED = -65504.0
_NO_BACKEND = ("No available kernel", "No viable backend")
# torch's warnings: "<Name> kernel not used because:" then the reasons, each "(Triggered internally at ...)".
_HEADING = re.compile(r"(Flash attention|Memory efficient|cuDNN attention|Math) kernel not used because:", re.I)
_HEADINGS = {"flash": "flash attention", "efficient": "memory efficient", "cudnn": "cudnn attention", "math": "math"}
_TRIGGERED = re.compile(r"\(Triggered internally at [^)]*\)\.?")
IS_CAUSAL = "_is_causal"  # variant suffix: torch's top-left `is_causal` for every causal case
NO_SOFTCAP = ("SDPA has no softcap: its only change to the scores is an additive mask, "
              "and c * tanh(s / c) is not an addition")
NO_MASK = ("torch's flash SDPA backend takes no attn_mask, through which the adapter states a window, "
           "ALiBi and a packed batch's sequence bounds (SDPA has no window_size or alibi_slopes)")
IS_CAUSAL_WITH_MASK = ("torch refuses is_causal=True with an explicit attn_mask (\"Explicit attn_mask should "
                       "not be set when is_causal=True\"), and this case needs a mask")


def backend_of(variant: str) -> tuple[str, bool]:
    """(backend, top_left) of a variant: `flash_is_causal` -> ("flash", True)."""
    if variant.endswith(IS_CAUSAL):
        return variant[: -len(IS_CAUSAL)], True
    return variant, False


def capabilities(variant: str) -> dict:
    """What sdpa:VARIANT declares; the rest is torch's per-case decision (see module doc)."""
    variant, top_left = backend_of(variant)
    alignment = {"causal_alignment": "top_left"} if top_left else {}
    masked = variant in _TAKES_MASK
    mask_reason = (NO_MASK if not masked else
                   "through an explicit float attn_mask" + (" in the query dtype (as torch's {} backend takes "
                                                            "it)".format(variant) if variant in _MASK_IN_QUERY_DTYPE
                                                            else ""))
    return {
        **alignment,
        "dtypes": _DTYPES[variant],
        "lse": False, "total": False, "dropout": False,
        "window": masked, "alibi": masked, "varlen": masked, "softcap": False,
        "reasons": {
            "dtypes": f"torch's {variant} SDPA backend takes {', '.join(_DTYPES[variant])} (fp8 is no SDPA input)",
            "lse": "SDPA's public API returns the output only",
            "total": "SDPA's public API returns the output only",
            "dropout": "SDPA draws its dropout mask inside the kernel and exposes no way to replay it",
            "softcap": NO_SOFTCAP,
            "window": mask_reason, "alibi": mask_reason,
            "varlen": mask_reason if not masked else "padded to (B, H, max_seqlen, D), each sequence masked to "
                                                     "its own lengths",
            **({"causal_alignment": "is_causal=True is torch's top-left mask"} if top_left else {}),
        },
    }


def adapter(op: str, variant: str):
    """The operator function `sdpa:VARIANT` for `op`; ValueError naming what is valid."""
    if backend_of(variant)[0] not in BACKENDS:
        known = ", ".join(f"sdpa:{v}" for v in BACKENDS)
        raise ValueError(f"unknown SDPA backend {variant!r} (known: {known}, each also as sdpa:BACKEND{IS_CAUSAL})")
    if op not in OPS:
        raise ValueError(f"sdpa:{variant} implements {' and '.join(OPS)} only, not {op}")

    if op == "flash_attention":
        def sdpa_attention(q, k, v, causal=False, sm_scale=None, window_size=None, softcap=None,
                           alibi_slopes=None):
            return _call(variant, q, k, v, causal, sm_scale, window_size, softcap, alibi_slopes)
    else:
        def sdpa_attention(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False,
                           sm_scale=None, window_size=None, softcap=None, alibi_slopes=None):
            return _call_varlen(variant, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                causal, sm_scale, window_size, softcap, alibi_slopes)

    suffix = "" if op == "flash_attention" else "_varlen"
    sdpa_attention.__name__ = sdpa_attention.__qualname__ = f"sdpa_{variant}{suffix}"
    sdpa_attention.capabilities = functools.partial(capabilities, variant)
    return sdpa_attention


def bottom_right_mask(seq_q: int, seq_k: int, device) -> torch.Tensor:
    """(Sq, Sk) bool, True where key j is visible to query i: j <= i + Sk - Sq."""
    rows = torch.arange(seq_q, device=device)[:, None] + (seq_k - seq_q)
    return torch.arange(seq_k, device=device)[None, :] <= rows


def additive_mask(len_q: torch.Tensor, len_k: torch.Tensor, seq_q: int, seq_k: int, causal: bool, window,
                  slopes: torch.Tensor | None, padded: bool = False) -> torch.Tensor:
    """The float mask (B or 1, H or 1, seq_q, seq_k), fp32, of a case with a window, ALiBi or
    per-sequence lengths (len_q, len_k: int64 (B,), each sequence's own; the offset of
    sequence b is len_k[b] - len_q[b]): 0 or ALiBi's bias on the keys a row sees, -inf on the
    others, each row shifted so that its largest value is 0 (module doc). `padded`: rows at or
    past len_q[b] are padding and see key 0 with bias 0 (module doc); keys at or past len_k[b]
    are never seen."""
    device = len_q.device
    rows = torch.arange(seq_q, device=device)[None, :, None]
    keys = torch.arange(seq_k, device=device)[None, None, :]
    diagonal = rows + (len_k - len_q)[:, None, None]  # (B, Sq, 1)
    left, right = masks.window_bounds(causal, window)
    keep = masks.in_band(diagonal, keys, left, right)
    if padded:
        real_key = keys < len_k[:, None, None]
        keep = real_key if keep is None else keep & real_key
    keep = (keep if keep is not None else torch.ones(1, 1, 1, dtype=torch.bool, device=device))[:, None]
    if slopes is None:
        scores = torch.zeros((), dtype=torch.float32, device=device)
    else:  # (B, H, Sq, Sk); (H,) slopes arrive as (1, H)
        scores = masks.alibi_bias(slopes[:, :, None, None], diagonal[:, None].to(torch.float32), keys[:, None])
    mask = torch.where(keep, scores, torch.tensor(float("-inf"), device=device))
    mask = mask.expand(*mask.shape[:-2], seq_q, seq_k)
    top = mask.amax(dim=-1, keepdim=True)
    mask = mask - torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    if padded:
        padding_row = (torch.arange(seq_q, device=device)[None, :] >= len_q[:, None])[:, None, :, None]
        first_key = (torch.arange(seq_k, device=device) == 0)[None, None, None, :]
        mask = torch.where(padding_row, torch.where(first_key, 0.0, float("-inf")), mask)
    return mask


def _needs_mask(window, alibi_slopes) -> bool:
    return window is not None or alibi_slopes is not None


def _mask_arguments(variant: str, q, k, causal: bool, window=None, alibi_slopes=None) -> dict:
    seq_q, seq_k = q.shape[2], k.shape[2]
    backend, top_left = backend_of(variant)
    if _needs_mask(window, alibi_slopes):
        if causal and top_left:
            raise NotSupported(IS_CAUSAL_WITH_MASK)
        heads = q.shape[1]
        lengths = torch.full((1,), seq_q, device=q.device), torch.full((1,), seq_k, device=q.device)
        slopes = None
        if alibi_slopes is not None:
            slopes = alibi_slopes.to(device=q.device, dtype=torch.float32).reshape(-1, heads)
        mask = additive_mask(*lengths, seq_q, seq_k, causal, window, slopes)
        return {"attn_mask": _mask_dtype(backend, mask, q)}
    if not causal:
        return {}
    if seq_q == seq_k or top_left:
        return {"is_causal": True}
    if backend == "flash":
        from torch.nn.attention.bias import causal_lower_right

        return {"attn_mask": causal_lower_right(seq_q, seq_k)}
    return {"attn_mask": bottom_right_mask(seq_q, seq_k, q.device)}


def _mask_dtype(backend: str, mask: torch.Tensor, q) -> torch.Tensor:
    """The fp32 mask as `backend` takes it (module doc)."""
    if backend == "cudnn":
        mask = mask.clamp(min=CUDNN_MASKED)  # -inf as torch writes it for cuDNN; nothing visible moves
    return mask.to(q.dtype) if backend in _MASK_IN_QUERY_DTYPE else mask


def _refuse_softcap(softcap) -> None:
    if softcap:  # declared unsupported; reached only when a --capabilities file says otherwise
        raise NotSupported(NO_SOFTCAP)


def _call(variant: str, q, k, v, causal: bool, sm_scale, window=None, softcap=None, alibi_slopes=None):
    _refuse_softcap(softcap)
    masks.check_options(window, softcap, alibi_slopes, q.shape[1], q.shape[0])
    arguments = dict(_mask_arguments(variant, q, k, causal, window, alibi_slopes), scale=sm_scale,
                     enable_gqa=k.shape[1] != q.shape[1])
    return _sdpa(backend_of(variant)[0], q, k, v, arguments)


def _sdpa(backend: str, q, k, v, arguments: dict):
    if backend == "flash" and _is_causal_bias(arguments.get("attn_mask")):
        _require_flash(q, k, v, arguments["enable_gqa"])  # torch's lower-right bias bypasses sdpa_kernel
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(BACKENDS[backend]):
                return F.scaled_dot_product_attention(q, k, v, **arguments)
        except RuntimeError as exc:
            if not any(marker in str(exc) for marker in _NO_BACKEND):
                raise
            raise NotSupported(_refusal(backend, caught, exc)) from None


def _call_varlen(variant: str, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                 causal: bool, sm_scale, window=None, softcap=None, alibi_slopes=None):
    """flash_attention_varlen through SDPA: padded, masked per sequence, packed back (module doc)."""
    _refuse_softcap(softcap)
    backend, top_left = backend_of(variant)
    if backend not in _TAKES_MASK:
        raise NotSupported(NO_MASK)
    if causal and top_left:
        raise NotSupported(IS_CAUSAL_WITH_MASK)
    heads = q.shape[1]
    len_q = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).to(torch.int64)
    len_k = (cu_seqlens_k[1:] - cu_seqlens_k[:-1]).to(torch.int64)
    batch = len_q.numel()
    masks.check_options(window, softcap, alibi_slopes, heads, batch)
    where_q, where_k = _padded_index(len_q), _padded_index(len_k)
    padded = [_pad(q, where_q, batch, max_seqlen_q), _pad(k, where_k, batch, max_seqlen_k),
              _pad(v, where_k, batch, max_seqlen_k)]
    slopes = None if alibi_slopes is None else masks.slopes_by_batch(alibi_slopes, batch, heads, q.device)
    mask = additive_mask(len_q, len_k, max_seqlen_q, max_seqlen_k, causal, window, slopes, padded=True)
    arguments = dict(attn_mask=_mask_dtype(backend, mask, q), scale=sm_scale, enable_gqa=k.shape[1] != heads)
    out = _sdpa(backend, *padded, arguments)
    return out.transpose(1, 2)[where_q]  # (total_q, H, D)


def _padded_index(lengths: torch.Tensor) -> tuple:
    """(batch, row) of each packed row of sequences of these lengths."""
    batch = torch.repeat_interleave(torch.arange(lengths.numel(), device=lengths.device), lengths)
    starts = torch.cumsum(lengths, 0) - lengths
    return batch, torch.arange(batch.numel(), device=lengths.device) - starts[batch]


def _pad(packed: torch.Tensor, where: tuple, batch: int, length: int) -> torch.Tensor:
    """(total, H, D) -> (B, H, length, D), zeros at padding (differentiable)."""
    padded = packed.new_zeros((batch, length, *packed.shape[1:]))
    return padded.index_put(where, packed).transpose(1, 2)


def _is_causal_bias(mask) -> bool:
    from torch.nn.attention.bias import CausalBias

    return isinstance(mask, CausalBias)


def _require_flash(q, k, v, enable_gqa: bool) -> None:
    """NotSupported with torch's reasons unless the flash kernel takes these inputs."""
    if q.device.type != "cuda":
        raise NotSupported("torch: the lower-right causal bias runs the flash kernel on CUDA only")
    params = torch.backends.cuda.SDPAParams(q, k, v, None, 0.0, False, enable_gqa)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if not torch.backends.cuda.can_use_flash_attention(params, True):
            raise NotSupported(_refusal("flash", caught, None))


def _refusal(variant: str, caught, exc) -> str:
    """torch's own reasons for refusing the case, as one line: the warnings torch emits
    under the named backend's heading ("Flash attention kernel not used because:"), or
    all of them when none is headed so, or the exception's text."""
    sections, heading = {}, None
    for item in caught:
        text = _TRIGGERED.sub("", " ".join(str(item.message).split())).strip()
        match = _HEADING.match(text)
        if match:
            heading, text = match[1].lower(), text[match.end():].strip()
        if text:
            sections.setdefault(heading, []).append(text)
    reasons = sections.get(_HEADINGS[variant]) or [text for texts in sections.values() for text in texts]
    if not reasons and exc is not None:
        reasons = [" ".join(str(exc).split())]
    return f"torch refuses sdpa:{variant} here: " + ("; ".join(dict.fromkeys(reasons))[:600] or "no reason given")
