"""`python -m conformance compile`: every bundled kernel in every launch configuration
a target's profile would use, compiled for that target without a GPU.

Workers (worker.py, one process per chunk of the plan, `-n` at a time) call the real
operators and compile what they launch; this module runs them, survives compilers
that abort their process (the compile in progress becomes an `error` line and a new
worker carries on without it), judges each compile against the target's limits and
writes the run folder: results.jsonl (lines of kind "compile"), env.json, compile.md.

Verdicts: `pass` (compiled, within the limits), `fail` (shared memory over what a
block may use on the target, or more registers per thread than a block of that
many warps can have -- either way the launch would be refused), `error` (the
compiler raised or died; the reason is its message), `unsupported` (a sweep's
configuration that cannot launch there, or a target -- or a dtype of it -- the installed
triton cannot compile for: one line, `compile.target[KEY]` or `compile.target[KEY,dtype]`,
with the compiler's reason).  Register
spills are reported but do not fail: a spilling kernel still runs correctly, only slower.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from conformance.backends import INTERPRETER
from conformance.backends.profile import BackendProfile
from conformance.compile_only import plan
from conformance.compile_only.targets import parse_targets
from conformance.judging import verdicts
from conformance.running.environment import command_line, fingerprint, triton_version
from conformance.running.results import ResultsWriter, default_run_dir, read_env, read_results
from conformance.running.spawn import module_command

REPORT_FILE = "compile.md"
_CHUNK_TIMEOUT_S = 1800
_KERNEL_ORDER = ("fwd", "total", "bwd_preprocess", "bwd_dkdv", "bwd_dq",
                 "piecewise_fwd", "piecewise_bwd_dkdv", "piecewise_bwd_dq", "decode_append", "decode_split",
                 "decode_merge")


@dataclass
class ChunkOutcome:
    """What the workers of one chunk reported (after any restarts)."""

    results: dict[str, dict] = field(default_factory=dict)  # id -> result event
    notes: set[str] = field(default_factory=set)


def _worker_env() -> dict:
    return {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}


def _run_worker(job: dict) -> tuple[list[dict], int | None, str]:
    """(events, return code or None on timeout, stderr) of one worker process."""
    process = subprocess.Popen(module_command("conformance.compile_only.worker"), env=_worker_env(),
                               stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    timed_out = False
    try:
        stdout, stderr = process.communicate(json.dumps(job), timeout=_CHUNK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
        stderr += f"\ntimed out after {_CHUNK_TIMEOUT_S} s"
        timed_out = True
    events = []
    for text in stdout.splitlines():
        try:
            events.append(json.loads(text))
        except json.JSONDecodeError:
            continue  # something the compiler printed
    return events, (None if timed_out else process.returncode), stderr


def compiler_words(stderr: str) -> str:
    """The compiler's last telling line on stderr (an assertion or an error), else its last
    line; "" if it said nothing."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip() and "warn" not in line.lower()]
    telling = [line for line in lines if "Assertion" in line or "error" in line.lower()]
    return (telling or lines or [""])[-1]


# MLIR's line after any failing pass: the pass's own error, printed before it, says why.
_PIPELINE_FAILED = "Failures have been detected while processing an MLIR pass pipeline"


def first_compiler_error(stderr: str) -> str:
    """The first `error:` the compiler printed (MLIR's generic pipeline line skipped), or an
    assertion, without the source location in front; "" if none."""
    for line in stderr.splitlines():
        if "Assertion" in line or ("error:" in line and _PIPELINE_FAILED not in line):
            return line[line.find("error:"):].strip() if "error:" in line else line.strip()
    return ""


def death_reason(returncode: int | None, stderr: str) -> str:
    """Why a worker died: its signal or exit code, and the compiler's last words."""
    if returncode is None:
        how = "the compile did not finish in time"
    elif returncode < 0:
        how = f"the compiler killed its process ({signal.Signals(-returncode).name})"
    else:
        how = f"the worker exited with code {returncode}"
    last = compiler_words(stderr)
    return f"{how}: {last}" if last else how


