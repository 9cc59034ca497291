"""Primitive probes on Triton's CPU interpreter, their results lines, known issues
scoped by probe (xfail / xpass), and the attribution of failing cases to failed
probes ("likely backend fault: ...")."""

import dataclasses
import math
import textwrap

import pytest
import torch

from conformance import backends
from conformance.backends import INTERPRETER, cuda_profile
from conformance.judging import verdicts
from conformance.probing import attribution, probe_measures, probe_runs, probes
from conformance.probing.probe_measures import Measurement
from conformance.reporting.summary import probe_table
from conformance.robustness import known_issues
from conformance.running.results import from_json, to_json

PROFILE = backends.activate()  # the interpreter on CPU: before any probe kernel is imported


@pytest.fixture(scope="module")
def interpreter_lines():
    if not PROFILE.interpreted:
        pytest.skip("the interpreter's faults are only measured on the interpreter")
    return {line["case"]: line for line in probe_runs.run_probes(PROFILE)}


def test_the_interpreters_bf16_faults_fail_their_probes(interpreter_lines):
    dot, cast = interpreter_lines["probe.dot[bf16]"], interpreter_lines["probe.cast[bf16]"]
    assert dot["verdict"] == cast["verdict"] == verdicts.FAIL
    assert dot["max_error"] > 1e6 * dot["tolerance"]  # garbage, not rounding
    assert cast["max_error"] == 1.0 and cast["unit"] == "ulp"  # truncation: one ulp off
    for line, workaround in ((dot, "interpreter_bf16_dot"), (cast, "interpreter_bf16_cast")):
        # the kernels' workaround is named, the probe still fails
        assert line["worked_around"] == workaround and workaround in line["reason"]


def test_the_interpreters_bf16_subnormal_upcast_fails_unhandled(interpreter_lines):
    line = interpreter_lines["probe.upcast[bf16]"]
    assert line["verdict"] == verdicts.FAIL and line["worked_around"] is None
    assert "254 of 65280 values differ" in line["reason"]  # exactly the bf16 subnormals
    assert probes.unhandled_failures(list(interpreter_lines.values())) == [line]


@pytest.mark.parametrize("probe_id", ["probe.dot[fp16]", "probe.dot[fp32]", "probe.cast[fp16]",
                                      "probe.upcast[fp16]", "probe.exp2[fp32]", "probe.row_max[fp32]",
                                      "probe.row_sum[fp32]", "probe.rand[fp32]", "probe.philox[uint32]",
                                      "probe.atomic_add[fp32]"])
def test_sound_primitives_pass(interpreter_lines, probe_id):
    line = interpreter_lines[probe_id]
    assert line["verdict"] == verdicts.PASS, line["reason"]
    assert line["max_error"] <= line["tolerance"]


def test_probe_lines_follow_the_results_contract(interpreter_lines):
    assert list(interpreter_lines) == list(probes.PROBE_IDS)  # every probe, in catalog order
    for probe_id, line in interpreter_lines.items():
        assert line["kind"] == "probe" and line["case"] == probe_id == f"probe.{line['probe']}[{line['dtype']}]"
        assert line["verdict"] in verdicts.VERDICTS and isinstance(line["reason"], str)
        assert line["backend"] == "interpreter:cpu" and line["duration_s"] >= 0
        assert {"max_error", "tolerance", "unit", "tolerance_basis", "primitive"} <= set(line)
        assert f"--probe '{probe_id}'" in line["reproduce"]
        assert from_json(to_json(line)) == line
    fp8 = interpreter_lines["probe.dot[fp8e4m3]"]
    assert fp8["verdict"] == verdicts.UNSUPPORTED and "fp8e4m3 not supported" in fp8["reason"]


def test_infinite_errors_survive_the_results_file():
    line = {"case": "probe.dot[bf16]", "kind": "probe", "max_error": math.inf, "tolerance": 0.0}
    assert from_json(to_json(line))["max_error"] == math.inf


