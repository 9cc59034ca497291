"""The head-dim slicing of the score products (kernels.head_slices, issue 32): the RDNA
tables slice the head dim so that no [rows, D] operand stays in registers through a loop.

No RDNA card is here, so the sliced code path is judged where it runs: on the interpreter
(CI) and on whatever GPU the tests run on, each slicing kernel configured to slice
(`cfg=KERNEL:...-hcN`) and judged by the rule like any other case; the compile-only tier
shows what it does to registers on the RDNA targets.
"""

import pytest

from conformance import backends
from conformance.cases.catalog import Case
from conformance.running.implementations import Implementations
from conformance.running.runner import run_case
from conformance.bundled.kernels import tuning, tuning_space
from conformance.bundled.kernels.launch import sliced_head
from conformance.bundled.kernels.targets import Target

import torch

# Slices of 16 columns: 4 of a D = 64 tile, 8 of the D = 128 tile a head dim of 96 pads to
# (its last 32 columns masked).  Ragged, GQA, Sq != Sk, causal: every mask a slice reads.
SLICED = "m16n16s1w4-hc16"
CASES = [
    f"flash_attention.fwd[fp16,d64,causal,B1,H4,Hkv2,Sq77,Sk100,lse,cfg=fwd:{SLICED},seed0]",
    f"flash_attention.fwd[fp32,d96,causal,B1,H4,Hkv2,Sq77,Sk100,total,cfg=total:{SLICED},seed0]",
    f"flash_attention.bwd[bf16,d96,causal,B1,H4,Hkv2,Sq77,Sk100,cfg=bwd_dkdv:{SLICED},seed0]",
    f"flash_attention.bwd[fp32,d64,noncausal,B1,H2,Hkv1,Sq50,Sk33,cfg=bwd_dq:{SLICED},seed0]",
    f"flash_attention.bwd[fp16,d64,causal,B1,H2,Hkv1,Sq77,Sk133,cfg=bwd_dkdv:{SLICED},win24_8,seed0]",
    f"flash_attention.bwd[bf16,d64,causal,B1,H2,Hkv2,Sq96,Sk96,cfg=bwd_dq:{SLICED},softcap2.5,seed0]",
    f"flash_attention.fwd[bf16,d64,noncausal,B2,H4,Hkv2,Sq100,Sk40,cfg=fwd:{SLICED},alibi_bh,seed0]",
    f"piecewise_attention.fwd[fp16,d64,causal,B1,H2,Hkv1,Sq77,Sk100,dist24,cfg=piecewise_fwd:{SLICED},seed0]",
    f"piecewise_attention.bwd[fp16,d96,noncausal,B1,H2,Hkv1,Sq77,Sk100,dist24,cfg=piecewise_bwd_dkdv:{SLICED},seed0]",
    f"piecewise_attention.bwd[fp32,d64,causal,B1,H2,Hkv1,Sq50,Sk70,dist24,cfg=piecewise_bwd_dq:{SLICED},seed0]",
]


@pytest.mark.parametrize("case_id", CASES)
def test_a_kernel_that_slices_the_head_dim_meets_the_rule(case_id):
    profile = backends.active_profile()
    case = Case.from_id(case_id)
    if case.unsupported_reason(profile):
        pytest.skip(case.unsupported_reason(profile))
    line = run_case(case, profile, Implementations.from_specs([]))
    assert line["verdict"] == "pass", line.get("reason")
    assert line["launched_config"] == case.config  # the sliced configuration really ran


def test_a_slice_is_passed_only_below_the_head_dim_and_never_under_an_8_bit_dots_k():
    config = tuning.LaunchConfig(32, 16, num_warps=8, head_chunk=16)
    assert sliced_head(config, 128, torch.float16) == 16
    assert sliced_head(config, 16, torch.float16) is None  # one slice is the whole tile
    assert sliced_head(config, 128, torch.float8_e4m3fn) == 32
    assert sliced_head(tuning.LaunchConfig(32, 16), 128, torch.float16) is None


@pytest.mark.parametrize("chunk, message", [(8, "power of two >= 16"), (48, "power of two >= 16")])
def test_a_malformed_slice_is_refused_by_name(chunk, message):
    with pytest.raises(ValueError, match=f"head_chunk must be a {message}"):
        tuning.LaunchConfig(32, 16, head_chunk=chunk)
    with pytest.raises(ValueError, match="cannot be combined with descriptors"):
        tuning.LaunchConfig(32, 16, head_chunk=32, descriptors=True)


def test_rdna_tables_slice_where_the_operands_fill_the_registers_and_nowhere_else():
    """RDNA3 and RDNA4 slice the head dims whose held operands spilled (fp16/bf16 at D = 256 on
    both, D = 128 on gfx11 and in piecewise attention; fp32 from D = 128); every other family
    keeps whole tiles."""
    for target in (Target("hip", "gfx1100", 32), Target("hip", "gfx1201", 32)):
        for kernel in tuning_space.SLICING:
            assert tuning.launch_config(kernel, 256, "fp32", target).head_chunk is not None, (target, kernel)
            if kernel != "total":  # fp16/bf16 total attention holds one operand: whole tiles fit
                assert tuning.launch_config(kernel, 256, "fp16", target).head_chunk is not None, (target, kernel)
        for kernel in ("fwd", "bwd_dkdv", "bwd_dq"):
            assert tuning.launch_config(kernel, 64, "fp16", target).head_chunk is None
        assert tuning.launch_config("piecewise_bwd_dkdv", 128, "fp16", target).head_chunk is not None
    assert tuning.launch_config("bwd_dq", 128, "fp16", Target("hip", "gfx1100", 32)).head_chunk is not None
    for target in (Target("cuda", 80, 32), Target("cuda", 90, 32), Target("cuda", 120, 32),
                   Target("hip", "gfx942", 64)):
        for kernel in tuning_space.KERNELS:
            for head_dim in (64, 128, 256):
                assert tuning.launch_config(kernel, head_dim, "fp16", target).head_chunk is None


def test_only_kernels_that_take_a_slice_are_given_one():
    """A launch passes HEAD_CHUNK wherever a table sets head_chunk: a table that set it for a
    kernel without the parameter would fail at launch, on hardware nobody here has."""
    for table_set in (*tuning.NVIDIA_SETS, *tuning.AMD_SETS):
        for role, launch_table in table_set.tables.items():
            if any(config.head_chunk is not None for _, config in launch_table.rows):
                assert role.split(".")[0] in tuning_space.SLICING, (table_set.name, role)
