"""The compile-only tier: targets, the plan, verdicts, crash handling, and one real
compile for sm_80 (a worker process, so it works whatever this process activated)."""

import types

import pytest

from conformance.backends import cuda_profile, hip_profile, profile_by_key
from conformance.cli import main
from conformance.compile_only import plan, resources, tier
from conformance.compile_only.targets import (DEFAULT_TARGETS, family_representatives, parse_targets,
                                              supported_architectures)
from conformance.compile_only.worker import compile_id, launch_config
from conformance.judging import verdicts
from conformance.running.results import read_env, read_results

CONTRACT_FIELDS = {"kind", "case", "verdict", "reason", "duration_s", "backend", "target", "kernel", "dtype",
                   "head_dim", "config", "registers", "spills_bytes", "shared_bytes", "shared_limit_bytes",
                   "compile_s"}


def test_targets_take_short_names_and_backend_keys_in_order_once():
    keys = [profile.key for profile in parse_targets("sm_80, gfx942,cuda:sm_80,hip:gfx90a")]
    assert keys == ["cuda:sm_80", "hip:gfx942", "hip:gfx90a"]


def test_the_default_targets_are_every_supported_family_by_its_first_architecture():
    """The published nine and Ada (fp8 on mma.sync): one per family; the rest of each family
    shares its facts or its table set, and --target names them."""
    assert DEFAULT_TARGETS == "sm_80,sm_89,sm_90,sm_100,sm_120,gfx90a,gfx942,gfx950,gfx1100,gfx1201"
    assert family_representatives() == DEFAULT_TARGETS.split(",")
    assert set(DEFAULT_TARGETS.split(",")) < set(supported_architectures())
    assert {"sm_86", "sm_103", "sm_121", "gfx1200"} <= set(supported_architectures())
    assert "sm_75" not in supported_architectures()  # 64 KB: no launch table set fits
    assert [p.key for p in parse_targets(DEFAULT_TARGETS)][:3] == ["cuda:sm_80", "cuda:sm_89", "cuda:sm_90"]


@pytest.mark.parametrize("text, match", [
    ("sm_8x", r"^--target: unknown target 'sm_8x'; expected sm_XY, gfxNNN or one of .*hip:gfx942"),
    ("mi300", r"^--target: unknown target 'mi300'"),
    ("iluvatar:ivcore11", r"^--target: iluvatar:ivcore11 cannot be compiled for"),
    ("interpreter", r"^--target: interpreter:cpu cannot be compiled for"),
    (" , ", r"^--target: expected a comma-separated list"),
])
def test_a_bad_target_names_the_argument(text, match):
    with pytest.raises(ValueError, match=match):
        parse_targets(text)


def test_the_command_line_rejects_a_bad_target_and_scope_as_usage_errors(capsys):
    assert main(["compile", "--target", "sm_80,gfx9xx"]) == 2
    assert "argument --target: unknown target 'gfx9xx'" in capsys.readouterr().err
    assert main(["compile", "--scope", "everything"]) == 2
    assert "argument --scope" in capsys.readouterr().err


def test_the_full_plan_covers_every_dtype_power_of_two_head_dim_and_variant():
    profile = cuda_profile((9, 0))
    chunks = plan.chunks(profile, "full")
    assert len(chunks) == 5 * 5  # fp16 bf16 fp32 fp8e4m3 fp8e5m2 x d16 32 64 128 256
    fp16 = [call for chunk in chunks for call in chunk if call.dtype == "fp16" and call.head_dim == 64]
    assert {(c.op, c.causal, c.dropout, c.variant) for c in fp16} == {
        *((plan.FLASH, causal, dropout, None) for causal in (False, True) for dropout in (False, True)),
        (plan.PIECEWISE, False, False, None), (plan.PIECEWISE, True, False, None),
        (plan.KV_CACHE, False, False, None), (plan.KV_CACHE, True, False, None),
        # the attention variants, each alone and all at once, dense and packed (issue 33)
        *((plan.FLASH, True, False, variant) for variant in ("window", "softcap", "alibi", plan.ALL_VARIANTS)),
        (plan.VARLEN, True, False, None), (plan.VARLEN, True, False, plan.ALL_VARIANTS)}
    fp8 = [call for chunk in chunks for call in chunk if call.dtype == "fp8e4m3"]
    assert fp8 and all(call.op in (plan.FLASH, plan.KV_CACHE) and not call.backward for call in fp8)
    assert {call.op for call in fp8} == {plan.FLASH, plan.KV_CACHE}  # flash's fp8 forward, an fp8 cache