def test_fp8_probes_run_where_the_profile_lists_fp8():
    if not PROFILE.interpreted:
        pytest.skip("interpreter only")
    fp8_profile = dataclasses.replace(PROFILE, dtypes=(*PROFILE.dtypes, "fp8e4m3"))
    (dot, upcast) = probe_runs.run_probes(fp8_profile, ["probe.dot[fp8e4m3]", "probe.upcast[fp8e4m3]"])
    assert dot["verdict"] == upcast["verdict"] == verdicts.PASS


@pytest.mark.parametrize("key, supported", [("cuda:sm_80", True), ("hip:gfx942", True),
                                            ("hip:gfx90a", False), ("interpreter", True)])
def test_tf32_is_probed_where_triton_offers_it(key, supported):
    profile = backends.profile_by_key(key)
    (probe,) = probes.select(["probe.dot[tf32]"])
    assert (probes.unsupported_reason(probe, profile) is None) is supported


def test_a_probe_that_raises_is_an_error():
    def broken(device):
        raise RuntimeError("no such instruction")

    probe = probes.Probe("dot", "fp16", "fp16 tl.dot", "abs", "test", broken)
    line = probe_runs.run_probe(probe, PROFILE)
    assert line["verdict"] == verdicts.ERROR and line["reason"] == "RuntimeError: no such instruction"


# --- known issues scoped by probe -----------------------------------------------------

def probe_registry(tmp_path, scope_lines, issue_id="demo-probe"):
    path = tmp_path / "known_issues.toml"
    path.write_text(textwrap.dedent(f"""
        [[issue]]
        id = "{issue_id}"
        description = "a documented property of this backend"
        reason = "measured, see the test"
        [issue.scope]
        """) + textwrap.dedent(scope_lines))
    return known_issues.load_registry(path)


# An sm_90 profile whose "device" is the CPU: the fixed probes below launch nothing.
SIMULATED_H100 = dataclasses.replace(cuda_profile((9, 0)), device="cpu")


def fixed_probe(passed: bool, probe_id="probe.dot[fp8e4m3]"):
    """A probe with `probe_id` whose measurement passes or fails without launching anything."""
    (real,) = probes.select([probe_id])
    measured = Measurement(max_error=1e-4 if passed else 3.6e-3, tolerance=4.8e-4, detail="a 64x64x64 product")
    return dataclasses.replace(real, measure=lambda device: measured, needs=None)


def test_a_failing_probe_under_a_known_issue_is_xfail_and_keeps_its_own_verdict(tmp_path):
    registry = probe_registry(tmp_path, 'probe = ["probe.dot[fp8e4m3]", "probe.dot[fp8e5m2]"]\nbackend = "interpreter"')
    line = probe_runs.run_probe(fixed_probe(passed=False), PROFILE, registry=registry)
    assert line["verdict"] == verdicts.XFAIL and line["rule_verdict"] == verdicts.FAIL
    assert line["known_issue"] == registry[0].record() and line["known_issue"]["id"] == "demo-probe"
    assert "max error 0.0036 > tolerance 0.00048" in line["reason"]  # the probe's own reason stays
    assert probes.unhandled_failures([line]) == []  # documented: `probes` exits 0
    assert probes.tolerance_notes([line]) == [f"probe.dot[fp8e4m3] tolerance: {line['tolerance_basis']}"]
    assert from_json(to_json(line)) == line
    headers, (row,) = probe_table([line])
    assert row[headers.index("verdict")] == "xfail (demo-probe)"


def test_a_probe_that_raises_under_a_known_issue_is_xfail(tmp_path):
    def broken(device):
        raise RuntimeError("no such instruction")

    registry = probe_registry(tmp_path, 'probe = "probe.dot[fp16]"')
    probe = probes.Probe("dot", "fp16", "fp16 tl.dot", "abs", "test", broken)
    line = probe_runs.run_probe(probe, PROFILE, registry=registry)
    assert line["verdict"] == verdicts.XFAIL and line["rule_verdict"] == verdicts.ERROR


