"""The tensors a case is compared with (conformance.judging.comparison_paths): the second torch
path is the same computation in another summation order, put back in order."""

import pytest
import torch

from conformance.cases.catalog import Case
from conformance.cases.inputs import make_inputs
from conformance.judging.comparison_paths import comparison_paths, reverse_head_dim
from conformance.judging.operators import OPERATORS
from conformance.bundled.reference import REFERENCE


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float8_e4m3fn, torch.float8_e5m2])
def test_reverse_head_dim_is_an_exact_involution(dtype):
    x = torch.randn(2, 3, 5, 8, generator=torch.Generator().manual_seed(1)).to(dtype)
    flipped = reverse_head_dim(x)
    assert flipped.dtype == dtype
    assert torch.equal(flipped[..., 0].float(), x[..., -1].float())
    assert torch.equal(reverse_head_dim(flipped).view(torch.uint8), x.view(torch.uint8))


@pytest.mark.parametrize("case_id", [
    "flash_attention.fwd[fp32,d96,causal,B1,H7,Hkv7,Sq2,Sk5,lse,total,seed0]",
    "flash_attention.bwd[fp32,d64,noncausal,B1,H2,Hkv2,Sq50,Sk1,seed3]",
    "flash_attention.bwd[fp16,d32,causal,B1,H4,Hkv2,Sq64,Sk64,bshd,seed0]",
    "piecewise_attention.bwd[fp32,d16,causal,B1,H2,Hkv2,Sq33,Sk40,dist8,seed0]",
])
def test_both_torch_paths_compute_the_reference_in_their_own_order(case_id):
    """Both orders agree with the float64 reference to fp32/fp16 accuracy (the reversal is
    undone on every result), and on these fp32 cases they are different draws."""
    case = Case.from_id(case_id)
    op = OPERATORS[case.op]
    paths = comparison_paths(case, op, make_inputs(case, "cpu", op.inputs), None)
    assert set(paths.torch_paths) == set(paths.reference)
    tolerance = 1e-4 if case.dtype == "fp32" else 2e-2
    differ = False
    for name, ref in paths.reference.items():
        natural, reversed_d = paths.torch_paths[name]
        for path in (natural, reversed_d):
            assert path.shape == ref.shape
            assert torch.allclose(path.double(), ref, atol=tolerance, rtol=tolerance), name
        differ |= not torch.equal(natural, reversed_d)
    assert differ or case.dtype != "fp32"


def test_the_reference_itself_is_computed_once_in_the_natural_order():
    case = Case.from_id("flash_attention.fwd[fp16,d64,causal,B1,H2,Hkv2,Sq130,Sk61,lse,seed8]")
    op = OPERATORS[case.op]
    inputs = make_inputs(case, "cpu", op.inputs)
    paths = comparison_paths(case, op, inputs, None)
    again = op.torch_path(case, inputs.detached(), None, REFERENCE, None)
    assert all(torch.equal(paths.reference[name], again[name]) for name in again)
