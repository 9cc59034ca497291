"""The comparison rule: the kernel may be at most twice as wrong as torch.

For every output and gradient of a case, three tensors are compared:

* ref    -- the fp32 reference (`reference.REFERENCE`, float64 arithmetic),
* torch  -- the same-precision torch path (`reference.MATCHED`), computed in two
            summation orders (`conformance.judging.comparison_paths`),
* kernel -- the implementation under test,

and the rule is `judge`:

    kernel_err = max|kernel - ref|
    torch_err  = max|torch  - ref|      (the larger of the two orders' errors)
    ratio      = kernel_err / max(torch_err, floor)      (0 when kernel_err == 0)
    pass iff ratio <= 2

Why there is a floor, and why it is `floor()` below
---------------------------------------------------
torch_err can be 0 or nearly so (fp32 cases, tiny problems where both paths
happen to round identically), and then any honest kernel error would give an
infinite ratio. The floor is the rounding no correct implementation avoids:

    floor = u_out * (M + N)  +  u_fp32 * (T + A)

* u_out * M: the final rounding of the result to its own dtype -- the unit
  roundoff u of the tensor's dtype (fp16 2^-11, bf16 2^-8, fp32 2^-24) times
  M = the largest finite |ref|, but at least 0.3 (MIN_MAGNITUDE), because a
  result that is zero by cancellation of O(1) terms still carries their noise.
* u_fp32 * T: one rounding of the fp32 accumulator at the size T of the terms
  the result is computed from. T is M unless the operator declares a larger
  size (`conformance.judging.operators`): lse and the total attention are made from the
  exponentials of the scaled scores, so they inherit the fp32 rounding of the
  scores, whose size is bounded by scale * max|q_i| * max|k_j| (2-norms).
  For an fp16/bf16 output this term is 2^-13 (2^-16) of the first one; for
  an fp32 result it is what a correct fp32 computation carries besides its
  final rounding (measured: reports/flake-cpu/findings.md, finding A).
* u_out * N, for dQ and dK only: the noise that storing the output O in its
  dtype puts on them. Every FlashAttention-2 backward (the kernels, the torch
  path) reads delta_i = sum_d dO_id O_id from the stored O, so each O_id's
  rounding (up to u |O_id|) moves dS_ij = P_ij (dP_ij - delta_i) and, through it,
  dQ and dK. N is the standard deviation of that propagated noise, with the
  roundings independent (reference/delta_noise.py derives it), at the largest
  element. It is small where the softmax is spread (O, an average, is much
  smaller than V) and decisive where it is peaked: at inputs x4 an MQA decode
  backward (bf16, Sq = 1, 8 query heads) had both paths 12-26 ulps off in one dK
  element while M's ulp allowed one, and the kernel's draw came out 2.1x the
  torch path's (finding E). Cost, measured: the smoke tier's dQ/dK allowance
  grew by a median 1.2x (at most 1.7x), every mutant is still killed.
* u_fp32 * A, for dQ and dK only: the fp32 accumulator's own rounding of dP_ij
  and delta_i, D-term sums that cancel in dP_ij - delta_i where the softmax is
  peaked (one key per row: exactly, and dQ = dK = 0). A is the standard
  deviation of that rounding propagated to the gradient (same module). At
  inputs of size 1 it is far below u_out * M; at inputs x10 the cancelling
  terms are 100x larger and their noise outgrew MIN_MAGNITUDE's allowance
  (finding F: an fp16 backward with one key per row, both paths 1e-4 .. 1e-3
  off an exact 0, the kernel's draw up to 5.4x the torch path's).

At the bound of 2 the floor admits a few roundings at the result's or its
scores' magnitude, so it cannot hide a real error (a wrong scale, a dropped
block, a bad mask, an fp16 accumulator all cost far more; the mutants in
`mutants/` check that), and it only matters when torch happens to be that
accurate. The first term is the same idea as newer FlashAttention tests'
`2 * max|(ref + 0.3 - 0.3) - ref|` absolute tolerance.

The floor is one of two guards against a torch path that is accurate by luck;
the other is torch_err itself, taken over two summation orders (one draw of
rounding can come out nearly exact on a small problem, two rarely both do).
Findings A and B in reports/flake-cpu/findings.md show what each one covers.

All functions here are pure; they never modify their arguments.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

BOUND = 2.0
# Which version of the rule a run judged by, recorded in env.json: reports made under an
# older one (the matrix compares columns) say so.  4: the floor u_out*(M+N) + u_fp32*(T+A)
# with the accumulator noise A (reports/flake-cpu/findings.md, finding F); 3 added the
# stored output's delta noise (finding E), 2 the fp32 term and torch's two summation orders.
RULE_REVISION = 4

# Unit roundoff (half an ulp at 1.0) of each dtype a kernel output can have.
UNIT_ROUNDOFF = {"fp16": 2.0**-11, "bf16": 2.0**-8, "fp32": 2.0**-24, "fp64": 2.0**-53}


def _as_float64(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    return tensor.detach().to(device=device, dtype=torch.float64)


def max_abs_error(actual: torch.Tensor, ref: torch.Tensor, exclude: torch.Tensor | None = None) -> float:
    """max|actual - ref| in float64, with equal positions counting 0.

    Equal infinities (lse = -inf on rows that see no key) are equal, not NaN.
    Any NaN in `actual`, or an infinity where `ref` differs, makes the error inf.
    Positions where the bool mask `exclude` is set are not measured.
    """
    if actual.shape != ref.shape:
        raise ValueError(f"shape {tuple(actual.shape)} does not match the reference's {tuple(ref.shape)}")
    if ref.numel() == 0:
        return 0.0
    a = _as_float64(actual, ref.device)
    r = _as_float64(ref, ref.device)
    diff = torch.where(a == r, 0.0, (a - r).abs())
    diff = torch.where(diff.isnan(), math.inf, diff)
    if exclude is not None:
        diff = torch.where(exclude.to(diff.device), 0.0, diff)
    return float(diff.max())


def nonfinite_mismatch(actual: torch.Tensor, ref: torch.Tensor, exclude: torch.Tensor | None = None) -> int:
    """How many elements are NaN/Inf in `actual` where `ref` is finite (outside `exclude`)."""
    actual_bad = ~torch.isfinite(actual.detach().to(ref.device))
    counted = actual_bad & torch.isfinite(ref.detach())
    if exclude is not None:
        counted &= ~exclude.to(ref.device)
    return int(counted.sum())


class BadInputRegion(NamedTuple):
    """Where one planted NaN/Inf input may show in one tensor (see conformance.judging.bad_inputs).

    reached:   positions whose value depends on the bad input: they must be non-finite.
    own_slice: the bad input's (batch, head) slice, where further non-finite values are
               tolerated (IEEE 0 * NaN = NaN spreads it through tiled products in ways
               that depend on the tiling) -- but nowhere else.
    """

    reached: torch.Tensor
    own_slice: torch.Tensor


# The smallest magnitude the floor assumes. A result that is zero by cancellation
# (e.g. every gradient when each query sees exactly one key: P = 1, so dP = delta)
# is computed from O(1) terms, and any implementation returns their rounding
# noise; a floor of u * max|ref| = 0 would then fail an exact kernel. Newer
# FlashAttention tests use the same 0.3 (their `(ref + 0.3 - 0.3) - ref`).
MIN_MAGNITUDE = 0.3

# Kernels and the torch path accumulate in fp32 whatever their input dtype.
ACCUMULATOR = "fp32"


def floor(dtype_name: str, ref: torch.Tensor, term_size: float = 0.0, delta_noise: float = 0.0,
          accumulator_noise: float = 0.0) -> float:
    """u_out * (M + delta_noise) + u_fp32 * (max(M, term_size) + accumulator_noise),
    M = max(largest finite |ref|, MIN_MAGNITUDE) (see module doc); 0 when ref has no finite value."""
    finite = ref.detach()[torch.isfinite(ref.detach())]
    if finite.numel() == 0:
        return 0.0
    magnitude = max(float(finite.abs().max().to(torch.float64)), MIN_MAGNITUDE)
    return (UNIT_ROUNDOFF[dtype_name] * (magnitude + delta_noise)
            + UNIT_ROUNDOFF[ACCUMULATOR] * (max(magnitude, term_size) + accumulator_noise))


class Judgement(NamedTuple):
    ratio: float
    passed: bool


def judge(kernel_err: float, torch_err: float, floor: float, bound: float = BOUND) -> Judgement:
    """THE rule: ratio = kernel_err / max(torch_err, floor), pass iff ratio <= bound.

    kernel_err == 0 gives ratio 0 (even when the denominator is 0); a positive
    error over a zero denominator gives inf; a NaN kernel_err counts as inf.
    A non-finite torch_err means the torch path itself broke: the ratio is NaN
    and the case fails rather than passing against an infinite allowance.
    """
    if not math.isfinite(torch_err):
        return Judgement(math.nan, False)
    if math.isnan(kernel_err):
        kernel_err = math.inf
    if kernel_err == 0:
        return Judgement(0.0, True)
    allowance = max(torch_err, floor)
    ratio = kernel_err / allowance if allowance > 0 else math.inf
    return Judgement(ratio, ratio <= bound)


def compare_tensor(name: str, kernel: torch.Tensor, torch_path, ref: torch.Tensor,
                   dtype_name: str, bound: float = BOUND, bad_input: BadInputRegion | None = None,
                   term_size: float = 0.0, delta_noise: float = 0.0, accumulator_noise: float = 0.0) -> dict:
    """Judge one tensor; returns the record stored in a results line:
    {name, kernel_err, torch_err, floor, magnitude (max finite |ref|), ratio, nonfinite,
    passed, delta_noise and accumulator_noise (when given)}, plus
    {unpropagated, spilled} with a `bad_input` region (torch_path and ref then come
    from inputs without the bad value; the region's positions are not measured).
    `torch_path` is one tensor or several (the same torch computation in different
    summation orders, conformance.judging.comparison_paths): torch_err is the largest of their
    errors. `term_size` is the operator's declared size of the tensor's terms, `delta_noise`
    and `accumulator_noise` the sizes of the noise that rounding the stored output and the fp32
    accumulator put on a gradient (see `floor`).
    `passed` is the rule alone; the runner turns the counts into verdicts."""
    torch_paths = (torch_path,) if isinstance(torch_path, torch.Tensor) else tuple(torch_path)
    exclude, extra = None, {}
    if bad_input is not None:
        kernel_bad = ~torch.isfinite(kernel.detach()).to(ref.device)
        reached, own_slice = bad_input.reached.to(ref.device), bad_input.own_slice.to(ref.device)
        exclude = reached | (own_slice & kernel_bad)
        extra = {"unpropagated": int((reached & ~kernel_bad).sum()),
                 "spilled": int((own_slice & ~reached & kernel_bad).sum())}
    kernel_err = max_abs_error(kernel, ref, exclude)
    torch_err = max(max_abs_error(path, ref, exclude) for path in torch_paths)
    tensor_floor = floor(dtype_name, ref, term_size, delta_noise, accumulator_noise)
    finite_ref = ref.detach()[torch.isfinite(ref.detach())]
    ratio, passed = judge(kernel_err, torch_err, tensor_floor, bound)
    return {
        "name": name,
        "kernel_err": kernel_err,
        "torch_err": torch_err,
        "floor": tensor_floor,
        "magnitude": float(finite_ref.abs().max()) if finite_ref.numel() else 0.0,
        "ratio": ratio,
        "nonfinite": nonfinite_mismatch(kernel, ref, exclude),
        "passed": passed,
        **({"delta_noise": delta_noise} if delta_noise else {}),
        **({"accumulator_noise": accumulator_noise} if accumulator_noise else {}),
        **extra,
    }
