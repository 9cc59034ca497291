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
* dynamo's recompile limit (8 by default): past it dynamo silently runs the function
  uncompiled -- flex's eager math path -- and a verdict would judge that path. During its calls
  the adapter raises the limit to RECOMPILE_LIMIT (above any tier's distinct shapes) and makes
  hitting it a hard failure (fullgraph=True and dynamo's fail_on_recompile_limit_hit). A
  tripwire in the compiled function counts every call that ran uncompiled whatever the cause
  (a disabled dynamo, a forced-eager stance). Either way the adapter raises `EagerFallback`:
  the case is `error` with that reason, never a verdict on the math path.
* causal masks are bottom-right aligned, as the operator's and the reference's
  (`reference/attention.py`): key j is visible to query i iff j <= i + (Sk - Sq). FlexAttention
  has no causal flag, only a `mask_mod`; the usual `kv_idx <= q_idx` is top-left and differs
  whenever Sq != Sk (a decode query would see one key instead of all of them);
* GQA/MQA through `enable_gqa=True` (kv heads are never repeated by hand);
* `lse` from `return_aux=AuxRequest(lse=True)` (`return_lse=True` on torch before AuxRequest).
  Its base is the reference's: the kernels keep a base-2 statistic and torch multiplies it by
  ln 2 before returning it (`_finalize_outputs`; torch 2.5 did the same inline), so no conversion;
* `sm_scale` is flex's `scale`.

Compile time is measured apart from the case (`CompileClock`, from dynamo's compile callbacks:
frame compiles and the backward compiled lazily at the first backward); the runner puts it on
each results line as `compile_s` and `compilations` (conformance.running.runner).
"""

from __future__ import annotations

import functools
import importlib
import time

import torch

from conformance.running.capabilities import NotSupported

MODULE = "torch.nn.attention.flex_attention"
MIN_TORCH = "2.5"
# Raised during the adapter's calls: far above the distinct shapes of any tier (the standard
# tier has ~600 flash_attention cases), so only a deliberate lower limit is ever hit.
RECOMPILE_LIMIT = 4096
HEAD_DIMS = (16, 32, 64, 96, 128, 192, 256)  # the head dims of the harness's tiers
DTYPES = ("fp16", "bf16", "fp32")
# dynamo config names: the current one first, the one before torch 2.6 second.
_LIMIT_NAMES = (("recompile_limit", "cache_size_limit"),
                ("accumulated_recompile_limit", "accumulated_cache_size_limit"))
_FAIL_NAMES = ("fail_on_recompile_limit_hit", "fail_on_cache_limit_hit")
_LIMIT_ERRORS = ("FailOnRecompileLimitHit", "FailOnCacheLimitHit")


class EagerFallback(RuntimeError):
    """flex_attention ran, or would have run, uncompiled: its eager math path is refused."""


class CompileClock:
    """Wall time torch spent compiling in this process, and how many compilations, from
    dynamo's start/end callbacks (the outermost of nested ones). Cumulative: the runner reads
    it before and after a case (`reading()`)."""

    def __init__(self):
        self.seconds, self.count, self._started = 0.0, 0, None

    def start(self, *_args) -> None:  # torch < 2.6 passes nothing, later a CallbackArgs
        self._started = time.perf_counter()
        self.count += 1

    def end(self, *_args) -> None:
        if self._started is not None:
            self.seconds += time.perf_counter() - self._started
            self._started = None

    def reading(self) -> tuple[float, int]:
        return self.seconds, self.count


CLOCK = CompileClock()
_uncompiled_calls = [0]  # the tripwire: calls of _flex_call that dynamo did not run compiled
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
    if op != "flash_attention":
        raise ValueError(f"flex implements flash_attention only, not {op}")
    load_flex()
    _watch_compilation()

    def flex_attention(q, k, v, causal=False, sm_scale=None, return_log_normalizer=False):
        return _call(q, k, v, causal, sm_scale, return_log_normalizer)

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
    }
    declared = {"dtypes": list(DTYPES), "head_dims": head_dims(), "total": False, "dropout": False}
    if device == "cpu":
        declared.update(directions=["fwd"], lse=False)
        reasons["directions"] = "torch: \"FlexAttention does not support backward on CPU\""
        reasons["lse"] = "torch: \"torch.compile on CPU only supports inference and `return_lse` is not supported yet\""
    return {**declared, "reasons": reasons}


def bottom_right_causal(seq_q: int, seq_k: int):
    """The operator's causal mask as a flex `mask_mod`: key j visible to query i iff
    j <= i + (Sk - Sq) (see the module doc for why not flex's usual top-left j <= i)."""
    offset = seq_k - seq_q

    def bottom_right(batch, head, q_idx, kv_idx):
        return kv_idx <= q_idx + offset

    return bottom_right


def _flex_call(query, key, value, block_mask, scale, enable_gqa: bool, want_lse: bool):
    """The function torch compiles. Dynamo folds `is_compiling()` to True while tracing, so
    the tripwire's count runs only when this frame runs uncompiled."""
    if not torch.compiler.is_compiling():
        _uncompiled_calls[0] += 1
    options = dict(block_mask=block_mask, scale=scale, enable_gqa=enable_gqa)
    if not want_lse:
        return _flex.flex_attention(query, key, value, **options)
    if hasattr(_flex, "AuxRequest"):
        out, aux = _flex.flex_attention(query, key, value, **options, return_aux=_flex.AuxRequest(lse=True))
        return out, aux.lse
    return _flex.flex_attention(query, key, value, **options, return_lse=True)


@functools.lru_cache(maxsize=None)
def _compiled():
    return torch.compile(_flex_call, fullgraph=True, dynamic=False)


def _call(q, k, v, causal: bool, sm_scale, want_lse: bool):
    _refuse_unsupported_cpu(q)
    seq_q, seq_k = q.shape[2], k.shape[2]
    block_mask = None
    if causal:
        block_mask = _flex.create_block_mask(bottom_right_causal(seq_q, seq_k), None, None, seq_q, seq_k,
                                             device=q.device)
    before = _uncompiled_calls[0]
    try:
        with torch._dynamo.config.patch(**_hard_recompile_limit()):
            result = _compiled()(q, k, v, block_mask, sm_scale, k.shape[1] != q.shape[1], bool(want_lse))
    except Exception as exc:
        if _hit_recompile_limit(exc):
            raise EagerFallback(f"flex_attention hit dynamo's recompile limit ({RECOMPILE_LIMIT}): past it "
                                f"it would run its eager math path, which is refused") from exc
        raise
    if _uncompiled_calls[0] != before:
        raise EagerFallback("flex_attention ran uncompiled (dynamo fell back to eager: disabled, or past "
                            "a recompile limit): its eager math path is refused")
    return result


def _hit_recompile_limit(exc: BaseException) -> bool:
    """Whether dynamo's hard failure at the recompile limit is `exc` or what caused it."""
    for _ in range(8):  # a few links of the chain: torch may wrap it
        if exc is None or type(exc).__name__ in _LIMIT_ERRORS:
            return exc is not None
        exc = exc.__cause__ or exc.__context__
    return False


def _hard_recompile_limit() -> dict:
    """dynamo config: the recompile limits at RECOMPILE_LIMIT, and hitting them an error."""
    config = torch._dynamo.config
    settings = {}
    for names in _LIMIT_NAMES:
        name = next((name for name in names if hasattr(config, name)), None)
        if name:
            settings[name] = RECOMPILE_LIMIT
    fail = next((name for name in _FAIL_NAMES if hasattr(config, name)), None)
    if fail:
        settings[fail] = True
    return settings


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


_watching = [False]


def _watch_compilation() -> None:
    """Register CLOCK with dynamo's compile callbacks, once per process (if this torch has them)."""
    if _watching[0]:
        return
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:
        return
    callback_handler.register_start_callback(CLOCK.start)
    callback_handler.register_end_callback(CLOCK.end)
    _watching[0] = True
