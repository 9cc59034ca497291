"""Which primitive probes a case relies on, and the "likely backend fault" of a failing case.

The bundled kernels (kernels/blocks.py and the kernels built from it) use, for every
case: tl.dot on the case's input dtype, exp2 for the softmax, row max and row sum
reductions, and the casts between the input dtype and fp32; dropout cases also use
tl.philox_impl (the kernels draw their Philox words directly, not through tl.rand).
They use no atomics. When a case fails (fail, nonfinite or error, also under a known
issue) on a backend where one of those probes failed, its results line gets
`backend_fault: "likely backend fault: bf16 tl.dot"`. A probe failing under a known
issue (`xfail`, its own verdict kept in `rule_verdict`) still counts: a documented
hardware property is still the likely cause, and the note names the issue. A kernel of
one's own is taken to use the same primitives; torch's SDPA backends (`sdpa:...`) are
not Triton, and an output-contract error (a malformed return) is never a backend's.
"""

from __future__ import annotations

from conformance.judging import verdicts
from conformance.judging.returns import CONTRACT_PREFIX
from conformance.running.implementations import BUILTIN_ADAPTERS

# Probe ids every case relies on, whatever its dtype and features.
ALWAYS = ("probe.exp2[fp32]", "probe.row_max[fp32]", "probe.row_sum[fp32]")
# ... by the case's input dtype (fp8 forwards write fp16 outputs).
BY_DTYPE = {
    "fp16": ("probe.dot[fp16]", "probe.cast[fp16]", "probe.upcast[fp16]"),
    "bf16": ("probe.dot[bf16]", "probe.cast[bf16]", "probe.upcast[bf16]"),
    "fp32": ("probe.dot[fp32]",),
    "fp8e4m3": ("probe.dot[fp8e4m3]", "probe.upcast[fp8e4m3]", "probe.cast[fp16]"),
    "fp8e5m2": ("probe.dot[fp8e5m2]", "probe.upcast[fp8e5m2]", "probe.cast[fp16]"),
}
# ... by a feature the case has (a truthy case field).
BY_FEATURE = {"dropout": ("probe.philox[uint32]",)}

_CASE_FAILURES = frozenset({verdicts.FAIL, verdicts.NONFINITE, verdicts.ERROR})
_NOT_TRITON = tuple(f"{name}:" for name in BUILTIN_ADAPTERS)  # peers that are not Triton
_PROBE_FAILURES = frozenset({verdicts.FAIL, verdicts.ERROR})


def relies_on_triton(line: dict) -> bool:
    """False for the built-in adapters of peers that are not Triton (`sdpa:...`); any other
    implementation -- bundled or a kernel author's -- is taken to use the same primitives."""
    return not str(line.get("implementation") or "").startswith(_NOT_TRITON)


def relied_probes(line: dict) -> tuple[str, ...]:
    """Probe ids a case (its results line or fields) relies on, in a stable order."""
    ids = [*ALWAYS, *BY_DTYPE.get(line.get("dtype"), ())]
    for feature, probe_ids in BY_FEATURE.items():
        if line.get(feature):
            ids += probe_ids
    return tuple(dict.fromkeys(ids))


def backend_fault(line: dict, probe_lines: list[dict]) -> str | None:
    """"likely backend fault: ..." for a failing case whose primitives failed a probe, else None.

    A probe the profile works around (e.g. interpreter_bf16_dot on the interpreter) is still
    named, with that note: the workaround may be what broke. So is a probe that fails
    under a known issue (xfail; its `rule_verdict` is fail or error), with the issue's id."""
    if line.get("rule_verdict", line.get("verdict")) not in _CASE_FAILURES:
        return None
    if not relies_on_triton(line) or (line.get("reason") or "").startswith(CONTRACT_PREFIX):
        return None  # a peer that is not Triton, or a malformed return: no primitive to blame
    failed = {probe["case"]: probe for probe in probe_lines
              if probe.get("rule_verdict", probe.get("verdict")) in _PROBE_FAILURES}
    culprits = [failed[probe_id] for probe_id in relied_probes(line) if probe_id in failed]
    if not culprits:
        return None
    return "likely backend fault: " + ", ".join(_culprit_name(probe) for probe in culprits)


def _culprit_name(probe: dict) -> str:
    """'bf16 tl.dot', with notes: '(worked around here: interpreter_bf16_dot)', '(known issue ID)'."""
    notes = []
    if probe.get("worked_around"):
        notes.append(f"worked around here: {probe['worked_around']}")
    if probe.get("known_issue"):
        notes.append(f"known issue {probe['known_issue']['id']}")
    name = probe.get("primitive") or probe["case"]
    return f"{name} ({'; '.join(notes)})" if notes else name


def with_backend_fault(line: dict, probe_lines: list[dict]) -> dict:
    """`line` with `backend_fault` set when `backend_fault` finds one (case lines only)."""
    if line.get("kind", "case") != "case":
        return line
    fault = backend_fault(line, probe_lines)
    return {**line, "backend_fault": fault} if fault else line