def test_a_passing_probe_under_a_known_issue_is_xpass_and_an_unhandled_failure(tmp_path):
    registry = probe_registry(tmp_path, 'probe = "probe.dot[fp8e4m3]"')
    line = probe_runs.run_probe(fixed_probe(passed=True), PROFILE, registry=registry)
    assert line["verdict"] == verdicts.XPASS and line["rule_verdict"] == verdicts.PASS
    assert line["reason"] == "known issue demo-probe no longer fails: remove its registry entry"
    assert probes.unhandled_failures([line]) == [line] and verdicts.run_failed([line["verdict"]])
    headers, (row,) = probe_table([line])
    assert row[headers.index("verdict")] == "xpass (demo-probe)"


def test_a_probe_entry_applies_only_to_its_probes_backend_and_arch(tmp_path):
    registry = probe_registry(tmp_path, 'probe = "probe.dot[fp8e4m3]"\nbackend = "cuda"\narch = "sm_90"')
    failing = probe_runs.run_probe(fixed_probe(passed=False), PROFILE, registry=registry)  # on the interpreter
    assert failing["verdict"] == failing["rule_verdict"] == verdicts.FAIL and "known_issue" not in failing
    other = probe_runs.run_probe(fixed_probe(passed=False, probe_id="probe.dot[fp8e5m2]"), SIMULATED_H100,
                             registry=registry)  # the entry's backend and arch, another probe
    assert other["verdict"] == verdicts.FAIL and "known_issue" not in other
    covered = probe_runs.run_probe(fixed_probe(passed=False), SIMULATED_H100, registry=registry)
    assert covered["verdict"] == verdicts.XFAIL


def test_an_unsupported_probe_stays_unsupported_under_a_known_issue(tmp_path):
    registry = probe_registry(tmp_path, 'probe = "probe.dot[fp8e4m3]"')
    (fp8_dot,) = probes.select(["probe.dot[fp8e4m3]"])
    line = probe_runs.run_probe(fp8_dot, INTERPRETER, registry=registry)  # the interpreter profile lists no fp8
    assert line["verdict"] == line["rule_verdict"] == verdicts.UNSUPPORTED and "known_issue" not in line


def test_the_bundled_registry_turns_the_h100_fp8_dot_probes_into_xfail():
    """The measured H100 failure (reports/h100-sm90), replayed on a simulated sm_90 profile."""
    for probe_id in ("probe.dot[fp8e4m3]", "probe.dot[fp8e5m2]"):
        line = probe_runs.run_probe(fixed_probe(passed=False, probe_id=probe_id), SIMULATED_H100)
        assert line["verdict"] == verdicts.XFAIL and line["rule_verdict"] == verdicts.FAIL
        assert line["known_issue"]["id"] == "sm90-fp8-mma-probes"
        assert "sm90-fp8-mma-accumulation" in line["known_issue"]["reason"]
        assert probes.unhandled_failures([line]) == []


def test_the_interpreters_failing_upcast_probe_under_a_known_issue(tmp_path):
    """A real probe that fails on the interpreter, covered by an entry scoped to it."""
    if not PROFILE.interpreted:
        pytest.skip("the interpreter's faults are only measured on the interpreter")
    registry = probe_registry(tmp_path, 'probe = ["probe.upcast[bf16]", "probe.upcast[fp16]"]\n'
                                        'backend = "interpreter"\narch = "cpu"')
    upcast_fp16, upcast_bf16 = probe_runs.run_probes(PROFILE, ["probe.upcast[bf16]", "probe.upcast[fp16]"],
                                                 registry=registry)  # catalog order
    assert upcast_bf16["verdict"] == verdicts.XFAIL and upcast_bf16["rule_verdict"] == verdicts.FAIL
    assert upcast_fp16["verdict"] == verdicts.XPASS  # sound on the interpreter: the entry would be stale
    assert probes.unhandled_failures([upcast_bf16, upcast_fp16]) == [upcast_fp16]
    fault = attribution.backend_fault(case_line("bf16"), [upcast_bf16, upcast_fp16])
    assert fault == "likely backend fault: bf16->fp32 cast (known issue demo-probe)"


