"""The implementations benchmarked: the bundled Triton kernel and torch SDPA's backends.

Each is `fn(q, k, v, causal) -> out` on (batch, heads, seq_len, head_dim) tensors.
SDPA runs under `torch.nn.attention.sdpa_kernel(<one backend>)`, so a backend that
cannot take a problem raises instead of silently falling back to another; the
reason torch gives (its warnings) is recorded as the skip reason.

The math backend materialises the whole B·H·S×S score matrix (and, for the
backward, the probabilities and their gradient): it runs only where that fits.
"""

from __future__ import annotations

import warnings

import torch

GIB = 2**30
BUNDLED = "bundled"
SDPA_BACKENDS = {"sdpa-flash": "FLASH_ATTENTION", "sdpa-cudnn": "CUDNN_ATTENTION",
                 "sdpa-efficient": "EFFICIENT_ATTENTION", "sdpa-math": "MATH"}
NAMES = (BUNDLED, *SDPA_BACKENDS)
# S x S matrices the math backend holds at its peak, per direction: scores and
# probabilities forward; saved probabilities, their gradient and the scores' gradient
# backward. Counted as fp32 (4 bytes) to stay on the safe side of its upcasts.
_MATH_MATRICES = {"fwd": 2, "bwd": 3}
_MATH_MEMORY_SHARE = 0.5  # of the device memory free before the problem's tensors


def bundled(q, k, v, causal):
    import kernels

    return kernels.flash_attention(q, k, v, causal=causal)


def sdpa(backend_name: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, backend_name)

    def run(q, k, v, causal):
        with sdpa_kernel(backend):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
    return run


def implementation(name: str):
    """`fn(q, k, v, causal)` of a benchmarked implementation, by name (see NAMES)."""
    return bundled if name == BUNDLED else sdpa(SDPA_BACKENDS[name])


def math_memory_estimate(problem, direction: str) -> float:
    """Bytes of the S x S matrices the math backend holds at its peak."""
    return _MATH_MATRICES[direction] * problem.batch * problem.heads * problem.seq_len**2 * 4


def skip_reason(name: str, problem, direction: str, free_bytes: int) -> str | None:
    """Why `name` is not run on this problem (decided before launching), or None."""
    if name != "sdpa-math":
        return None
    needed = math_memory_estimate(problem, direction)
    if needed <= _MATH_MEMORY_SHARE * free_bytes:
        return None
    return (f"math backend materialises {_MATH_MATRICES[direction]} B·H·S×S matrices: ~{format_bytes(needed)} "
            f"> {_MATH_MEMORY_SHARE:.0%} of the {format_bytes(free_bytes)} free")


def format_bytes(count: float) -> str:
    return f"{count / GIB:.0f} GiB" if count >= GIB else f"{count / 2**20:.3g} MiB"


def call_recording_warnings(call):
    """(result, warning texts) of `call()`; SDPA explains there why it refused a backend."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(warning.message) for warning in caught]
