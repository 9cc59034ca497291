"""Primitive probes: the Triton primitives the bundled kernels rely on, each checked
alone on the running backend against torch, before the kernel cases.

A probe launches one tiny kernel (`conformance/probing/probe_kernels.py`) that calls the
primitive raw -- none of the kernels' workarounds (kernels.targets) -- and compares
with torch under a tolerance stated with its reason. Its results line
(`kind: "probe"`, id `probe.<name>[<dtype>]`) goes into results.jsonl before the
cases; a failing case whose kernels rely on a failing probe's primitive is marked
"likely backend fault: ..." (`backend_fault`, see conformance/probing/attribution.py).

A documented property of the backend is an entry of the known-issue registry
scoped by `probe` (conformance/robustness/known_issues.toml): a failing probe it covers is
`xfail`, a passing one `xpass` (a stale entry, which fails `probes` and the run);
the line keeps the probe's own verdict as `rule_verdict` and the entry as `known_issue`.

    python -m conformance probes [--backend KEY] [--probe ID ...]

This module is the probe list and what is read from probe lines; running a probe
and applying the registry to it is conformance/probing/probe_runs.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from conformance.judging import verdicts
from conformance.probing import probe_measures as measures
from conformance.probing.probe_measures import TF32_UNIT_ROUNDOFF, Measurement


@dataclass(frozen=True)
class Probe:
    """One primitive at one dtype.

    primitive:  how a failure is named in attributions, e.g. "bf16 tl.dot"
    unit:       of max_error and tolerance ("abs", "ulp", "words", "sigma")
    basis:      why the tolerance is what it is
    measure:    device -> Measurement (launches the probe kernel)
    needs:      a capability the profile must have ("bf16", "fp8e4m3", "tf32"), else unsupported
    workaround: the kernels' workaround that avoids this primitive where it is active
                (kernels.targets.INTERPRETER_WORKAROUNDS)
    """

    name: str
    dtype: str
    primitive: str
    unit: str
    basis: str
    measure: Callable[[str], Measurement]
    needs: str | None = None
    workaround: str | None = None

    @property
    def id(self) -> str:
        return f"probe.{self.name}[{self.dtype}]"


# --- the probe list -----------------------------------------------------------------------

_DOT_BASIS = ("exact products, fp32 accumulation: 2·(K+1)·2^-24·max(|A|·|B|), twice Higham's bound "
              "because tensor cores may add with truncation")
_FP8_NOTE = ("; on sm_90 triton's default fp8 tl.dot accumulates with reduced precision "
             "(max_num_imprecise_acc_default = 2^30), which this bound flags")
_EXACT = "exact: bit-identical to torch (round to nearest even)"

PROBES = (
    Probe("dot", "fp16", "fp16 tl.dot", "abs", _DOT_BASIS, measures.dot("fp16")),
    Probe("dot", "bf16", "bf16 tl.dot", "abs", _DOT_BASIS, measures.dot("bf16"), needs="bf16",
          workaround="interpreter_bf16_dot"),
    Probe("dot", "fp32", "fp32 tl.dot (ieee)", "abs", "fp32 products and accumulation: " + _DOT_BASIS,
          measures.dot("fp32", "ieee")),
    Probe("dot", "tf32", "tf32 tl.dot", "abs", "operands rounded to tf32 (2^-10 each, truncation allowed) "
          "plus " + _DOT_BASIS, measures.dot("tf32", "tf32", 2 * TF32_UNIT_ROUNDOFF), needs="tf32"),
    Probe("dot", "fp8e4m3", "fp8e4m3 tl.dot", "abs", _DOT_BASIS + _FP8_NOTE, measures.dot("fp8e4m3"),
          needs="fp8e4m3"),
    Probe("dot", "fp8e5m2", "fp8e5m2 tl.dot", "abs", _DOT_BASIS + _FP8_NOTE, measures.dot("fp8e5m2"),
          needs="fp8e5m2"),
    Probe("exp2", "fp32", "tl.math.exp2", "ulp", "4 ulp of fp32: hardware exp2 is approximate "
          "(CUDA documents 2 ulp for exp2f); exp2(-inf) and underflow must give exactly 0", measures.exp2),
    Probe("row_max", "fp32", "row max (tl.max)", "ulp", "exact, -inf rows included", measures.reduction("max")),
    Probe("row_sum", "fp32", "row sum (tl.sum)", "abs", "(n-1)·2^-24·Σ|x|, any summation order (Higham)",
          measures.reduction("sum")),
    Probe("cast", "fp16", "fp32->fp16 cast", "ulp", _EXACT, measures.cast("fp16")),
    Probe("cast", "bf16", "fp32->bf16 cast", "ulp", _EXACT, measures.cast("bf16"), needs="bf16",
          workaround="interpreter_bf16_cast"),
    Probe("upcast", "fp16", "fp16->fp32 cast", "ulp", "exact: every fp16 value is an fp32 value",
          measures.upcast("fp16")),
    Probe("upcast", "bf16", "bf16->fp32 cast", "ulp", "exact: every bf16 value is an fp32 value",
          measures.upcast("bf16"), needs="bf16"),
    Probe("upcast", "fp8e4m3", "fp8e4m3->fp32 cast", "ulp", "exact: every fp8 value is an fp32 value",
          measures.upcast("fp8e4m3"), needs="fp8e4m3"),
    Probe("upcast", "fp8e5m2", "fp8e5m2->fp32 cast", "ulp", "exact: every fp8 value is an fp32 value",
          measures.upcast("fp8e5m2"), needs="fp8e5m2"),
    Probe("rand", "fp32", "tl.rand", "sigma", "deterministic per seed, in [0, 1), every one of 64 bins "
          "within 6 sigma of N/64", measures.rand),
    Probe("philox", "uint32", "tl.philox_impl", "words", "exact: Random123's Philox-4x32-10, bit for bit",
          measures.philox),
    Probe("atomic_add", "fp32", "tl.atomic_add", "abs", "exact: integer-valued partial sums below 2^24",
          measures.atomic_add),
)
PROBE_IDS = tuple(probe.id for probe in PROBES)

def unsupported_reason(probe: Probe, profile) -> str | None:
    """Why `profile` cannot run this probe, or None."""
    if probe.needs is None:
        return None
    if probe.needs == "tf32":
        return None if profile.tf32_dot else f"tl.dot input_precision tf32 not offered by triton on {profile.key}"
    return profile.dtype_unsupported_reason(probe.needs)


def select(probe_ids=()) -> tuple[Probe, ...]:
    """The probes with these ids (all if none); ValueError names an unknown id."""
    unknown = [probe_id for probe_id in probe_ids if probe_id not in PROBE_IDS]
    if unknown:
        raise ValueError(f"unknown probe {unknown[0]!r}; known: {', '.join(PROBE_IDS)}")
    return tuple(probe for probe in PROBES if not probe_ids or probe.id in probe_ids)


def is_probe_line(line: dict) -> bool:
    return line.get("kind") == "probe"


def tolerance_notes(lines: list[dict]) -> list[str]:
    """Why the tolerance of each failing probe (also under a known issue) is what it is, one line each."""
    return [f"{line['case']} tolerance: {line['tolerance_basis']}" for line in lines
            if is_probe_line(line) and line.get("rule_verdict", line["verdict"]) == verdicts.FAIL
            and line.get("tolerance_basis")]


def unhandled_failures(lines: list[dict]) -> list[dict]:
    """Failing or erroring probes that neither the profile works around nor a known issue
    covers (those are xfail), and xpass probes: a known issue that no longer fails."""
    return [line for line in lines if is_probe_line(line) and (
        line["verdict"] == verdicts.XPASS
        or line["verdict"] in (verdicts.FAIL, verdicts.ERROR) and not line.get("worked_around"))]