def compiler_refusals(profile: BackendProfile, cache_dir: str) -> dict[str | None, dict]:
    """What the installed triton refuses of `profile`'s target, asked with the probe kernel
    (probe_kernel.py) in one worker: {} where it compiles a dot of every dtype of the profile;
    {None: fields} where it compiles none (the first dtype, fp16, refused, or the compiler
    aborted); else {dtype: fields} per refused dtype.  The fields of each results line:
    `unsupported` with the compiler's words (its exception, and for a whole target the first
    error it printed: "unsupported target", an assertion), or `error` where the probe's worker
    failed otherwise (the harness, not the compiler: a timeout, an exception outside the compile)."""
    dtypes = list(profile.dtypes)
    events, returncode, stderr = _run_worker({"target": profile.key, "calls": [], "skip": [],
                                              "cache_dir": cache_dir, "probe": dtypes})
    answer = next((event for event in events if event["event"] == "compiler"), None)
    cannot = f"triton {triton_version()} cannot compile"
    if answer is None and (returncode is None or returncode >= 0):
        return {None: {"error": {"reason": f"the compiler probe did not answer: {death_reason(returncode, stderr)}",
                                 "traceback": stderr[-4000:]}}}
    if answer is None or dtypes[0] in answer["refused"]:
        words = death_reason(returncode, stderr) if answer is None else answer["refused"][dtypes[0]]
        printed = first_compiler_error(stderr) if answer is not None else ""
        return {None: {"unsupported": f"{cannot} for {profile.key}: {words}"
                                      + (f" ({printed})" if printed and printed not in words else "")}}
    return {dtype: {"unsupported": f"{cannot} {dtype} dots for {profile.key}: {reason}"}
            for dtype, reason in answer["refused"].items()}


def target_line(profile: BackendProfile, refusal: dict, dtype: str | None = None) -> dict:
    """The one results line, `compile.target[KEY]` (or `[KEY,dtype]`), of a target (or one of
    its dtypes) the installed triton refused."""
    case = f"compile.target[{profile.key}{f',{dtype}' if dtype else ''}]"
    return results_line({"id": case, "kernel": "target", "dtype": dtype, "head_dim": None, "config": {},
                         **refusal}, profile)


def _planned(profile: BackendProfile, scope: str, refused: dict) -> list[list]:
    """The plan's chunks of a target without the calls of the dtypes its compiler refused
    (none at all where it refused the target)."""
    if None in refused:
        return []
    chunks = ([call for call in calls if call.dtype not in refused] for calls in plan.chunks(profile, scope))
    return [calls for calls in chunks if calls]


def _chunk_failure(profile: BackendProfile, calls: list, reason: str, stderr: str) -> dict:
    """An error event for a chunk whose worker died outside any compile (e.g. the
    kernels failed to import): its remaining configurations were never compiled."""
    dtypes = sorted({call.dtype for call in calls})
    dims = sorted({call.head_dim for call in calls})
    case_id = f"compile.worker[{profile.key},{'+'.join(dtypes)},{'+'.join(f'd{dim}' for dim in dims)}]"
    return {"event": "result", "id": case_id, "kernel": "worker", "dtype": dtypes[0], "head_dim": dims[0],
            "config": {}, "error": {"reason": f"not every configuration was compiled: {reason}",
                                    "traceback": stderr[-4000:]}}


def _refused_call(profile: BackendProfile, call: dict, reason: str) -> dict:
    """An error event for a call of the plan that raised before its kernels compiled (the
    worker reports it as refused).  The plan holds only calls the operators accept, so this
    is a fault of an operator or of the harness, and the kernels that call launches went
    unchecked: an error line, not only a note (a harness bug once hid the varlen kernels so)."""
    flags = [name for name, on in (("causal", call.get("causal")), ("dropout", call.get("dropout")),
                                   ("forward", not call.get("backward", True))) if on]
    parts = [profile.key, call["op"], call["dtype"], f"d{call['head_dim']}", *flags,
             *(part for part in (call.get("variant"), call.get("config")) if part)]
    return {"event": "result", "id": f"compile.call[{','.join(parts)}]", "kernel": "call", "dtype": call["dtype"],
            "head_dim": call["head_dim"], "config": {},
            "error": {"reason": f"the call raised before its kernels compiled, so none was checked: {reason}"}}


def run_chunk(profile: BackendProfile, calls: list, cache_dir: str) -> ChunkOutcome:
    """Compile one chunk of the plan, restarting the worker after each crash."""
    outcome = ChunkOutcome()
    while True:
        job = {"target": profile.key, "calls": [call.as_dict() for call in calls],
               "skip": sorted(outcome.results), "cache_dir": cache_dir}
        events, returncode, stderr = _run_worker(job)
        in_progress = None
        for event in events:
            if event["event"] == "start":
                in_progress = event
            elif event["event"] == "result":
                outcome.results[event["id"]] = event
                in_progress = None
            elif event["event"] == "note":
                outcome.notes.add(event["text"])
            elif event["event"] == "skipped":
                refused = _refused_call(profile, event["call"], event["reason"])
                outcome.results[refused["id"]] = refused
        if returncode == 0:
            return outcome
        reason = death_reason(returncode, stderr)
        if in_progress is None:  # died between compiles: nothing to skip, so no retry
            failed = _chunk_failure(profile, calls, reason, stderr)
            outcome.results[failed["id"]] = failed
            return outcome
        outcome.results[in_progress["id"]] = {**in_progress, "event": "result",
                                              "error": {"reason": reason, "traceback": stderr[-4000:]}}