def test_the_quick_plan_takes_each_table_row_once_with_the_most_code():
    calls = [call for chunk in plan.chunks(hip_profile("gfx942"), "quick") for call in chunk]
    assert {call.head_dim for call in calls} == {64, 128, 256}
    assert {call.dtype for call in calls} == {"fp16", "fp32"}
    assert all(call.causal and (call.dropout or call.op in (plan.PIECEWISE, plan.KV_CACHE) or call.variant
                                or call.op == plan.VARLEN) for call in calls)
    assert {call.op for call in calls} == {plan.FLASH, plan.PIECEWISE, plan.KV_CACHE, plan.VARLEN}
    # the attention variants once per target: all at once, at the largest head dim, in fp16
    variants = [call for call in calls if call.variant or call.op == plan.VARLEN]
    assert {(call.op, call.variant, call.dtype, call.head_dim) for call in variants} == {
        (plan.FLASH, plan.ALL_VARIANTS, "fp16", 256), (plan.VARLEN, None, "fp16", 256),
        (plan.VARLEN, plan.ALL_VARIANTS, "fp16", 256)}
    with pytest.raises(ValueError, match="--scope"):
        plan.chunks(hip_profile("gfx942"), "most")


def test_ids_and_configs_come_from_the_launch_keywords():
    config = launch_config(dict(CAUSAL=True, BLOCK_D=128, INTERPRETED=False, DROPOUT=False, BLOCK_M=64,
                                BLOCK_N=32, num_warps=4, num_stages=1, waves_per_eu=2, first_batch_head=0,
                                CU_SEQLENS_Q=object(), total_q=40, TILES=object()))  # a packed batch's run-time keywords
    assert list(config) == ["BLOCK_M", "BLOCK_N", "num_warps", "num_stages", "waves_per_eu", "CAUSAL", "DROPOUT"]
    assert compile_id("fwd", "hip:gfx942", "fp16", 128, config) == "compile.fwd[hip:gfx942,fp16,d128,causal]"
    assert compile_id("fwd", "hip:gfx942", "fp16", 128, config, tiles=True) == \
        "compile.fwd[hip:gfx942,fp16,d128,causal,tiles=64x32x4w1s]"


def test_a_second_table_row_for_the_same_flags_is_compiled_under_an_id_of_its_own(monkeypatch):
    """The KV-cache split kernel launches with the same flags under its general row and its
    filled_paged row (kernels.decode_plan): the second keeps an id with its tiles, not the
    first's (which would skip it as compiled); the same configuration again is skipped."""
    from conformance.compile_only import worker

    events = []
    monkeypatch.setattr(worker, "emit", events.append)
    compiler = worker.Compiler("cuda:sm_90", "cuda", skip=set())
    compiler.dtype = "fp16"

    def uncompiled(*args, **kwargs):
        raise RuntimeError("not compiled here")

    kernel = types.SimpleNamespace(__name__="decode_split_kernel", warmup=uncompiled)
    general = dict(BLOCK_M=16, BLOCK_N=128, BLOCK_D=128, num_warps=4, num_stages=2, PAGED=True)
    filled = {**general, "BLOCK_N": 64, "num_stages": 3}
    for launch in (general, filled, general, filled):
        compiler(kernel, (1,), **launch)
    ids = [event["id"] for event in events if event["event"] == "result"]
    assert ids == ["compile.decode_split[cuda:sm_90,fp16,d128,paged]",
                   "compile.decode_split[cuda:sm_90,fp16,d128,paged,tiles=16x64x4w3s]"]


def compiled_event(**measured):
    return {"event": "result", "id": "compile.fwd[cuda:sm_86,fp16,d128]", "kernel": "fwd", "dtype": "fp16",
            "head_dim": 128, "config": {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 3},
            "compile_s": 1.5, "registers": 200, "spills_bytes": 0, "shared_bytes": 57344, **measured}


