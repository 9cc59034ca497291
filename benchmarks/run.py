"""Run the benchmark grid on the GPU and write env.json and benchmark.jsonl.

Every implementation x direction x problem leaves one line, written as soon as it
is measured: `status` "ok" (median_ms, tflops, peak_bytes, samples_ms), "skipped"
(the backend cannot take the problem, or it would not fit; `reason` says which) or
"error" (it raised; `reason` holds the exception).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from pathlib import Path

import torch

from conformance.bundled.benchmarks import grid, implementations
from conformance.bundled.benchmarks.report import BENCHMARK_FILE
from conformance.bundled.benchmarks.timing import RepetitionPolicy, interleaved_medians, peak_bytes
from conformance.cases.inputs import TORCH_DTYPES

FULL_POLICY = RepetitionPolicy()
QUICK_POLICY = RepetitionPolicy(target_ms=20.0, min_reps=3, max_reps=5, warmup_ms=0.0, rounds=1)
# SDPA's messages when the chosen backend refuses a problem (torch <= 2.11 / newer).
_REFUSALS = ("No available kernel", "No viable backend")
DEVICE = "cuda"  # tests run the loop on the CPU with this replaced


def inputs(shape, dtype: str, count: int = 3, seed: int = 0) -> tuple:
    """`count` standard-normal tensors of `shape` and dtype ("fp16", ...) on DEVICE, requiring grad."""
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    return tuple(torch.randn(shape, device=DEVICE, dtype=TORCH_DTYPES[dtype], generator=generator).requires_grad_()
                 for _ in range(count))


def free_bytes() -> int:
    """Device memory free now (what the math backend's estimate is held against)."""
    torch.cuda.empty_cache()
    return torch.cuda.mem_get_info()[0]


def direction_call(fn, direction: str, q, k, v, causal: bool):
    """The timed callable: an inference forward, or one backward through a recorded graph."""
    if direction == "fwd":
        def forward():
            with torch.no_grad():
                return fn(q, k, v, causal)
        return forward
    out = fn(q, k, v, causal)
    grad_out = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, (q, k, v), grad_out, retain_graph=True)


def result_line(name: str, problem: grid.Problem, direction: str) -> dict:
    """The results line of `name` on `problem` before it is measured (status "ok", no figures)."""
    return {"impl": name, "direction": direction, **problem.fields(), "flops": problem.flops(direction),
            "status": "ok", "reason": "", "median_ms": None, "tflops": None, "peak_bytes": None,
            "reps": None, "samples_ms": None}


def _failed(line: dict, exc: BaseException, caught: list) -> dict:
    """The line of an implementation that raised: skipped where the backend refused the
    problem or memory ran out, else error (with torch's warnings, which often say why)."""
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return {**line, "status": "skipped", "reason": f"out of memory: {str(exc).splitlines()[0]}"}
    status = "skipped" if any(refusal in str(exc) for refusal in _REFUSALS) else "error"
    reason = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    if caught:
        reason += " (torch: " + " / ".join(dict.fromkeys(text.strip() for text in caught)) + ")"
    return {**line, "status": status, "reason": reason[:600]}


def measure_all(names: list[str], problem: grid.Problem, direction: str, tensors, free_bytes: int,
                policy: RepetitionPolicy) -> list[dict]:
    """One results line per implementation (see the module docstring), all timed together
    in interleaved rounds (`measure_calls`)."""
    lines, builders = {}, {}
    for name in names:
        lines[name] = result_line(name, problem, direction)
        skip = implementations.skip_reason(name, problem, direction, free_bytes)
        if skip:
            lines[name] = {**lines[name], "status": "skipped", "reason": skip}
            continue
        builders[name] = functools.partial(direction_call, implementations.implementation(name), direction,
                                           *tensors, problem.causal)
    lines.update(measure_calls({name: lines[name] for name in builders}, builders, policy))
    return [lines[name] for name in names]