def test_probes_command_exits_1_for_an_xpass_probe_and_0_for_an_xfail_one(tmp_path, capsys, monkeypatch):
    if not PROFILE.interpreted:
        pytest.skip("interpreter only")
    from conformance.cli import main

    probe_registry(tmp_path, 'probe = ["probe.upcast[bf16]", "probe.upcast[fp16]"]\nbackend = "interpreter"')
    monkeypatch.setattr(backends, "_active", backends._active)
    monkeypatch.setattr(known_issues, "DEFAULT_REGISTRY", tmp_path / "known_issues.toml")
    assert main(["probes", "--probe", "probe.upcast[bf16]"]) == 0  # 1 without the entry
    assert "xfail (demo-probe)" in capsys.readouterr().out
    assert main(["probes", "--probe", "probe.upcast[fp16]"]) == 1
    assert "xpass (demo-probe)" in capsys.readouterr().out


def test_unknown_probe_ids_are_rejected():
    with pytest.raises(ValueError, match="unknown probe 'probe.dot\\[fp64\\]'"):
        probes.select(["probe.dot[fp64]"])


def test_ulp_distance_counts_representable_steps():
    one = torch.tensor([1.0, -1.0, 0.0])
    after = torch.nextafter(one, torch.tensor(math.inf))
    assert probe_measures.ulp_distance(after, one) == 1.0
    assert probe_measures.ulp_distance(torch.tensor([-0.0]), torch.tensor([0.0])) == 0.0
    two, one = (torch.tensor([value], dtype=torch.bfloat16) for value in (2.0, 1.0))
    assert probe_measures.ulp_distance(two, one) == 128  # 7 stored significand bits


# --- attribution ------------------------------------------------------------------------

def probe_line(probe_id, verdict, worked_around=None, rule_verdict=None, known_issue=None):
    (probe,) = probes.select([probe_id])
    line = {"case": probe_id, "kind": "probe", "primitive": probe.primitive, "verdict": verdict,
            "worked_around": worked_around}
    if rule_verdict is not None:
        line["rule_verdict"] = rule_verdict
    if known_issue is not None:
        line["known_issue"] = {"id": known_issue, "description": "d", "reason": "r", "scope": {}}
    return line


def case_line(dtype="bf16", verdict="fail", rule_verdict=None, dropout=0.0):
    return {"case": f"flash_attention.fwd[{dtype},...]", "dtype": dtype, "dropout": dropout,
            "verdict": verdict, "rule_verdict": rule_verdict or verdict}


def test_cases_rely_on_their_dtypes_primitives_and_features():
    assert attribution.relied_probes(case_line("fp32")) == (*attribution.ALWAYS, "probe.dot[fp32]")
    relied = attribution.relied_probes(case_line("bf16", dropout=0.2))
    assert {"probe.dot[bf16]", "probe.cast[bf16]", "probe.upcast[bf16]", "probe.philox[uint32]"} <= set(relied)
    assert "probe.dot[fp16]" not in relied and "probe.atomic_add[fp32]" not in relied
    every_relied = {probe_id for ids in attribution.BY_DTYPE.values() for probe_id in ids}
    every_relied |= {*attribution.ALWAYS, *attribution.BY_FEATURE["dropout"]}
    assert every_relied <= set(probes.PROBE_IDS)  # the map names real probes only


@pytest.mark.parametrize("verdict, rule_verdict, attributed", [
    ("fail", None, True), ("nonfinite", None, True), ("error", None, True),
    ("xfail", "fail", True), ("pass", None, False), ("xpass", "pass", False), ("unsupported", None, False)])