def _spilled_kinds(spilled: dict | None) -> str:
    """Which registers the scratch bytes hold, where the compiler says (AMD): a few bytes of
    scalar spills are cheap, vector spills inside the loops are not."""
    if not spilled:
        return ""
    return f" ({spilled['vgpr']} vector, {spilled['sgpr']} scalar registers spilled)"


def judge(line: dict, profile: BackendProfile, measure_note: str | None) -> tuple[str, str]:
    """pass/fail of a compiled kernel against the target's limits, and why.  A launch
    table's configuration over a limit fails (the kernels would not launch); a sweep's
    (`cfg=` in the id: one configuration of the tuning space) is `unsupported` there:
    knowing which ones cannot launch on a target is what the sweep scope is for."""
    over, remarks = [], []
    shared, limit = line["shared_bytes"], line["shared_limit_bytes"]
    if shared is not None and limit is not None and shared > limit:
        over.append(f"shared memory {shared:,} B over the {limit:,} B a block may use on {profile.key}")
    registers, budget = line["registers"], line["register_budget"]
    if registers is not None and budget is not None and registers > budget:
        over.append(f"{registers} registers per thread over the {budget} a block of "
                    f"{line['config'].get('num_warps')} warps can have")
    spilled = line.get("spilled_registers") or {}
    if line["spills_bytes"]:
        remarks.append(f"spills {line['spills_bytes']:,} B per thread{_spilled_kinds(spilled)} "
                       "(reported, not a failure)")
    elif spilled.get("vgpr"):  # CDNA spills vector registers into its accumulation registers first
        remarks.append(f"{spilled['vgpr']} vector registers spilled into other registers, no scratch "
                       "(reported, not a failure)")
    if measure_note:
        remarks.append(measure_note)
    if over and "cfg=" in line["case"]:
        return verdicts.UNSUPPORTED, "cannot launch here: " + "; ".join(over)
    return (verdicts.FAIL, "; ".join(over)) if over else (verdicts.PASS, "; ".join(remarks))


def results_line(event: dict, profile: BackendProfile) -> dict:
    """The results line (kind "compile") of one compile the workers reported."""
    config = event.get("config") or {}
    line = {
        "kind": "compile", "case": event["id"], "verdict": None, "reason": "",
        "duration_s": event.get("compile_s"), "backend": profile.key, "target": profile.key,
        "kernel": event.get("kernel"), "dtype": event.get("dtype"), "head_dim": event.get("head_dim"),
        "config": config, "registers": event.get("registers"),
        "register_budget": profile.register_budget(config["num_warps"]) if "num_warps" in config else None,
        "spills_bytes": event.get("spills_bytes"),
        **({"spilled_registers": event["spilled_registers"]} if event.get("spilled_registers") else {}),
        "shared_bytes": event.get("shared_bytes"),
        "shared_limit_bytes": profile.shared_memory_bytes, "compile_s": event.get("compile_s"),
    }
    if event.get("unsupported"):
        line.update(verdict=verdicts.UNSUPPORTED, reason=event["unsupported"])
    elif event.get("error"):
        line.update(verdict=verdicts.ERROR, reason=event["error"]["reason"], traceback=event["error"].get("traceback"))
    else:
        line["verdict"], line["reason"] = judge(line, profile, event.get("measure_note"))
    return line


def _order(line: dict, profiles: list[BackendProfile]) -> tuple:
    keys = [profile.key for profile in profiles]
    profile = profiles[keys.index(line["target"])]
    dtype = profile.dtypes.index(line["dtype"]) if line["dtype"] in profile.dtypes else len(profile.dtypes)
    kernel = _KERNEL_ORDER.index(line["kernel"]) if line["kernel"] in _KERNEL_ORDER else len(_KERNEL_ORDER)
    return keys.index(line["target"]), dtype, line["head_dim"] or 0, kernel, line["case"]