def test_verdicts_fail_over_a_limit_and_only_report_spills():
    sm86 = cuda_profile((8, 6))
    passed = tier.results_line(compiled_event(spills_bytes=96), sm86)
    assert (passed["verdict"], passed["reason"]) == (verdicts.PASS, "spills 96 B per thread (reported, not a failure)")
    over = tier.results_line(compiled_event(shared_bytes=110_000), sm86)
    assert over["verdict"] == verdicts.FAIL and "shared memory 110,000 B over the 101,376 B" in over["reason"]
    crowded = tier.results_line(compiled_event(config={"BLOCK_M": 64, "num_warps": 16}, registers=200), sm86)
    assert crowded["verdict"] == verdicts.FAIL and "200 registers per thread over the 128" in crowded["reason"]
    failed = tier.results_line(compiled_event(error={"reason": "CompilationError: at 3:4", "traceback": "..."}), sm86)
    assert (failed["verdict"], failed["reason"]) == (verdicts.ERROR, "CompilationError: at 3:4")
    assert CONTRACT_FIELDS <= set(passed)


AMD_METADATA = """
    .name:           dkdv_kernel
    .private_segment_fixed_size: 20
    .sgpr_count:     104
    .sgpr_spill_count: 116
    .vgpr_count:     207
    .vgpr_spill_count: 0
    .agpr_count:     0
"""


def test_amd_resources_say_which_registers_the_scratch_holds():
    assert resources._hip_usage(AMD_METADATA) == {"registers": 207, "spills_bytes": 20,
                                                  "spilled_registers": {"vgpr": 0, "sgpr": 116}}
    line = tier.results_line({**compiled_event(**resources._hip_usage(AMD_METADATA)),
                              "id": "compile.bwd_dkdv[hip:gfx90a,fp16,d16,causal]"}, hip_profile("gfx90a"))
    assert line["verdict"] == verdicts.PASS and line["spilled_registers"] == {"vgpr": 0, "sgpr": 116}
    assert line["reason"] == "spills 20 B per thread (0 vector, 116 scalar registers spilled) (reported, not a failure)"
    into_registers = tier.results_line({**line, "event": "result", "id": line["case"], "spills_bytes": 0,
                                        "spilled_registers": {"vgpr": 12, "sgpr": 0}}, hip_profile("gfx90a"))
    assert into_registers["reason"] == ("12 vector registers spilled into other registers, no scratch "
                                        "(reported, not a failure)")
    older = AMD_METADATA.replace("    .vgpr_spill_count: 0\n", "")  # a compiler that does not say
    assert "spilled_registers" not in resources._hip_usage(older)


def test_a_compiler_that_kills_its_worker_becomes_an_error_and_the_rest_carries_on(monkeypatch):
    crashed = {"event": "start", "id": "compile.bwd_dkdv[cuda:sm_90,fp16,d128]", "kernel": "bwd_dkdv",
               "dtype": "fp16", "head_dim": 128, "config": {"num_warps": 8}}
    jobs = []

    def fake_worker(job):
        jobs.append(job)
        if len(jobs) == 1:
            return [crashed], -6, "python: LinearLayout.cpp:562: reshapeOuts: Assertion `total' failed.\n"
        return [{**compiled_event(), "id": "compile.bwd_dq[cuda:sm_90,fp16,d128]"}], 0, ""

    monkeypatch.setattr(tier, "_run_worker", fake_worker)
    outcome = tier.run_chunk(profile_by_key("cuda:sm_90"), [plan.Call(plan.FLASH, "fp16", 128, True)], "/tmp")
    assert jobs[1]["skip"] == [crashed["id"]]
    error = outcome.results[crashed["id"]]["error"]["reason"]
    assert error == "the compiler killed its process (SIGABRT): python: LinearLayout.cpp:562: reshapeOuts: " \
                    "Assertion `total' failed."
    assert set(outcome.results) == {crashed["id"], "compile.bwd_dq[cuda:sm_90,fp16,d128]"}


def test_a_worker_dying_between_compiles_is_an_error_line(monkeypatch):
    monkeypatch.setattr(tier, "_run_worker", lambda job: ([], 1, "ImportError: cannot import name 'x'\n"))
    outcome = tier.run_chunk(cuda_profile((8, 0)), [plan.Call(plan.FLASH, "fp32", 64, False)], "/tmp")
    (line,) = [tier.results_line(event, cuda_profile((8, 0))) for event in outcome.results.values()]
    assert line["case"] == "compile.worker[cuda:sm_80,fp32,d64]" and line["verdict"] == verdicts.ERROR
    assert "the worker exited with code 1: ImportError" in line["reason"]