def test_only_failing_cases_are_attributed(verdict, rule_verdict, attributed):
    line = case_line("bf16", verdict, rule_verdict)
    fault = attribution.backend_fault(line, [probe_line("probe.dot[bf16]", "fail")])
    assert (fault == "likely backend fault: bf16 tl.dot") is attributed and (fault is None) is not attributed


def test_attribution_names_every_failed_primitive_and_any_workaround():
    probe_lines = [probe_line("probe.dot[bf16]", "fail", "interpreter_bf16_dot"), probe_line("probe.exp2[fp32]", "error"),
                   probe_line("probe.cast[bf16]", "pass"), probe_line("probe.dot[fp16]", "fail")]
    assert attribution.backend_fault(case_line("bf16"), probe_lines) == (
        "likely backend fault: tl.math.exp2, bf16 tl.dot (worked around here: interpreter_bf16_dot)")
    assert attribution.backend_fault(case_line("fp32"), probe_lines) == "likely backend fault: tl.math.exp2"
    annotated = attribution.with_backend_fault(case_line("fp16"), probe_lines[3:])
    assert annotated["backend_fault"] == "likely backend fault: fp16 tl.dot"
    assert "backend_fault" not in attribution.with_backend_fault(case_line("fp16", "pass"), probe_lines)
    assert attribution.with_backend_fault(probe_lines[0], probe_lines) == probe_lines[0]  # probes are not cases


@pytest.mark.parametrize("verdict, rule_verdict, blamed", [
    ("xfail", "fail", True), ("xfail", "error", True), ("xpass", "pass", False)])
def test_a_probe_under_a_known_issue_is_blamed_by_its_own_verdict(verdict, rule_verdict, blamed):
    """A documented hardware property (xfail) is still the likely cause of a failing case."""
    fp8_dot = probe_line("probe.dot[fp8e4m3]", verdict, rule_verdict=rule_verdict, known_issue="sm90-fp8-mma-probes")
    fault = attribution.backend_fault(case_line("fp8e4m3", "xfail", "fail"), [fp8_dot])
    expected = "likely backend fault: fp8e4m3 tl.dot (known issue sm90-fp8-mma-probes)"
    assert (fault == expected) if blamed else fault is None
    both = dict(probe_line("probe.dot[bf16]", "xfail", "interpreter_bf16_dot", "fail", "demo"))
    assert attribution.backend_fault(case_line("bf16"), [both]) == (
        "likely backend fault: bf16 tl.dot (worked around here: interpreter_bf16_dot; known issue demo)")


def test_a_run_writes_probes_first_and_attributes_failing_cases(tmp_path, monkeypatch):
    """End to end on the interpreter: a wrong kernel fails an fp16 and a bf16 case; only
    the bf16 one relies on the interpreter's failing bf16 probes. Probes do not decide
    the exit code (the failing cases do)."""
    if not PROFILE.interpreted:
        pytest.skip("interpreter only")
    from conformance.cli import main
    from conformance.running.results import read_results

    monkeypatch.setattr(backends, "_active", backends._active)
    fp16 = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv1,Sq9,Sk17,seed0]"
    bf16 = fp16.replace("fp16", "bf16")
    argv = ["run", "--out", str(tmp_path), "--kernel", "flash_attention=tests.fake_kernels:scale_off",
            "--case", fp16, "--case", bf16]
    assert main(argv) == 1
    lines = read_results(tmp_path)
    kinds = [line.get("kind", "case") for line in lines]
    assert kinds == ["probe"] * len(probes.PROBES) + ["case", "case"]
    by_id = {line["case"]: line for line in lines}
    assert by_id[fp16]["verdict"] == by_id[bf16]["verdict"] == verdicts.FAIL
    assert "backend_fault" not in by_id[fp16]
    assert by_id[bf16]["backend_fault"] == (
        "likely backend fault: bf16 tl.dot (worked around here: interpreter_bf16_dot), "
        "fp32->bf16 cast (worked around here: interpreter_bf16_cast), bf16->fp32 cast")


