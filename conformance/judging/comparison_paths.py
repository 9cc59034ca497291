"""What a case's kernel tensors are compared with: the reference, the torch paths, and
what the rule needs to know about them.

For every case the runner needs, by tensor name:

* the fp32 reference (`reference.REFERENCE`, float64 arithmetic);
* the same-precision torch path (`reference.MATCHED`), twice, in two summation orders
  (see below); the rule takes the larger of their two errors as torch_err;
* for a NaN/Inf input case, the region each tensor's bad value must reach
  (`conformance.judging.bad_inputs`; everything else is computed from a finite stand-in);
* the operator's term sizes and, for gradients, the noise that rounding the stored
  output puts on them through delta, for the rule's floor (`conformance.judging.rule.floor`).

Why two summation orders
------------------------
A same-precision result's rounding error is one draw: the rounding of its sums in
the order one implementation happens to use. On small problems -- a few keys, a few
rows -- that draw can come out nearly exact, and a correct kernel is then "more than
twice as wrong" by luck (reports/flake-cpu/findings.md: fp32 out with few keys,
fp32 dq of one-key rows, lse). A second torch path that sums the head dimension in
reverse (q, k, v and dO reversed along D; the results with a head dimension
reversed back, lse and total have none) is exactly the same computation with other roundings; taking the
worse of the two draws estimates the torch path's error level instead of its luck.
Where the rounding does not depend on that order (the final rounding of an fp16
output), both draws agree and nothing changes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from conformance.bundled.reference import MATCHED, MATCHED_TF32, REFERENCE

from conformance.judging import bad_inputs
from conformance.judging.conventions import DEFAULT as DEFAULT_CONVENTIONS, Conventions
from conformance.cases.catalog import Case
from conformance.cases.inputs import Inputs
from conformance.judging.operators import Operator
from conformance import phases


class ComparisonPaths(NamedTuple):
    reference: dict
    torch_paths: dict       # name -> (in the natural order, with the head dim reversed)
    bad_input_regions: dict
    term_sizes: dict
    gradient_noise: object  # reference.GradientNoise of a backward case, else None


def comparison_paths(case: Case, op: Operator, inputs: Inputs, replay,
                     timer: phases.PhaseClock = phases.NO_CLOCK,
                     conventions: Conventions = DEFAULT_CONVENTIONS) -> ComparisonPaths:
    """The reference and both torch paths of `case` (see the module doc); `replay` is the
    kernel's dropout replay or None; `timer` gets the seconds of the reference, the torch
    paths and the noise estimates (conformance.phases); `conventions` are the implementation's
    declared ones (conformance.judging.conventions): its causal alignment for every path, its
    fp32 matmul precision for the torch paths, its lse of empty rows for reference and paths."""
    dropout = replay.as_reference() if replay is not None else None
    tensors, regions = inputs.detached(), {}
    matched = MATCHED_TF32 if conventions.tf32 else MATCHED

    padding = op.padding_rows(case, next(iter(inputs.tensors.values())).device) if case.lse else None

    def path(values: dict, do, precision) -> dict:
        return with_empty_row_lse(op.torch_path(case, values, do, precision, dropout, conventions), conventions,
                                  padding)

    with timer.phase("reference"):
        if case.bad_input is not None:
            tensors = bad_inputs.replaced(case, inputs.tensors, bad_inputs.CLEAN_VALUE)
            probe = bad_inputs.replaced(case, inputs.tensors, bad_inputs.PROBE_VALUE)
            regions = bad_inputs.regions(case, path(tensors, inputs.do, REFERENCE), path(probe, inputs.do, REFERENCE))
        reference = path(tensors, inputs.do, REFERENCE)
    if replay is not None:
        replay.counting = False  # the keep rate is counted over one precision's passes
    with timer.phase("torch_paths"):
        natural = path(tensors, inputs.do, matched)
        flipped = {name: reverse_head_dim(t) for name, t in tensors.items()}
        reversed_d = path(flipped, None if inputs.do is None else reverse_head_dim(inputs.do), matched)
        reversed_d = {name: reverse_head_dim(t) if t.dim() == 4 else t for name, t in reversed_d.items()}
    paths = {name: (natural[name], reversed_d[name]) for name in natural}
    with timer.phase("noise"):
        noise = op.delta_noise(case, tensors, inputs.do, dropout, conventions) if case.direction == "bwd" else None
        term_sizes = op.term_sizes(case, tensors)
    return ComparisonPaths(reference, paths, regions, term_sizes, noise)


def with_empty_row_lse(tensors: dict, conventions: Conventions, padding=None) -> dict:
    """The paths' lse with rows that see no key (-inf) at the declared value (+inf, declared:
    FlashAttention-2's convention); unchanged under the default. `padding` (bool, broadcasting
    to lse): positions that are no rows of the problem (a varlen case's padding), left -inf as
    the unpacked implementation's result has them (conformance.judging.varlen)."""
    if conventions.lse_empty_rows == "-inf" or tensors.get("lse") is None:
        return tensors
    lse = tensors["lse"]
    empty = lse == float("-inf")
    if padding is not None:
        empty &= ~padding.to(lse.device)
    return {**tensors, "lse": lse.masked_fill(empty, float("inf"))}


def reverse_head_dim(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` reversed along its last dim (a copy; fp8, which torch cannot flip, as bytes)."""
    if tensor.element_size() == 1:
        return tensor.view(torch.uint8).flip(-1).view(tensor.dtype)
    return tensor.flip(-1)
