"""NaN and Inf inputs (`Case.bad_input`): where they must show, and what is still judged.

A bad-input case plants one NaN or +Inf in the first query tensor (see
`conformance.cases.inputs.bad_input_position`) and runs the implementation on it. The
contract is the one torch keeps: the bad value reaches every output element that
depends on it, never crashes anything, and leaves everything else correct.

"Depends on it" is measured, not guessed: the float64 reference runs twice on the
same inputs with the bad element replaced by two different finite values; the
positions whose results differ depend on that element (masked pairs contribute an
exact 0 x finite = 0, so a mask never counts as dependence). Running the reference
on the NaN itself would not tell: IEEE 0 x NaN = NaN spreads it through every
product that touches its row, in a pattern set by how the products are tiled.

The rule then judges the implementation against the reference and the torch path
computed from the first finite variant, everywhere except where the bad value must
show; inside the bad value's own (batch, head) slice a tiled kernel may spread it
further (0 x NaN again), which is recorded (`spilled`) but not failed; outside that
slice any non-finite value is a `nonfinite` verdict as in every case.
"""

from __future__ import annotations

import torch

from conformance.cases.catalog import Case
from conformance.cases.inputs import bad_input_position
from conformance.judging.rule import BadInputRegion

# Finite stand-ins for the bad value: 0 judges the rest; 1 differs from it enough
# (inputs are ~N(0, 1)) to change every result that depends on the element.
CLEAN_VALUE, PROBE_VALUE = 0.0, 1.0


def replaced(case: Case, tensors: dict, value: float) -> dict:
    """Detached copies of the inputs with the bad element set to `value`; the first
    tensor (where the bad value was planted) is cloned, the others shared."""
    first, *rest = tensors
    cloned = tensors[first].detach().clone()
    cloned[bad_input_position(case)] = value
    return {first: cloned, **{name: tensors[name].detach() for name in rest}}


def regions(case: Case, clean: dict, probe: dict) -> dict:
    """Per tensor name, the BadInputRegion from the reference results of the two finite
    variants: reached = where they differ, own_slice = the planted element's (batch,
    head) slice -- for k-like tensors the kv head serving that query head."""
    batch, head = bad_input_position(case)[:2]
    result = {}
    for name, clean_tensor in clean.items():
        reached = clean_tensor != probe[name]
        heads = clean_tensor.shape[1]
        own_slice = torch.zeros_like(reached)
        own_slice[batch, head * heads // case.heads] = True
        result[name] = BadInputRegion(reached, own_slice)
    return result
