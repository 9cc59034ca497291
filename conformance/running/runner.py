"""Run one case end to end and return its results line (a JSON-able dict).

    catalog entry -> backend profile (supported?) -> seeded inputs -> kernel under
    test, fp32 reference, same-precision torch paths -> errors per tensor ->
    verdict -> known issue? -> one results line

Verdicts are decided in this order: `unsupported` (the profile's reason; nothing
is launched), `error` (the kernel raised or broke its output contract), then
`nonfinite`, then `fail`/`pass` by the rule; a matching known issue finally turns
a failing verdict into `xfail` and a pass into `xpass`.

Nothing big outlives a case: tensors are locals of the functions below, and
tracebacks are rendered to text before their frames (which hold tensors) go.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from conformance.bundled.kernels.tuning import recorded_launches
from conformance.bundled.reference import MATCHED

from conformance.cases.catalog import Case
from conformance.cases.distributions import Distribution
from conformance.cases.inputs import DTYPE_NAMES, TORCH_DTYPES, Inputs, case_distribution, make_inputs
from conformance.diagnosing import diagnosis
from conformance.judging import determinism, verdicts
from conformance.judging.comparison_paths import comparison_paths
from conformance.judging.conventions import DEFAULT as DEFAULT_CONVENTIONS, Conventions
from conformance.judging.dropout import dropout_replay, seed_rng_for_call
from conformance.judging.operators import OPERATORS, Operator
from conformance.judging.returns import CONTRACT_PREFIX, Returned
from conformance.judging.rule import BOUND, compare_tensor
from conformance.judging.verdicts import error_fields
from conformance.reporting import summary
from conformance.robustness import known_issues
from conformance import phases
from conformance.running import configurations
from conformance.running.capabilities import NotSupported
from conformance.running.environment import triton_version
from conformance.running.implementations import Implementations, reproduce_command



class KernelFailure(Exception):
    """The implementation under test raised."""


class OutputContract(Exception):
    """The implementation returned something the operator's contract does not allow
    (conformance.judging.returns): neither return convention, or a non-tensor output."""




def base_line(case: Case, backend_key: str, implementation: str, reproduce: str) -> dict:
    """The fields every results line has, before the case has run."""
    return {
        "case": case.id,
        **case.fields(),
        "verdict": None,
        "rule_verdict": None,
        "reason": "",
        "tensors": [],
        "worst_ratio": None,
        "implementation": implementation,
        "backend": backend_key,
        "known_issue": None,
        "duration_s": None,
        "reproduce": reproduce,
    }


def error_line(case: Case, backend_key: str, implementation: str, reproduce: str, reason: str,
               traceback: str = "") -> dict:
    """A results line for a case that produced none of its own (a crash, a hang, a harness
    fault): verdict `error`, with the reason and traceback given."""
    line = base_line(case, backend_key, implementation, reproduce)
    line.update(verdict=verdicts.ERROR, rule_verdict=verdicts.ERROR, reason=reason, traceback=traceback)
    return line


def run_case(case: Case, profile, implementations: Implementations, *,
             backend_option: str | None = None, registry=None, check_determinism: bool = False,
             distribution: Distribution | None = None) -> dict:
    """Run `case` on `profile`'s device with the chosen implementation; one results line.

    backend_option: the --backend the user gave (repeated in the reproduce command).
    registry: known-issue entries (default: the bundled known_issues.toml).
    check_determinism: launch a forward twice; the line gets `deterministic` (conformance.judging.determinism).
    distribution: reshape the input values (conformance.cases.distributions); the line gets `distribution`.

    `duration_s` is the whole case: inputs, the implementation's calls (compilation included),
    the reference paths and the judging. An implementation that compiles (flex) adds
    `compile_s` and `compilations`: the part of that time spent compiling (compile_fields).
    """
    started = time.perf_counter()
    phases.install_compile_timer()
    timer = phases.PhaseClock(profile.device)
    phases.reset_peak_memory(profile.device)
    clock = compile_clock(implementations, case.op)
    clock_before = clock.reading() if clock is not None else None
    implementation = implementations.name(case.op)
    line = base_line(case, profile.key, implementation,
                     reproduce_command(case.id, backend_option, implementations, distribution_args(distribution)))
    drawn_under = case_distribution(case, distribution)
    if drawn_under is not None:
        line["distribution"] = drawn_under.spec
    unsupported = (case.unsupported_reason(profile) or _undeclared(case, implementations)
                   or (configurations.NOT_BUNDLED if case.config and not implementations.is_bundled(case.op) else None))
    if unsupported:
        line.update(verdict=verdicts.UNSUPPORTED, rule_verdict=verdicts.UNSUPPORTED, reason=unsupported)
    else:
        with phases.measuring(timer):
            line.update(_judge(case, profile.device, implementations, check_determinism, distribution, timer))
    if line["rule_verdict"] == verdicts.UNSUPPORTED:
        line["verdict"] = verdicts.UNSUPPORTED
    else:
        issue = known_issues.match(case, profile, triton_version(), implementation, registry)
        line["verdict"] = known_issues.apply_known_issue(line["rule_verdict"], issue)
        if issue is not None:
            line["known_issue"] = issue.record()
        if line["verdict"] == verdicts.XPASS:
            line["reason"] = f"known issue {issue.id} no longer fails: remove its registry entry"
    line.update(phases.peak_memory_fields(profile.device))
    _release_memory(profile.device)
    if clock is not None:
        line.update(compile_fields(clock_before, clock.reading()))
    line["duration_s"] = round(time.perf_counter() - started, 4)
    line["phases"] = timer.record(line["duration_s"])
    if timer.cold_compiles:
        line["compiled"] = timer.cold_compiles
    return line


def compile_clock(implementations: Implementations, op: str):
    """The implementation's `compile_clock` (`reading()` -> cumulative (seconds, compilations)
    of this process; conformance.peers.flex_compile.CompileClock), or None: most implementations
    compile nothing per case, or do it where the harness cannot see."""
    if implementations.is_bundled(op):
        return None
    try:
        return getattr(implementations.resolve(op), "compile_clock", None)
    except Exception:  # does not import: _judge records the error
        return None


def compile_fields(before: tuple, after: tuple) -> dict:
    """`compile_s` and `compilations` of one case, from two clock readings."""
    return {"compile_s": round(after[0] - before[0], 4), "compilations": after[1] - before[1]}


def _undeclared(case: Case, implementations: Implementations) -> str | None:
    """Why the implementation's declared capabilities exclude `case`, or None. A declaration
    that cannot be read was a usage error already; here it leaves the case to run (and err)."""
    try:
        declaration, _ = implementations.capabilities(case.op)
    except Exception:
        return None
    return declaration.unsupported_reason(case) if declaration is not None else None


def declared_conventions(case: Case, implementations: Implementations) -> Conventions:
    """The numerical conventions the implementation declares for `case`'s operator
    (conformance.judging.conventions); the operator's own where it declares none."""
    try:
        declaration, _ = implementations.capabilities(case.op)
    except Exception:  # reported as a usage error before the run; here: judge by the defaults
        return DEFAULT_CONVENTIONS
    return declaration.conventions() if declaration is not None else DEFAULT_CONVENTIONS


