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

from conformance.running.capabilities import NotSupported

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
_DTYPES = {"flash": ["fp16", "bf16"], "cudnn": ["fp16", "bf16"],
           "efficient": ["fp16", "bf16", "fp32"], "math": ["fp16", "bf16", "fp32"]}
_NO_BACKEND = ("No available kernel", "No viable backend")
# torch's warnings: "<Name> kernel not used because:" then the reasons, each "(Triggered internally at ...)".
_HEADING = re.compile(r"(Flash attention|Memory efficient|cuDNN attention|Math) kernel not used because:", re.I)
_HEADINGS = {"flash": "flash attention", "efficient": "memory efficient", "cudnn": "cudnn attention", "math": "math"}
_TRIGGERED = re.compile(r"\(Triggered internally at [^)]*\)\.?")
IS_CAUSAL = "_is_causal"  # variant suffix: torch's top-left `is_causal` for every causal case


def backend_of(variant: str) -> tuple[str, bool]:
    """(backend, top_left) of a variant: `flash_is_causal` -> ("flash", True)."""
    if variant.endswith(IS_CAUSAL):
        return variant[: -len(IS_CAUSAL)], True
    return variant, False


def capabilities(variant: str) -> dict:
    """What sdpa:VARIANT declares; the rest is torch's per-case decision (see module doc)."""
    variant, top_left = backend_of(variant)
    alignment = {"causal_alignment": "top_left"} if top_left else {}
    return {
        **alignment,
        "dtypes": _DTYPES[variant],
        "lse": False, "total": False, "dropout": False,
        "reasons": {
            "dtypes": f"torch's {variant} SDPA backend takes {', '.join(_DTYPES[variant])} (fp8 is no SDPA input)",
            "lse": "SDPA's public API returns the output only",
            "total": "SDPA's public API returns the output only",
            "dropout": "SDPA draws its dropout mask inside the kernel and exposes no way to replay it",
            **({"causal_alignment": "is_causal=True is torch's top-left mask"} if top_left else {}),
        },
    }


def adapter(op: str, variant: str):
    """The operator function `sdpa:VARIANT` for `op`; ValueError naming what is valid."""
    if backend_of(variant)[0] not in BACKENDS:
        known = ", ".join(f"sdpa:{v}" for v in BACKENDS)
        raise ValueError(f"unknown SDPA backend {variant!r} (known: {known}, each also as sdpa:BACKEND{IS_CAUSAL})")
    if op != "flash_attention":
        raise ValueError(f"sdpa:{variant} implements flash_attention only, not {op}")

    def sdpa_attention(q, k, v, causal=False, sm_scale=None):
        return _call(variant, q, k, v, causal, sm_scale)

    sdpa_attention.__name__ = sdpa_attention.__qualname__ = f"sdpa_{variant}"
    sdpa_attention.capabilities = functools.partial(capabilities, variant)
    return sdpa_attention


def bottom_right_mask(seq_q: int, seq_k: int, device) -> torch.Tensor:
    """(Sq, Sk) bool, True where key j is visible to query i: j <= i + Sk - Sq."""
    rows = torch.arange(seq_q, device=device)[:, None] + (seq_k - seq_q)
    return torch.arange(seq_k, device=device)[None, :] <= rows


def _mask_arguments(variant: str, q, k, causal: bool) -> dict:
    seq_q, seq_k = q.shape[2], k.shape[2]
    if not causal:
        return {}
    variant, top_left = backend_of(variant)
    if seq_q == seq_k or top_left:
        return {"is_causal": True}
    if variant == "flash":
        from torch.nn.attention.bias import causal_lower_right

        return {"attn_mask": causal_lower_right(seq_q, seq_k)}
    return {"attn_mask": bottom_right_mask(seq_q, seq_k, q.device)}


def _call(variant: str, q, k, v, causal: bool, sm_scale):
    arguments = dict(_mask_arguments(variant, q, k, causal), scale=sm_scale,
                     enable_gqa=k.shape[1] != q.shape[1])
    variant = backend_of(variant)[0]
    if variant == "flash" and "attn_mask" in arguments:
        _require_flash(q, k, v, arguments["enable_gqa"])  # torch's lower-right bias bypasses sdpa_kernel
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with sdpa_kernel(BACKENDS[variant]):
                return F.scaled_dot_product_attention(q, k, v, **arguments)
        except RuntimeError as exc:
            if not any(marker in str(exc) for marker in _NO_BACKEND):
                raise
            raise NotSupported(_refusal(variant, caught, exc)) from None


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
