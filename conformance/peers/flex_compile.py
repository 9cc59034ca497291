"""Keeping torch's FlexAttention compiled while it is judged (conformance.peers.flex).

Called uncompiled, flex_attention runs an unfused math path that materialises the whole score
matrix, which is not the FlexAttention anyone ships, so a verdict must never judge it:

* dynamo's recompile limit (8 by default): past it dynamo silently runs the function
  uncompiled. During the adapter's calls the limit is RECOMPILE_LIMIT (above any tier's
  distinct shapes) and hitting it a hard failure (`hard_recompile_limit`: fullgraph=True and
  dynamo's fail_on_recompile_limit_hit).
* a tripwire in the compiled function (`uncompiled_calls`, counted by the adapter's traced
  function where dynamo did not compile it) catches every call that ran uncompiled whatever
  the cause (a disabled dynamo, a forced-eager stance).

Either way `run_compiled` raises `EagerFallback`: the case is `error` with that reason.

Compile time is measured apart from the case (`CompileClock`, from dynamo's compile callbacks:
frame compiles and the backward compiled lazily at the first backward); the runner puts it on
each results line as `compile_s` and `compilations` (conformance.running.runner).
"""

from __future__ import annotations

import time

import torch

# Raised during the adapter's calls: far above the distinct shapes of any tier (the standard
# tier has ~600 flash_attention cases), so only a deliberate lower limit is ever hit.
RECOMPILE_LIMIT = 4096
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
uncompiled_calls = [0]  # the tripwire: calls of the adapter's function that dynamo did not run compiled


def run_compiled(compiled, *args):
    """compiled(*args), the compiled flex call, its eager math path refused (module doc)."""
    watch_compilation()
    before = uncompiled_calls[0]
    try:
        with torch._dynamo.config.patch(**hard_recompile_limit()):
            result = compiled(*args)
    except Exception as exc:
        if hit_recompile_limit(exc):
            raise EagerFallback(f"flex_attention hit dynamo's recompile limit ({RECOMPILE_LIMIT}): past it "
                                f"it would run its eager math path, which is refused") from exc
        raise
    if uncompiled_calls[0] != before:
        raise EagerFallback("flex_attention ran uncompiled (dynamo fell back to eager: disabled, or past "
                            "a recompile limit): its eager math path is refused")
    return result


def hit_recompile_limit(exc: BaseException) -> bool:
    """Whether dynamo's hard failure at the recompile limit is `exc` or what caused it."""
    for _ in range(8):  # a few links of the chain: torch may wrap it
        if exc is None or type(exc).__name__ in _LIMIT_ERRORS:
            return exc is not None
        exc = exc.__cause__ or exc.__context__
    return False


def hard_recompile_limit() -> dict:
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


_watching = [False]


def watch_compilation() -> None:
    """Register CLOCK with dynamo's compile callbacks (if this torch has them): once, and
    again after a `torch._dynamo.reset()`, which clears them (checked before every call)."""
    try:
        from torch._dynamo.callback import callback_handler
    except ImportError:
        return
    registered = getattr(callback_handler, "start_callbacks", None)
    if (CLOCK.start in registered) if registered is not None else _watching[0]:
        return
    callback_handler.register_start_callback(CLOCK.start)
    callback_handler.register_end_callback(CLOCK.end)
    _watching[0] = True