def distribution_args(distribution: Distribution | None) -> list[str]:
    """The command-line words that select `distribution` again (none for the default)."""
    return [] if distribution is None else ["--distribution", distribution.spec]


def _judge(case: Case, device: str, implementations: Implementations, check_determinism: bool = False,
           distribution: Distribution | None = None, timer: phases.PhaseClock = phases.NO_CLOCK) -> dict:
    """rule_verdict, reason, tensors and worst_ratio (plus traceback on error, `deterministic` if checked);
    `timer` gets the seconds of each phase (conformance.phases)."""
    op = OPERATORS[case.op]
    with timer.phase("inputs"):
        inputs = make_inputs(case, device, op.inputs, distribution)
    check_determinism = check_determinism and case.direction == "fwd"
    try:
        function = op.adapt(implementations.resolve(case.op), implementations.capabilities(case.op)[0])
        mask_function = implementations.dropout_mask(case.op)
    except Exception as exc:  # the user's --kernel module does not import
        return {"rule_verdict": verdicts.ERROR, **error_fields(exc, prefix="importing the implementation: ")}
    launch = _Launch(case, op, inputs, function, implementations, device, seed_offset=mask_function is not None)
    try:
        with timer.phase("launch"):
            returned = launch.run()
        kernel = returned.tensors
        if check_determinism:
            with timer.phase("determinism"):
                kernel = determinism.snapshot(kernel)
                differing = determinism.differing_tensors(kernel, launch.run().tensors)
        replay = dropout_replay(case, function, returned.seed_offset, mask_function)
    except NotSupported as refusal:  # a built-in peer adapter refused before launching
        return {"rule_verdict": verdicts.UNSUPPORTED, "reason": str(refusal)}
    except OutputContract as violation:
        return {"rule_verdict": verdicts.ERROR, "reason": f"{CONTRACT_PREFIX}{violation}"}
    except KernelFailure as failure:
        too_large = configurations.cannot_launch(case, failure)
        if too_large:
            return {"rule_verdict": verdicts.UNSUPPORTED, "reason": too_large}
        return {"rule_verdict": verdicts.ERROR, **error_fields(failure.__cause__ or failure)}
    except TypeError as exc:  # no way to replay its dropout mask
        return {"rule_verdict": verdicts.ERROR, **error_fields(exc)}
    convention = {"return_convention": returned.convention} if returned.convention else {}
    conventions = declared_conventions(case, implementations)
    applied = conventions.applied(case)
    extra = {"conventions": applied} if applied else {}  # the line names what its judging took as declared
    paths = comparison_paths(case, op, inputs, replay, timer, conventions)
    contract_problem = _contract_problem(case, kernel, paths.reference)
    if contract_problem:
        return {"rule_verdict": verdicts.ERROR, "reason": f"{CONTRACT_PREFIX}{contract_problem}", **convention}
    noise = paths.gradient_noise
    with timer.phase("judging"):
        tensors = [compare_tensor(name, kernel[name], paths.torch_paths[name], ref, expected_dtype(case, name),
                                  bad_input=paths.bad_input_regions.get(name),
                                  term_size=paths.term_sizes.get(name, 0.0),
                                  delta_noise=noise.stored_output.get(name, 0.0) if noise else 0.0,
                                  accumulator_noise=noise.accumulator.get(name, 0.0) if noise else 0.0)
                   for name, ref in paths.reference.items()]
    with timer.phase("diagnosis"):
        _diagnose(case, tensors, kernel, paths, inputs, implementations.uses_bundled_tables(case.op))
    verdict, reason = _rule_verdict(tensors)
    if replay is not None:
        extra["dropout_keep_rate"] = replay.keep_rate()
    if replay is not None and verdict == verdicts.PASS and replay.rate_problem():
        verdict, reason = verdicts.FAIL, replay.rate_problem()
    if check_determinism:
        verdict, reason = determinism.verdict_after_check(verdict, reason, differing)
        extra["deterministic"] = not differing
    if diagnosis.case_pattern(tensors):
        extra["fault_pattern"] = diagnosis.case_pattern(tensors)
    return {"rule_verdict": verdict, "reason": reason, "tensors": tensors,
            "worst_ratio": worst_ratio(tensors), **convention, **extra, **launch.launched_fields()}


