"""The CI kill check: the smoke tier kills every mutant the interpreter can show, by
the rule (fail or nonfinite, not by an error); and the fixtures behave as named.

The mutants of FlashAttention-2's variants edit code that only their variant's kernels
compile: each must be killed by a case of its variant, and pass plain attention.

Cost on a 2-core machine: about 3 minutes for the kill check (two hunters, each mutant
stopped at its first killing case; once per test session, whichever pytest-xdist worker
gets there first): `python -m mutants --tier smoke --max-kills 1 -j 2` took 3:14 for the 50
mutants the interpreter can show (2026-11-29); the crashing and the hanging hunt about 45 s."""

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conformance import backends
from conformance.cases.catalog import Case
from conformance.cases.tiers import cases
from conformance.judging import verdicts
from conformance.running.implementations import Implementations
from conformance.running.runner import run_case
from conformance.bundled.mutants import BY_NAME, COUNTED
from conformance.bundled.mutants.hunters import hunt_all
from conformance.bundled.mutants.registry import kernel_specs
from tests.session_files import made_once_per_session

REPO = Path(__file__).resolve().parent.parent
REACHABLE = [m.name for m in COUNTED if not m.interpreter_unreachable]
HUNTERS = 2
# How long the hang fixture's single-query call must make no progress: this many times what
# the same call on the good shape took in the same process, and at least HANG_SECONDS.
HANG_FACTOR = 10
HANG_SECONDS = 2.0


# mutant -> the Case field of the variant it breaks (window, softcap, alibi, lens)
VARIANT_MUTANTS = {
    "window_left_edge_hidden": "window", "window_right_edge_past": "window",
    "window_first_tile_rounded_up": "window", "window_dkdv_first_tile_rounded_up": "window",
    "softcap_backward_no_slope": "softcap", "softcap_16bit_tanh": "softcap",
    "alibi_top_left": "alibi", "alibi_bias_added": "alibi", "alibi_bias_in_scaled_units": "alibi",
    "alibi_slope_of_kv_head": "alibi", "alibi_slopes_of_first_batch": "alibi",
    "varlen_keys_of_next_sequence": "lens", "varlen_dkdv_query_spans_of_keys": "lens",
    "varlen_lse_head_stride_of_sequence": "lens", "kv_cache_band_from_last_token": "window",
}
# Plain attention through the forward and both backward kernels: causal, ragged, Sq != Sk.
PLAIN_CASE = "flash_attention.bwd[fp16,d64,causal,B1,H2,Hkv2,Sq77,Sk133,seed0]"


