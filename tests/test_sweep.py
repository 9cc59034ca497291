"""The sweep tiers (issue 15): the kernels' tuning space, configured cases, `run --config`,
configurations that cannot launch, and the per-configuration report."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import backends
from conformance.cases.catalog import Case
from conformance.cases.sweep import configuration_counts, sweep_cases
from conformance.compile_only import plan
from conformance.compile_only.targets import target_profile
from conformance.compile_only.tier import judge
from conformance.reporting import configurations as config_report
from conformance.running.configurations import cannot_launch, with_config
from conformance.bundled.kernels import tuning, tuning_space
from conformance.bundled.kernels.targets import INTERPRETER, Target

REPO = Path(__file__).resolve().parent.parent
TARGETS = [Target("cuda", 80, 32), Target("cuda", 90, 32), Target("cuda", 120, 32), Target("hip", "gfx942", 64),
           Target("hip", "gfx1201", 32), INTERPRETER]
CASE = "flash_attention.bwd[fp16,d64,causal,B1,H2,Hkv1,Sq77,Sk100,seed0]"


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.name)
def test_every_configuration_is_named_by_text_that_parses_back(target):
    for kernel in tuning_space.KERNELS:
        for dtype in ("fp16", "fp32"):
            configs = tuning_space.space(kernel, target, dtype)
            assert configs and len(set(configs)) == len(configs)
            for config in configs:
                assert tuning_space.parse_config(tuning_space.config_text(config)) == config


def test_descriptor_configurations_only_where_the_target_compiles_them():
    hopper, ampere = Target("cuda", 90, 32), Target("cuda", 80, 32)
    assert any(c.descriptors for c in tuning_space.space("fwd", hopper))
    assert not any(c.descriptors for c in tuning_space.space("fwd", ampere))
    assert not any(c.descriptors for c in tuning_space.space("total", hopper))  # not a streaming kernel


def test_each_family_has_a_space_of_its_own():
    """RDNA's 256 VGPRs: small tiles, up to 16 waves, one stage, no occupancy hint; consumer
    Blackwell streams through its TMA unit like Hopper; every table's choice is in its space."""
    rdna = tuning_space.space("bwd_dkdv", Target("hip", "gfx1201", 32))
    assert {c.block_m for c in rdna} == {16, 32, 64, 128} and {c.block_n for c in rdna} == {16, 32, 64}
    assert {c.num_warps for c in rdna} == {4, 8, 16} and {c.num_stages for c in rdna} == {1}
    assert all(c.waves_per_eu is None for c in rdna)
    assert any(c.descriptors for c in tuning_space.space("bwd_dq", Target("cuda", 120, 32)))
    cdna = tuning_space.space("fwd", Target("hip", "gfx942", 64))
    assert {c.waves_per_eu for c in cdna} == {None, 2}
    assert cdna == tuning_space.space("fwd", Target("hip", "gfx950", 64))
    for target in (Target("hip", "gfx1201", 32), Target("hip", "gfx1100", 32)):
        for kernel in (k for k in tuning_space.KERNELS if k != "bwd_preprocess"):  # one tile of its own
            for dtype in ("fp16", "fp32"):
                members = tuning_space.space(kernel, target, dtype)
                for head_dim in (64, 128, 256):
                    assert tuning.launch_config(kernel, head_dim, dtype, target) in members


def test_an_override_wins_over_the_tables_and_is_undone():
    config = tuning.LaunchConfig(16, 16, num_warps=4, num_stages=1)
    before = tuning.launch_config("bwd_dq", 64, target=INTERPRETER)
    with tuning_space.configured("bwd_dq", config):
        assert tuning.launch_config("bwd_dq", 64, "fp32", target=INTERPRETER) == config
        assert tuning.launch_config("fwd", 64, target=INTERPRETER) != config  # other kernels keep theirs
    assert tuning.launch_config("bwd_dq", 64, target=INTERPRETER) == before


def test_launch_records_nest_and_each_sees_the_launches_inside_it():
    first, second = tuning.LaunchConfig(16, 16), tuning.LaunchConfig(32, 32)
    with tuning.recorded_launches() as outer:
        tuning.record_launch("fwd", first)
        with tuning.recorded_launches() as inner, tuning.recorded_launches() as innermost:
            tuning.record_launch("bwd_dq", second)
        tuning.record_launch("total", first)
    tuning.record_launch("fwd", second)  # none open: noted nowhere
    assert outer == {"fwd": first, "bwd_dq": second, "total": first}
    assert inner == innermost == {"bwd_dq": second}


@pytest.mark.parametrize("tier, target", [("sweep-quick", INTERPRETER), ("sweep", Target("cuda", 90, 32))])
def test_a_sweep_covers_every_configuration_of_every_kernel_once_named(tier, target):
    cases = sweep_cases(tier, target, ("fp16", "bf16", "fp32", "fp8e4m3"))
    ids = [case.id for case in cases]
    assert len(ids) == len(set(ids)) and all("cfg=" in case_id for case_id in ids)
    assert all(Case.from_id(case_id).id == case_id for case_id in ids[:50])
    covered = configuration_counts(cases)
    for kernel in tuning_space.KERNELS:
        for config in tuning_space.space(kernel, target, "fp16"):
            assert f"{kernel}:{tuning_space.config_text(config)}" in covered