def _diagnose(case: Case, tensors: list[dict], kernel: dict, paths, inputs: Inputs, bundled: bool) -> None:
    """Every tensor gets its error in ulps; a failing one also `where` it fails (conformance.diagnosing)."""
    for record in tensors:
        name = record["name"]
        ref = paths.reference[name]
        diagnosis.spread(record, kernel[name], paths.torch_paths[name], ref, expected_dtype(case, name))
        if diagnosis.failing(record):
            region = paths.bad_input_regions.get(name)
            record["where"] = diagnosis.diagnosed(case, record, kernel[name], ref, inputs.tensors, inputs.do,
                                                  exclude=region.reached if region is not None else None,
                                                  bundled=bundled)


@dataclass
class _Launch:
    """One call of the implementation on a case's inputs, repeatable (determinism check)."""

    case: Case
    op: Operator
    inputs: Inputs
    function: object
    implementations: Implementations
    device: str
    seed_offset: bool = False  # the kernel owns its dropout RNG (conformance.judging.dropout)
    launched: dict | None = None  # kernel -> LaunchConfig the bundled kernels took in the latest run

    def run(self) -> Returned:
        """Forward outputs (fwd) or input gradients (bwd) by name; KernelFailure if it raised."""
        case, op = self.case, self.op
        try:
            with self.implementations.launch_context(case.op), configurations.applied(case), \
                    recorded_launches() as self.launched:
                if self.seed_offset and case.dropout:
                    seed_rng_for_call(case)
                if case.direction == "fwd":
                    with torch.no_grad():
                        returned = self._returned(self._call())
                else:
                    returned = self._returned(self._call())
                    out = returned.tensors["out"]
                    if not isinstance(out, torch.Tensor):
                        raise OutputContract(f"expected the output tensor, got {type(out).__name__}")
                    grads = torch.autograd.grad(out, list(self.inputs.tensors.values()), self.inputs.do)
                    returned.tensors = dict(zip(op.gradient_names(), grads))
                _synchronize(self.device)  # asynchronous launch failures belong to the kernel
        except NotSupported as refusal:
            if not self.implementations.is_builtin_adapter(case.op):
                raise KernelFailure(str(refusal)) from refusal
            raise
        except OutputContract:
            raise
        except Exception as exc:
            raise KernelFailure(str(exc)) from exc
        return returned

    def launched_fields(self) -> dict:
        """`launched_config` of a configured case (configurations.launched_config), else nothing."""
        return configurations.launched_config(self.case, self.launched or {})

    def _call(self):
        return self.op.call(self.function, self.case, self.inputs.tensors, self.seed_offset)

    def _returned(self, result) -> Returned:
        try:
            return self.op.outputs(self.case, result, self.seed_offset)
        except TypeError as exc:  # conformance.judging.returns says what was expected and what came
            raise OutputContract(str(exc)) from None


