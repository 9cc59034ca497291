"""Where a run's time goes: the phase clock, Triton's compile timer, the run's timing in
env.json and the report's table (conformance.phases, conformance.reporting.time_breakdown)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance import phases
from conformance.reporting import markdown, time_breakdown
from conformance.running.isolation import with_isolation_time
from tests.test_cli import run_cli

REPO = Path(__file__).resolve().parent.parent
FWD = "flash_attention.fwd[fp16,d16,causal,B1,H2,Hkv2,Sq20,Sk11,lse,seed0]"
BWD = "flash_attention.bwd[fp16,d16,causal,B2,H2,Hkv1,Sq13,Sk21,seed0]"


class _FakeTime:
    """perf_counter that moves only when told."""

    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_nested_phase_counts_only_for_itself(monkeypatch):
    fake = _FakeTime()
    monkeypatch.setattr(phases.time, "perf_counter", fake)
    clock = phases.PhaseClock()
    with clock.phase("launch"):
        fake.now += 1.0
        with clock.phase("inputs"):
            fake.now += 0.25
        clock.compiled("dq_kernel", cached=False, seconds=2.0)  # inside launch: taken out of it
        fake.now += 2.0
    assert clock.seconds == {"launch": 1.0, "inputs": 0.25, "compile_cold": 2.0}
    assert clock.cold_compiles == ["dq_kernel"]
    assert clock.record(total_s=4.0) == {"launch": 1.0, "inputs": 0.25, "compile_cold": 2.0, "other": 0.75}


def test_a_cached_compile_is_not_named_and_phases_without_time_are_left_out():
    clock = phases.PhaseClock()
    clock.compiled("dq_kernel", cached=True, seconds=0.5)
    clock.add("judging", 0.0)
    assert clock.record(total_s=0.5) == {"compile_cached": 0.5, "other": 0.0}
    assert clock.cold_compiles == []


_COMPILE_TWICE = textwrap.dedent("""
    import json, os, sys, tempfile
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
    import triton, triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from conformance import phases

    @triton.jit
    def add_one(x_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(x_ptr + offsets, tl.load(x_ptr + offsets, mask=offsets < n) + 1, mask=offsets < n)

    assert phases.install_compile_timer()
    readings = []
    for _ in range(2):
        clock = phases.PhaseClock()
        with phases.measuring(clock):  # the JIT's route: triton.compiler.compile
            triton.compiler.compile(ASTSource(add_one, signature={"x_ptr": "*fp32", "n": "i32", "BLOCK": "constexpr"},
                                              constexprs={"BLOCK": 64}), target=GPUTarget("cuda", 80, 32))
        readings.append([sorted(clock.seconds), clock.cold_compiles])
    knobs = getattr(triton, "knobs", None)
    listens = hasattr(getattr(knobs, "compilation", None), "listener")
    print(json.dumps({"readings": readings, "listens": listens}))
""")


def test_the_compile_timer_tells_a_cold_compile_from_a_cache_hit(tmp_path):
    """A real compile for sm_80 (no GPU needed), twice into one cache folder. In a process of
    its own (from a file: triton reads a kernel's source): this session's interpreter
    (TRITON_INTERPRET) has no compiler to time."""
    script = tmp_path / "compile_twice.py"
    script.write_text(_COMPILE_TWICE)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("TRITON_INTERPRET", None)
    done = subprocess.run([sys.executable, str(script)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    first, second = found["readings"]
    assert first == [["compile_cold"], ["add_one"]]
    # triton >= 3.4 reports cache hits to a listener; older releases count every call as cold
    assert second == ([["compile_cached"], []] if found["listens"] else [["compile_cold"], ["add_one"]])


def test_isolation_adds_what_the_round_trip_cost_beyond_the_case():
    line = with_isolation_time({"duration_s": 1.5, "phases": {"launch": 1.5}}, round_trip_s=1.75)
    assert line["phases"] == {"launch": 1.5, "isolation": 0.25}
    assert with_isolation_time({"duration_s": 2.0}, round_trip_s=1.0)["phases"] == {"isolation": 0.0}


def _line(case: str, **seconds) -> dict:
    return {"case": case, "kind": "case", "phases": seconds}


def test_the_table_sums_phases_in_flow_order_and_adds_the_runs_own_costs():
    lines = [_line("a", launch=1.0, inputs=0.5, other=0.5), _line("b", compile_cold=3.0, launch=1.0),
             {"case": "p", "kind": "probe"}, {**_line("c", reference=2.0), "gpu_peak_bytes": 3 * 2**30}]
    env = {"timing": {"workers": 4, "wall_s": 2.0, "probes_s": 0.5, "results_s": 0.1, "report_s": None}}
    headers, rows = time_breakdown.phase_table(env, lines)
    assert headers == time_breakdown.HEADERS
    assert rows == [["inputs", "0.5", "6.2%", "166.7"], ["launch", "2.0", "25.0%", "666.7"],
                    ["compile_cold", "3.0", "37.5%", "1000.0"], ["reference", "2.0", "25.0%", "666.7"],
                    ["other", "0.5", "6.2%", "166.7"], ["all phases (3 cases)", "8.0", "100%", "2666.7"],
                    ["probes (once per run)", "0.5", "", ""], ["writing results lines", "0.1", "", ""],
                    ["largest GPU memory of one case", "3.00 GiB", "", ""],
                    ["wall time (4 workers)", "2.0", "", "1.50 cases/s, 4.0 in flight"]]
    assert time_breakdown.summary_text(env, lines) == (
        "time: 3 cases in 2.0 s (1.50/s, 4 workers); case time by phase: compile_cold 38%, launch 25%, "
        "reference 25% (summary.md: where the time went)")


def test_runs_from_before_the_phases_have_no_table():
    assert time_breakdown.phase_table({}, [{"case": "a", "kind": "case", "duration_s": 1.0}])[1] == []
    assert time_breakdown.summary_text({}, []) is None


@pytest.mark.parametrize("case_id, judged", [(FWD, "torch_paths"), (BWD, "noise")])
def test_a_run_records_every_cases_phases_and_its_own_timing(tmp_path, case_id, judged):
    code, lines, out = run_cli(tmp_path, "exact", case_id)
    assert code == 0
    (line,) = lines
    recorded = line["phases"]
    assert {"inputs", "launch", "reference", judged, "judging", "diagnosis", "other"} <= set(recorded)
    assert sum(recorded.values()) == pytest.approx(line["duration_s"], abs=1e-3)
    env = json.loads((out / "env.json").read_text())
    assert env["timing"]["workers"] == 1 and env["timing"]["wall_s"] > 0 and env["timing"]["probes_s"] > 0
    assert env["triton_cache"] == os.environ["TRITON_CACHE_DIR"]
    assert f"## {time_breakdown.TITLE}" in (out / "summary.md").read_text()
    assert markdown.time_section(env, [line])[0] == f"## {time_breakdown.TITLE}"


def test_the_speed_benchmark_records_cases_per_second_of_a_run(tmp_path):
    from conformance.bundled.benchmarks import harness_speed
    from conformance.reporting.report import write_run

    env = {"tier": "standard", "device": "NVIDIA H100 80GB HBM3", "harness": {"revision": "0123456789abcdef"},
           "timing": {"workers": 12, "wall_s": 40.0}}
    lines = [_line(f"c{i}", launch=0.5, compile_cold=2.0 if i == 0 else 0.0, inputs=0.25) for i in range(80)]
    write_run(tmp_path / "run", env, lines)
    record = harness_speed.record(tmp_path / "run", "warm", exit_code=0)
    assert record == {"label": "warm", "tier": "standard", "device": "NVIDIA H100 80GB HBM3",
                      "revision": "0123456789abcdef", "workers": 12, "cases": 80, "wall_s": 40.0,
                      "cases_per_s": 2.0, "compile_cold_s": 2.0, "compile_cached_s": 0.0,
                      "largest_phases": {"launch": 40.0, "inputs": 20.0, "compile_cold": 2.0}, "exit": 0}
    assert "| warm    | standard | NVIDIA H100 80GB HBM3 | 0123456789 | 12" in harness_speed.render([record])