def compile_targets(profiles: list[BackendProfile], scope: str, workers: int,
                    on_chunk=None) -> tuple[list[dict], list[str]]:
    """Results lines (in a stable order) and the run's notes, for every target: first each
    target's compiler is asked what it compiles (one line for a target, or a dtype of it,
    that it does not: compiler_refusals), then the plan's chunks of the rest run.  `on_chunk(lines, done,
    total)` hears each chunk's new lines as it finishes (the refused targets' as chunk 0)."""
    lines, notes = {}, set()
    with tempfile.TemporaryDirectory(prefix="fa-compile-") as cache_dir, ThreadPoolExecutor(workers) as pool:
        refusals = list(pool.map(lambda profile: compiler_refusals(profile, cache_dir), profiles))
        work = [(profile, calls) for profile, refused in zip(profiles, refusals)
                for calls in _planned(profile, scope, refused)]
        refused = [target_line(profile, fields, dtype) for profile, refusals_ in zip(profiles, refusals)
                   for dtype, fields in refusals_.items()]
        lines.update((line["case"], line) for line in refused)
        if refused and on_chunk is not None:
            on_chunk(refused, 0, len(work))
        outcomes = pool.map(lambda item: run_chunk(*item, cache_dir), work)
        for done, ((profile, _), outcome) in enumerate(zip(work, outcomes), start=1):
            fresh = [results_line(event, profile) for case_id, event in outcome.results.items() if case_id not in lines]
            lines.update((line["case"], line) for line in fresh)
            notes |= outcome.notes
            if on_chunk is not None:
                on_chunk(fresh, done, len(work))
    return sorted(lines.values(), key=lambda line: _order(line, profiles)), sorted(notes)


class _Progress:
    """Writes each finished chunk's lines to the run folder at once (an interrupted run
    keeps them) and a progress line to stderr."""

    def __init__(self, writer: ResultsWriter):
        self.writer, self.started, self.checks, self.bad = writer, time.perf_counter(), 0, 0

    def __call__(self, lines: list[dict], done: int, total: int) -> None:
        for line in lines:
            self.writer.append(line)
        self.checks += len(lines)
        self.bad += sum(line["verdict"] in (verdicts.FAIL, verdicts.ERROR) for line in lines)
        elapsed = time.perf_counter() - self.started
        print(f"compile: {done}/{total} chunks, {self.checks} checks ({self.bad} fail or error), "
              f"{elapsed / 60:.1f} min", file=sys.stderr, flush=True)


def environment(profiles: list[BackendProfile], scope: str, notes: list[str], wall_s: float) -> dict:
    """env.json: this host (the compiler's, not a device's) and what was compiled for."""
    env = fingerprint(INTERPRETER, tier="compile", implementations={}, command=command_line())
    keys = [profile.key for profile in profiles]
    env.update(backend=",".join(keys), backend_name="compile-only", arch=None, targets=keys, scope=scope,
               triton=triton_version(), wall_s=round(wall_s, 1), compile_notes=notes,
               profile_notes=[f"{profile.key}: {note}" for profile in profiles for note in profile.notes])
    return env


def run(targets: str, out_dir: str | None = None, scope: str = "full", workers: int | None = None) -> int:
    """Compile, write the run folder, print a table per target; exit code 1 on fail/error.
    ValueError (naming --target or --scope) for bad arguments."""
    from conformance.compile_only.report import render_markdown, render_terminal

    profiles = parse_targets(targets)
    plan.chunks(profiles[0], scope)  # rejects an unknown scope before any work
    started = time.perf_counter()
    run_dir = Path(out_dir) if out_dir else default_run_dir("compile")
    unfinished = ["unfinished (running, or interrupted): the results of the chunks done so far"]
    partial = ResultsWriter(run_dir, environment(profiles, scope, unfinished, 0.0))
    lines, notes = compile_targets(profiles, scope, workers or os.cpu_count() or 1, _Progress(partial))
    partial.close()
    writer = ResultsWriter(run_dir, environment(profiles, scope, notes, time.perf_counter() - started))
    for line in lines:  # the whole run again, in its stable order
        writer.append(line)
    writer.close()
    lines, env = read_results(run_dir), read_env(run_dir)  # reports are rebuilt from the files
    (run_dir / REPORT_FILE).write_text(render_markdown(env, lines), encoding="utf-8")
    print(render_terminal(env, lines))
    print(f"conformance: compile-only results in {run_dir}")
    return 1 if verdicts.run_failed(line["verdict"] for line in lines) else 0