def expected_dtype(case: Case, name: str) -> str:
    """The dtype a tensor must come back in (and whose rounding the rule's floor allows):
    lse, total and cache are fp32 statistics; the rest are what the same-precision torch path
    returns for the case's inputs (the input dtype; fp16 for fp8 inputs)."""
    if name in ("lse", "total", "cache"):  # cache: kv_cache_attention's count of differing elements
        return "fp32"
    return DTYPE_NAMES[MATCHED.output_dtype_for(TORCH_DTYPES[case.dtype])]


def _contract_problem(case: Case, kernel: dict, reference: dict) -> str | None:
    """Why the kernel's tensors cannot be judged (wrong type/shape/dtype/device), or None."""
    for name, ref in reference.items():
        actual = kernel.get(name)
        if not isinstance(actual, torch.Tensor):
            return f"{name} is {type(actual).__name__}, expected a tensor"
        if actual.shape != ref.shape:
            return f"{name} has shape {tuple(actual.shape)}, expected {tuple(ref.shape)}"
        dtype = DTYPE_NAMES.get(actual.dtype, str(actual.dtype))
        if dtype != expected_dtype(case, name):
            return f"{name} has dtype {dtype}, expected {expected_dtype(case, name)}"
        if actual.device.type != ref.device.type:
            return f"{name} is on {actual.device}, expected {ref.device.type}"
    return None


def _rule_verdict(tensors: list[dict]) -> tuple[str, str]:
    nonfinite = [t for t in tensors if t["nonfinite"]]
    if nonfinite:
        return verdicts.NONFINITE, "; ".join(
            f"{t['name']}: {t['nonfinite']} non-finite values where the reference is finite" for t in nonfinite)
    swallowed = [t for t in tensors if t.get("unpropagated")]
    if swallowed:
        return verdicts.FAIL, "; ".join(
            f"{t['name']}: {t['unpropagated']} finite values where the NaN/Inf input must show "
            "(it was not propagated)" for t in swallowed)
    failed = [t for t in tensors if not t["passed"]]
    if failed:
        return verdicts.FAIL, "; ".join(
            f"{t['name']} ratio {t['ratio']:.3g} > {BOUND:g} (kernel_err {t['kernel_err']:.3g}, "
            f"torch_err {t['torch_err']:.3g}, floor {t['floor']:.3g})" for t in failed)
    return verdicts.PASS, ""


def worst_ratio(tensors: list[dict]) -> float | None:
    """The largest ratio of a case's tensors (NaN counts as worst); None if none was judged."""
    return summary.worst(tensor["ratio"] for tensor in tensors)


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _release_memory(device: str) -> None:
    if device == "cuda":
        try:
            torch.cuda.empty_cache()
        except Exception:  # a sticky CUDA error (illegal address): the case's line already says what
            pass  # the kernel did, and an isolated worker is replaced after its health check