def test_a_call_of_the_plan_that_raises_is_an_error_line(monkeypatch):
    call = plan.Call(plan.VARLEN, "fp16", 64, True, backward=False)
    skipped = {"event": "skipped", "call": call.as_dict(), "reason": "TypeError: Object of type Tensor is not JSON serializable"}
    monkeypatch.setattr(tier, "_run_worker", lambda job: ([skipped], 0, ""))
    outcome = tier.run_chunk(cuda_profile((8, 0)), [call], "/tmp")
    (line,) = [tier.results_line(event, cuda_profile((8, 0))) for event in outcome.results.values()]
    assert line["case"] == "compile.call[cuda:sm_80,flash_attention_varlen,fp16,d64,causal,forward]"
    assert line["verdict"] == verdicts.ERROR and line["reason"].endswith("none was checked: " + skipped["reason"])


def test_an_interrupted_run_keeps_the_chunks_it_finished_and_shows_progress(monkeypatch, tmp_path, capsys):
    chunks = []

    def fake_chunk(profile, calls, cache_dir):
        chunks.append(calls)
        if len(chunks) == 3:
            raise KeyboardInterrupt  # the user stops the run during the third chunk
        case = f"compile.fwd[{profile.key},fp16,d{len(chunks)}]"
        return tier.ChunkOutcome(results={case: {**compiled_event(), "id": case}})

    monkeypatch.setattr(tier, "run_chunk", fake_chunk)
    with pytest.raises(KeyboardInterrupt):
        tier.run("sm_80", str(tmp_path / "run"), scope="full", workers=1)
    kept = read_results(tmp_path / "run")
    assert [line["case"] for line in kept] == ["compile.fwd[cuda:sm_80,fp16,d1]", "compile.fwd[cuda:sm_80,fp16,d2]"]
    assert "unfinished" in read_env(tmp_path / "run")["compile_notes"][0]
    assert "compile: 2/" in capsys.readouterr().err


def test_a_target_or_dtype_the_installed_triton_cannot_compile_is_one_unsupported_line(monkeypatch, tmp_path):
    """The compiler is asked first (a probe job per target, every dtype of its profile); a
    target it refuses runs no chunk, a dtype it refuses no call, each says why in the
    compiler's words, and the run does not fail for them."""
    jobs = []

    def fake_worker(job):
        jobs.append(job)
        if job.get("probe"):
            refused = {"sm_80": {}, "gfx950": {"fp16": "RuntimeError: PassManager::run failed"},
                       "gfx1201": {"fp8e4m3": "CompilationError: type fp8e4nv not supported in this architecture"}}
            stderr = "loc: error: unsupported target: 'gfx950'\n" if job["target"] == "hip:gfx950" else ""
            return [{"event": "compiler", "refused": refused[job["target"].split(":")[1]]}], 0, stderr
        calls = job["calls"]
        return [{**compiled_event(), "id": f"compile.fwd[{job['target']},{call['dtype']},d{call['head_dim']}]",
                 "dtype": call["dtype"]} for call in calls], 0, ""

    monkeypatch.setattr(tier, "_run_worker", fake_worker)
    assert tier.run("sm_80,gfx950,gfx1201", str(tmp_path / "run"), scope="quick", workers=1) == 0
    lines = {line["case"]: line for line in read_results(tmp_path / "run")}
    version = tier.triton_version()
    refused = lines["compile.target[hip:gfx950]"]
    assert refused["verdict"] == verdicts.UNSUPPORTED and refused["target"] == "hip:gfx950"
    assert refused["reason"] == (f"triton {version} cannot compile for hip:gfx950: RuntimeError: "
                                 "PassManager::run failed (error: unsupported target: 'gfx950')")
    fp8 = lines["compile.target[hip:gfx1201,fp8e4m3]"]
    assert (fp8["verdict"], fp8["dtype"]) == (verdicts.UNSUPPORTED, "fp8e4m3")
    assert fp8["reason"] == (f"triton {version} cannot compile fp8e4m3 dots for hip:gfx1201: CompilationError: "
                             "type fp8e4nv not supported in this architecture")
    compiled = [job for job in jobs if not job.get("probe")]
    assert {job["target"] for job in compiled} == {"cuda:sm_80", "hip:gfx1201"}
    assert {call["dtype"] for job in compiled if job["target"] == "hip:gfx1201" for call in job["calls"]} == {
        "fp16", "fp32"}  # the quick plan's fp8 calls left out
    assert CONTRACT_FIELDS <= set(refused) and "compile.fwd[cuda:sm_80,fp16,d64]" in lines
    assert "unsupported" in (tmp_path / "run" / tier.REPORT_FILE).read_text()