def test_a_run_records_an_xfail_probe_and_still_blames_it(tmp_path, monkeypatch):
    """End to end: with the interpreter's bf16 upcast fault registered, its probe line is
    xfail, and a failing bf16 case still names it as a likely backend fault."""
    if not PROFILE.interpreted:
        pytest.skip("interpreter only")
    from conformance.cli import main
    from conformance.running.results import read_results

    registry_dir = tmp_path / "registry"
    registry_dir.mkdir()
    probe_registry(registry_dir, 'probe = "probe.upcast[bf16]"\nbackend = "interpreter"')
    monkeypatch.setattr(backends, "_active", backends._active)
    monkeypatch.setattr(known_issues, "DEFAULT_REGISTRY", registry_dir / "known_issues.toml")
    bf16 = "flash_attention.fwd[bf16,d16,causal,B1,H2,Hkv1,Sq9,Sk17,seed0]"
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--kernel", "flash_attention=tests.fake_kernels:scale_off",
                 "--case", bf16]) == 1  # the case fails
    by_id = {line["case"]: line for line in read_results(out)}
    upcast = by_id["probe.upcast[bf16]"]
    assert upcast["verdict"] == verdicts.XFAIL and upcast["rule_verdict"] == verdicts.FAIL
    assert upcast["known_issue"]["id"] == "demo-probe"
    assert by_id[bf16]["verdict"] == verdicts.FAIL
    assert by_id[bf16]["backend_fault"].endswith("bf16->fp32 cast (known issue demo-probe)")
    summary = (out / "summary.md").read_text().splitlines()
    (row,) = [text for text in summary if text.startswith("| probe.upcast[bf16] ")]
    assert "| xfail (demo-probe) |" in row
    assert any(text.startswith("| demo-probe |") for text in summary)  # the known issues section


def test_probes_command_exits_1_only_for_failures_the_profile_does_not_work_around(tmp_path, capsys, monkeypatch):
    if not PROFILE.interpreted:
        pytest.skip("interpreter only")
    from conformance.cli import main
    from conformance.running.results import read_env, read_results

    monkeypatch.setattr(backends, "_active", backends._active)
    assert main(["probes", "--probe", "probe.dot[bf16]", "--probe", "probe.dot[fp16]", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "Primitive probes on interpreter:cpu" in printed and "probe.dot[bf16] tolerance: exact products" in printed
    assert [line["case"] for line in read_results(tmp_path)] == ["probe.dot[fp16]", "probe.dot[bf16]"]  # catalog order
    assert read_env(tmp_path)["tier"] == "probes"
    assert main(["probes", "--probe", "probe.upcast[bf16]"]) == 1  # no workaround for bf16 subnormals
    assert main(["probes", "--probe", "probe.dot[fp64]"]) == 2
    assert "unknown probe 'probe.dot[fp64]'" in capsys.readouterr().err


def test_a_stale_probe_entry_fails_the_run_though_every_case_passes(tmp_path, monkeypatch):
    from conformance.cli import main
    from conformance.running.results import read_results

    registry_dir = tmp_path / "registry"
    registry_dir.mkdir()
    probe_registry(registry_dir, 'probe = "probe.upcast[fp16]"\nbackend = "interpreter"')
    monkeypatch.setattr(backends, "_active", backends._active)
    monkeypatch.setattr(known_issues, "DEFAULT_REGISTRY", registry_dir / "known_issues.toml")
    out = tmp_path / "run"
    assert main(["run", "--out", str(out), "--kernel", "flash_attention=tests.fake_kernels:exact",
                 "--case", "flash_attention.fwd[fp32,d16,causal,B1,H2,Hkv1,Sq9,Sk17,seed0]"]) == 1
    by_id = {line["case"]: line for line in read_results(out)}
    assert by_id["probe.upcast[fp16]"]["verdict"] == verdicts.XPASS
    assert "probe.upcast[fp16]" in (out / "summary.md").read_text().split("## Totals")[1]  # listed as a problem