def measure_calls(lines: dict, builders: dict, policy: RepetitionPolicy) -> dict:
    """name -> its results line completed: `lines[name]` (status "ok", its "flops" set) measured
    with the call `builders[name]()` returns (e.g. `direction_call`).  Each builder runs, and its
    call runs once, first (compilation; a refusal shows there with torch's reasons attached);
    then all the calls are timed together in interleaved rounds (timing.interleaved_medians),
    so that none is favoured by the GPU's clock state, and each one's peak memory taken."""
    calls, torch_warnings = {}, {}
    for name, build in builders.items():
        def first_call(build=build):
            call = build()
            call()
            return call
        try:
            calls[name], torch_warnings[name] = implementations.call_recording_warnings(first_call)
        except Exception as exc:  # a backend that cannot take this problem, or a failing kernel
            lines[name] = _failed(lines[name], exc, getattr(exc, "torch_warnings", []))
    # Warnings raised while the implementations take turns cannot be told apart: a failure
    # there is reported with all of them.
    timed, caught = implementations.call_recording_warnings(lambda: interleaved_medians(calls, policy))
    for name, result in timed.items():
        if isinstance(result, BaseException):
            lines[name] = _failed(lines[name], result, torch_warnings[name] + caught)
            continue
        try:
            peak = peak_bytes(calls[name])
        except Exception as exc:  # noqa: BLE001
            lines[name] = _failed(lines[name], exc, torch_warnings[name] + caught)
            continue
        median, samples = result
        lines[name] = {**lines[name], "median_ms": median, "tflops": grid.tflops(lines[name]["flops"], median),
                       "peak_bytes": peak, "reps": len(samples), "samples_ms": [round(x, 5) for x in samples]}
    calls.clear()  # frees the backward graphs before the next measurement
    return lines


FLASH_FLOPS = "matmul FLOPs: 4·B·H·S²·D forward, halved when causal, backward 2.5x"


def write_environment(out: Path, quick: bool, policy: RepetitionPolicy, implementations: dict | None = None,
                      method: dict | None = None) -> dict:
    """env.json: the conformance fingerprint, cuDNN's version and the benchmark's method
    (`method` adds to or replaces its entries); `implementations` names what is measured
    (default: the bundled kernel and torch's SDPA)."""
    from conformance import backends
    from conformance.running.environment import command_line, fingerprint
    from conformance.running.results import write_env

    profile = backends.activate()  # before the bundled kernels are imported
    measured = implementations or {"bundled": "kernels:flash_attention", "sdpa": f"torch {torch.__version__}"}
    env = fingerprint(profile, tier=None, implementations=measured, command=command_line())
    env["cudnn"] = torch.backends.cudnn.version()
    env["benchmark"] = {"grid": "quick" if quick else "full", "repetitions": dataclasses.asdict(policy),
                        "timing": "median of CUDA-event timed calls (benchmarks/timing.py)",
                        "memory": "torch.cuda.max_memory_allocated() delta per call",
                        "flops": FLASH_FLOPS, **(method or {})}
    write_env(out, env)
    return env


def run_benchmark(out: Path, problems: list[grid.Problem], names: list[str], quick: bool = False) -> Path:
    """Measure every problem with every named implementation; returns benchmark.jsonl's path."""
    from conformance.running.results import to_json

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    policy = QUICK_POLICY if quick else FULL_POLICY
    write_environment(out, quick, policy)
    path = out / BENCHMARK_FILE
    started = time.perf_counter()
    with open(path, "w", encoding="utf-8") as handle:
        for problem in problems:
            tensors = inputs(problem.shape, problem.dtype)
            free = free_bytes()
            for direction in grid.DIRECTIONS:
                for line in measure_all(names, problem, direction, tensors, free, policy):
                    handle.write(to_json(line) + "\n")
                    handle.flush()
                    print(progress(line, time.perf_counter() - started), flush=True)
            del tensors
    return path


def progress(line: dict, elapsed: float) -> str:
    """One measured line as the run prints it."""
    what = (f"[{elapsed:6.1f}s] {line['impl']:14s} {line['direction']} {line['dtype']} d{line['head_dim']} "
            f"{'causal' if line['causal'] else 'full  '} S={line['seq_len']:<6d}")
    if line["status"] != "ok":
        return f"{what} {line['status']}: {line['reason'][:100]}"
    return f"{what} {line['tflops']:7.1f} TFLOP/s  {line['median_ms']:8.3f} ms  {line['peak_bytes'] / 2**20:9.1f} MiB"