def _hunt(folder):
    lines = hunt_all(REACHABLE, "smoke", "interpreter", max_kills=1, jobs=HUNTERS)
    (folder / "mutants.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.fixture(scope="module")
def smoke_hunts(tmp_path_factory):
    hunts = made_once_per_session(tmp_path_factory, "smoke-hunts", _hunt) / "mutants.jsonl"
    return {line["mutant"]: line for line in map(json.loads, hunts.read_text().splitlines())}


@pytest.mark.parametrize("name", REACHABLE)
def test_smoke_tier_kills_the_mutant_by_the_rule(smoke_hunts, name):
    line = smoke_hunts[name]
    assert line["status"] == "killed", f"{name} ({line['fault']}) survived the smoke tier: {line['reason']}"
    assert line["tier"] == "smoke" and line["verdict"] == verdicts.PASS
    kill = line["kills"][0]
    assert kill["verdict"] in (verdicts.FAIL, verdicts.NONFINITE), kill
    assert kill["tensors"], kill  # the tensors that gave it away are named


@pytest.mark.parametrize("name", VARIANT_MUTANTS)
def test_a_variant_mutant_is_killed_by_its_variant_and_passes_plain_attention(smoke_hunts, name):
    feature = VARIANT_MUTANTS[name]
    killer = Case.from_id(smoke_hunts[name]["kills"][0]["case"])
    assert getattr(killer, feature), (name, killer.id)
    case = Case.from_id(PLAIN_CASE)
    assert case in cases("smoke") and not any(getattr(case, f) for f in set(VARIANT_MUTANTS.values()))
    line = run_case(case, backends.active_profile(), Implementations.from_specs(kernel_specs(name)))
    assert line["verdict"] == verdicts.PASS, (name, line["reason"])


def _gqa_backward_smoke_cases():
    return [case for case in cases("smoke")
            if case.op == "flash_attention" and case.direction == "bwd" and case.heads > case.kv_heads
            and case.bad_input is None and case.seq_q > 1]


def test_the_race_is_correct_when_programs_run_one_after_another():
    """What its `interpreter_unreachable` claims: the interpreter's sequential programs
    never lose an update, so every GQA backward case passes (on a GPU they overlap)."""
    profile = backends.active_profile()
    if not profile.interpreted:
        pytest.skip("a claim about the interpreter")
    implementations = Implementations.from_specs(kernel_specs("gqa_dkdv_race"))
    selected = _gqa_backward_smoke_cases()
    assert len(selected) >= 3
    for case in selected:
        line = run_case(case, profile, implementations)
        assert line["verdict"] == verdicts.PASS, (case.id, line["reason"])


def _fixture_script(name: str, good_shape: tuple, bad_shape: tuple) -> str:
    """A process that runs the fixture once on a good shape (prints 'ok', the shape and the
    seconds the call took), then on a bad one."""
    return textwrap.dedent(f"""
        import time
        from conformance import backends
        backends.activate("interpreter")
        import torch
        from conformance.bundled.mutants.registry import flash_attention_{name} as attention
        for (sq, sk) in ({good_shape}, {bad_shape}):
            q = torch.randn(1, 2, sq, 32, dtype=torch.float16)
            k, v = (torch.randn(1, 2, sk, 32, dtype=torch.float16) for _ in range(2))
            started = time.perf_counter()
            attention(q, k, v)
            print("ok", sq, sk, time.perf_counter() - started, flush=True)
    """)


def _start_fixture(name, good, bad):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", _fixture_script(name, good, bad)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_crash_fixture_kills_its_process_on_a_single_key_only():
    assert not BY_NAME["crash"].counted
    process = _start_fixture("crash", (8, 8), (8, 1))
    stdout, stderr = process.communicate(timeout=120)
    assert [line.split()[:3] for line in stdout.splitlines()] == [["ok", "8", "8"]], stderr[-2000:]
    assert process.returncode == -signal.SIGSEGV


def test_hang_fixture_never_finishes_a_single_query():
    """The good shape (2 queries, 8 keys) takes about 0.1 s, its first launch included; the
    single-query call of the same size then makes no progress for HANG_FACTOR times as long
    (at least HANG_SECONDS) and is killed."""
    assert not BY_NAME["hang"].counted
    process = _start_fixture("hang", (2, 8), (1, 8))
    try:
        good = process.stdout.readline().split()
        assert good[:3] == ["ok", "2", "8"], good
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=max(HANG_SECONDS, HANG_FACTOR * float(good[3])))
    finally:
        process.kill()
        process.communicate()


def test_a_hunt_whose_process_crashes_goes_on_isolated_and_counts_the_crash():
    """A fault that kills the hunt's process (here a segfault on a single key) neither takes the
    other hunts with it nor survives: the hunt goes on from that case in an isolated worker,
    where the crash is the case's `error` line, as in a conformance run."""
    crash, = hunt_all(["crash"], "smoke", "interpreter", max_kills=1)
    assert (crash["status"], crash["tier"]) == ("killed", "smoke"), crash
    assert "signal SIGSEGV" in crash["isolated_after"]
    kill = crash["kills"][0]
    assert kill["verdict"] == verdicts.ERROR and "worker crashed (signal SIGSEGV)" in kill["reason"]
    assert Case.from_id(kill["case"]).seq_k == 1


def test_a_hunt_that_hangs_is_stopped_and_its_hanging_case_timed_out():
    hang, = hunt_all(["hang"], "smoke", "interpreter", max_kills=1, hunt_timeout_s=20, case_timeout_s=10)
    assert hang["status"] == "killed" and hang["isolated_after"] == "the hunt ran past 20 s", hang
    assert "timeout after 10 s" in hang["kills"][0]["reason"]


def test_a_tile_never_written_comes_out_nonfinite():
    """Mutants run under the NaN poisoning of the bundled kernels' outputs, so the rows
    of a query tile the forward never computes read NaN: `nonfinite`, not a large error
    in whatever memory torch.empty handed back."""
    implementations = Implementations.from_specs(kernel_specs("last_query_tile_unwritten"))
    package = sys.modules[implementations.resolve("flash_attention").__module__.rpartition(".")[0]]
    with implementations.launch_context("flash_attention"):
        assert package.allocation.poisoning()  # the mutant's own allocation module
    case = next(case for case in cases("smoke")
                if case.op == "flash_attention" and case.direction == "fwd" and case.bad_input is None
                and case.seq_q % 64 != 0 and case.seq_q > 64 and case.dtype == "fp16")
    result = run_case(case, backends.active_profile(), implementations)
    assert result["verdict"] == verdicts.NONFINITE, result