def test_a_case_may_only_configure_a_kernel_its_call_launches():
    with pytest.raises(ValueError, match="does not launch"):
        Case("flash_attention", "fwd", "fp16", 64, True, 1, 2, 1, 8, 8, config="bwd_dq:m64n64s1w4")
    with pytest.raises(ValueError, match="config must be"):
        Case("flash_attention", "bwd", "fp16", 64, True, 1, 2, 1, 8, 8, config="bwd_dq:big")


def test_run_config_checks_the_space_of_the_active_target():
    profile = backends.profile_by_key("interpreter")
    case = Case.from_id(CASE)
    assert with_config([case], "bwd_dq:m32n16s1w4", profile)[0].config == "bwd_dq:m32n16s1w4"
    with pytest.raises(ValueError, match=r"--config: bwd_dq has no launch configuration m128n64s3w8 .*its 18: m16n16s1w4"):
        with_config([case], "bwd_dq:m128n64s3w8", profile)
    with pytest.raises(ValueError, match="--config: unknown kernel 'dq'"):
        with_config([case], "dq:m32n16s1w4", profile)


@pytest.mark.parametrize("config, message", [
    ("bwd_dq:m128n64s3w8", "has no launch configuration m128n64s3w8"),
    ("bwd_dq:m1x", "malformed launch configuration"),
    ("bwd_dq", "expected kernel:configuration"),
])
def test_a_bad_config_is_a_usage_error_before_anything_runs(tmp_path, config, message):
    result = subprocess.run([sys.executable, "-m", "conformance", "run", "--case", CASE, "--config", config,
                             "--backend", "interpreter", "--out", str(tmp_path / "run")],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_a_configuration_the_device_cannot_fit_is_unsupported_with_the_reason():
    class OutOfResources(Exception):
        pass

    case = Case.from_id(CASE.replace("seed0", "cfg=bwd_dq:m64n64s3w8,seed0"))
    failure = RuntimeError("launch failed")
    failure.__cause__ = OutOfResources("out of resource: shared memory, Required: 262144, Hardware limit: 232448")
    assert cannot_launch(case, failure) == ("bwd_dq cannot launch m64n64s3w8 here: out of resource: shared memory, "
                                            "Required: 262144, Hardware limit: 232448")
    assert cannot_launch(case, RuntimeError("illegal memory access")) is None
    assert cannot_launch(Case.from_id(CASE), failure) is None  # a table's configuration must launch


def test_the_report_groups_verdicts_by_kernel_and_configuration():
    line = lambda config, verdict, ratio=0.5: {"case": f"c{config}{verdict}", "config": config, "verdict": verdict,
                                               "worst_ratio": ratio, "reproduce": f"repro {config}",
                                               "reason": "why"}  # noqa: E731
    lines = [line("fwd:m64n64s1w4", "pass"), line("fwd:m64n64s1w4", "fail", 3.0),
             line("fwd:m128n64s1w4", "pass"), line("fwd:m128n128s3w8", "unsupported", None)]
    assert config_report.failing_configurations(lines) == ["fwd:m64n64s1w4"]
    headers, rows = config_report.kernel_totals(lines)
    assert rows == [["fwd", 3, 1, 1, 1]]
    headers, rows = config_report.configuration_table(lines)
    failing = next(row for row in rows if row[1] == "m64n64s1w4")
    assert failing[-1] == "repro fwd:m64n64s1w4" and failing[-2] == "3"


def test_the_compile_sweep_plans_the_same_space_and_calls_an_oversized_configuration_unsupported():
    profile = target_profile("sm_90")
    calls = plan.sweep_calls(profile)
    assert {call.config for call in calls} >= {f"bwd_dq:{tuning_space.config_text(c)}"
                                               for c in tuning_space.space("bwd_dq", profile.target)}
    line = {"case": "compile.bwd_dq[cuda:sm_90,fp16,d128,causal,cfg=m128n128s3w8]", "shared_bytes": 262144,
            "shared_limit_bytes": 232448, "registers": 200, "register_budget": 255, "spills_bytes": 0,
            "config": {"num_warps": 8}}
    assert judge(line, profile, None)[0] == "unsupported"
    assert judge({**line, "case": "compile.bwd_dq[cuda:sm_90,fp16,d128,causal]"}, profile, None)[0] == "fail"


def test_a_configured_case_runs_end_to_end_on_the_interpreter(tmp_path):
    cases = [CASE.replace("seed0", "cfg=bwd_dkdv:m16n32s1w4,seed0"), CASE.replace("seed0", "cfg=bwd_dq:m32n16s1w4-tma,seed0")]
    if not INTERPRETER.tensor_descriptors:
        cases = cases[:1]
    result = subprocess.run([sys.executable, "-m", "conformance", "run", *(f"--case={c}" for c in cases),
                             "--backend", "interpreter", "--out", str(tmp_path / "run")],
                            cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "launch configurations of 2 kernels" in result.stdout or len(cases) == 1
    lines = [json.loads(text) for text in (tmp_path / "run" / "results.jsonl").read_text().splitlines()]
    judged = {line["case"]: line for line in lines if line.get("kind", "case") == "case" and "cfg=" in line["case"]}
    assert set(judged) == set(cases) and all(line["verdict"] == "pass" for line in judged.values())
    launched = {case: line["launched_config"] for case, line in judged.items()}
    assert launched == {case: Case.from_id(case).config for case in cases}  # not the table's m64n64s1w4
    assert "## Launch configurations" in (tmp_path / "run" / "summary.md").read_text()
