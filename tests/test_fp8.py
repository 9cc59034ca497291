"""fp8 (e4m3 / e5m2) forward: where it is allowed, what it returns, what it refuses.

fp8 needs fp8 tensor cores (sm_89 and newer); the interpreter profile does not list
it, so here the plumbing is checked with a target that does, and the accuracy on
GPUs (reports/)."""

from types import SimpleNamespace

import pytest
import torch

from conformance.backends import INTERPRETER, activate

PROFILE = activate()  # before the kernels are imported (interpreter on CPU)

from conformance.bundled import kernels  # noqa: E402
from conformance.cases.catalog import Case  # noqa: E402
from conformance.bundled.kernels.launch import padded_head_dim  # noqa: E402
from conformance.bundled.kernels.validation import FP8  # noqa: E402
from conformance.bundled.reference import MATCHED, REFERENCE, attention_forward  # noqa: E402

# The interpreter as a target with fp8 matrix units, to reach the checks after the dtype's.
FP8_TARGET = SimpleNamespace(device="cpu", name="interpreter", dtypes=INTERPRETER.dtypes + tuple(FP8.values()))


def fp8_qkv(dtype, requires_grad=False):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1, 2, 40, 32, generator=gen).to(dtype).requires_grad_(requires_grad) for _ in range(3)]


@pytest.mark.parametrize("dtype", FP8)
def test_a_backend_without_fp8_says_so(dtype):
    with pytest.raises(ValueError, match=r"q: dtype .* is not supported on target interpreter; "
                                         r"supported: fp16, bf16, fp32"):
        kernels.flash_attention(*fp8_qkv(dtype))


@pytest.mark.parametrize("dtype", FP8)
def test_fp8_is_forward_only(dtype, monkeypatch):
    monkeypatch.setattr("conformance.bundled.kernels.flash.current_target", lambda: FP8_TARGET)
    with pytest.raises(ValueError, match=r"q: .* inputs are forward-only"):
        kernels.flash_attention(*fp8_qkv(dtype, requires_grad=True))


def test_fp8_head_dims_pad_to_the_32_wide_mma():
    assert padded_head_dim(16, torch.float8_e4m3fn) == 32
    assert padded_head_dim(16, torch.float16) == 16
    assert padded_head_dim(96, torch.float8_e5m2) == 128


@pytest.mark.parametrize("dtype", FP8)
def test_both_torch_paths_return_fp16_for_fp8_inputs(dtype):
    q, k, v = fp8_qkv(dtype)
    assert attention_forward(q, k, v, precision=MATCHED)[0].dtype == torch.float16
    assert attention_forward(q, k, v, precision=REFERENCE)[0].dtype == torch.float64


def test_fp8_cases_are_forward_flash_attention_only():
    assert Case("flash_attention", "fwd", "fp8e5m2", 64, True, 1, 2, 2, 8, 8).unsupported_reason(INTERPRETER)
    for direction, op, dist in (("bwd", "flash_attention", None), ("fwd", "piecewise_attention", 4)):
        with pytest.raises(ValueError, match="fp8 dtypes are for flash_attention's forward only"):
            Case(op, direction, "fp8e4m3", 64, True, 1, 2, 2, 8, 8, dist=dist)
