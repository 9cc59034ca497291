"""How a tensor's error is spread: the median and 99th percentile of |actual - ref| in ulps.

The rule looks at the largest error only. One outlier and a tensor that is systematically
a few ulps off can have the same maximum; their median and tail differ. An element's ulp is
the spacing of the tensor's dtype at the reference's own magnitude there, so a kernel that
rounds like torch reads ~0.25-0.5 ulp (median) whatever the values' scale.

References below 2^-14 (fp16's smallest normal) count at that size: around an exact zero
the ulp shrinks without bound, and the cancellation noise every implementation leaves
there would read as millions of ulps.
"""

from __future__ import annotations

import math

import torch

# Explicit mantissa bits of each dtype an output can have.
MANTISSA_BITS = {"fp16": 10, "bf16": 7, "fp32": 23, "fp64": 52}
SMALLEST_MAGNITUDE = 2.0**-14
# Quantiles of at most this many elements (a fixed stride through larger tensors): torch's
# quantile refuses more than 2^24, and a percentile does not need every element.
MAX_SAMPLE = 2**22


def ulps(actual: torch.Tensor, ref: torch.Tensor, dtype_name: str) -> torch.Tensor:
    """|actual - ref| / ulp(max(|ref|, 2^-14)) per element, float64, finite positions only
    (flattened): a NaN or Inf is counted by the rule, not here."""
    a = actual.detach().to(device=ref.device, dtype=torch.float64).flatten()
    r = ref.detach().to(torch.float64).flatten()
    finite = torch.isfinite(a) & torch.isfinite(r)
    a, r = a[finite], r[finite]
    magnitude = r.abs().clamp_min(SMALLEST_MAGNITUDE)
    spacing = torch.exp2(torch.floor(torch.log2(magnitude)) - MANTISSA_BITS[dtype_name])
    return (a - r).abs() / spacing


def _quantiles(values: torch.Tensor) -> tuple[float, float]:
    if values.numel() == 0:
        return math.nan, math.nan
    if values.numel() > MAX_SAMPLE:
        values = values[:: math.ceil(values.numel() / MAX_SAMPLE)]
    median, p99 = torch.quantile(values, torch.tensor([0.5, 0.99], dtype=values.dtype, device=values.device))
    return float(median), float(p99)


def spread(kernel: torch.Tensor, torch_path: torch.Tensor, ref: torch.Tensor, dtype_name: str) -> dict:
    """{median, p99} of the kernel's error in ulps and of the torch path's, for a results line."""
    kernel_median, kernel_p99 = _quantiles(ulps(kernel, ref, dtype_name))
    torch_median, torch_p99 = _quantiles(ulps(torch_path, ref, dtype_name))
    return {"median": _rounded(kernel_median), "p99": _rounded(kernel_p99),
            "torch_median": _rounded(torch_median), "torch_p99": _rounded(torch_p99)}


def _rounded(value: float) -> float | None:
    return None if math.isnan(value) else float(f"{value:.3g}")