def test_a_compiler_that_dies_on_the_probe_makes_its_target_unsupported_a_broken_worker_an_error(monkeypatch):
    aborted = "python: AccelerateMatmul.cpp:63: Assertion `false && \"computeCapability not supported\"' failed.\n"
    monkeypatch.setattr(tier, "_run_worker", lambda job: ([], -6, aborted))
    refusal = tier.compiler_refusals(cuda_profile((13, 0)), "/tmp")[None]
    assert refusal["unsupported"].endswith(
        "cannot compile for cuda:sm_130: the compiler killed its process (SIGABRT): python: "
        "AccelerateMatmul.cpp:63: Assertion `false && \"computeCapability not supported\"' failed.")
    monkeypatch.setattr(tier, "_run_worker", lambda job: ([], 1, "ImportError: cannot import name 'x'\n"))
    line = tier.target_line(cuda_profile((9, 0)), tier.compiler_refusals(cuda_profile((9, 0)), "/tmp")[None])
    assert (line["case"], line["verdict"]) == ("compile.target[cuda:sm_90]", verdicts.ERROR)
    assert line["reason"] == ("the compiler probe did not answer: the worker exited with code 1: "
                              "ImportError: cannot import name 'x'")


def test_the_real_compiler_refuses_an_architecture_it_does_not_know(tmp_path):
    assert tier.compiler_refusals(cuda_profile((8, 9)), str(tmp_path)) == {}  # fp16, bf16, fp32 and fp8 dots
    reason = tier.compiler_refusals(hip_profile("gfx9999"), str(tmp_path))[None]["unsupported"]
    assert reason.endswith("cannot compile for hip:gfx9999: RuntimeError: PassManager::run failed "
                           "(error: unsupported target: 'gfx9999')")


def test_one_real_compile_for_sm_80(tmp_path):
    profile = cuda_profile((8, 0))
    outcome = tier.run_chunk(profile, [plan.Call(plan.FLASH, "fp16", 16, False, backward=False)], str(tmp_path))
    lines = {line["kernel"]: line for line in (tier.results_line(e, profile) for e in outcome.results.values())}
    assert set(lines) == {"fwd", "total"}
    forward = lines["fwd"]
    assert forward["case"] == "compile.fwd[cuda:sm_80,fp16,d16]" and forward["verdict"] == verdicts.PASS
    assert CONTRACT_FIELDS <= set(forward)
    assert forward["config"] == {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3,
                                 "CAUSAL": False, "DROPOUT": False, "DESCRIPTORS": False}
    assert 0 < forward["registers"] <= 255 and forward["spills_bytes"] == 0
    assert 0 < forward["shared_bytes"] <= forward["shared_limit_bytes"] == 163 * 1024
    assert forward["compile_s"] > 0 and forward["backend"] == forward["target"] == "cuda:sm_80"


def test_one_real_compile_of_a_packed_batch_for_sm_80(tmp_path):
    """The varlen forward compiles with its tile list (a tensor passed by keyword, which a
    configuration leaves out): no call of the plan is skipped."""
    profile = cuda_profile((8, 0))
    outcome = tier.run_chunk(profile, [plan.Call(plan.VARLEN, "fp16", 16, True, backward=False)], str(tmp_path))
    assert not any(case.startswith("compile.call[") for case in outcome.results)  # no call refused
    cases = [tier.results_line(event, profile)["case"] for event in outcome.results.values()]
    assert cases == ["compile.fwd[cuda:sm_80,fp16,d16,causal,varlen]"]


def test_the_kv_cache_merge_is_compiled_per_head_dim_it_covers(tmp_path):
    """The merge cuts the head dim into DIM_CHUNKS programs of BLOCK_D columns: at D 128 its
    launch is named d128 (2 chunks of 64 here), not d64, which would read as D 64's launch again
    and be skipped as compiled already."""
    profile = cuda_profile((8, 0))
    outcome = tier.run_chunk(profile, [plan.Call(plan.KV_CACHE, "fp16", 64, True, backward=False),
                                       plan.Call(plan.KV_CACHE, "fp16", 128, True, backward=False)], str(tmp_path))
    merges = {line["case"]: line["config"] for line in (tier.results_line(e, profile) for e in outcome.results.values())
              if line["kernel"] == "decode_merge"}
    assert set(merges) == {"compile.decode_merge[cuda:sm_80,fp16,d64]", "compile.decode_merge[cuda:sm_80,fp16,d128]"}
    assert merges["compile.decode_merge[cuda:sm_80,fp16,d128]"]["DIM_CHUNKS"] * 64 == 128
