"""Primitive probes: the Triton primitives the bundled kernels rely on, each checked
alone on the running backend against torch, before the kernel cases.

A probe launches one tiny kernel (`conformance/probe_kernels.py`) that calls the
primitive raw -- none of the kernels' workarounds (`emulate_bf16`) -- and compares
with torch under a tolerance stated with its reason. Its results line
(`kind: "probe"`, id `probe.<name>[<dtype>]`) goes into results.jsonl before the
cases; a failing case whose kernels rely on a failing probe's primitive is marked
"likely backend fault: ..." (`backend_fault`, see conformance/attribution.py).

A documented property of the backend is an entry of the known-issue registry
scoped by `probe` (conformance/known_issues.toml): a failing probe it covers is
`xfail`, a passing one `xpass` (a stale entry, which fails `probes` and the run);
the line keeps the probe's own verdict as `rule_verdict` and the entry as `known_issue`.

    python -m conformance probes [--backend KEY] [--probe ID ...]
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from conformance import known_issues, verdicts
from conformance import probe_measures as measures
from conformance.environment import triton_version
from conformance.probe_measures import TF32_UNIT_ROUNDOFF, Measurement
from conformance.runner import error_fields


@dataclass(frozen=True)
class Probe:
    """One primitive at one dtype.

    primitive:  how a failure is named in attributions, e.g. "bf16 tl.dot"
    unit:       of max_error and tolerance ("abs", "ulp", "words", "sigma")
    basis:      why the tolerance is what it is
    measure:    device -> Measurement (launches the probe kernel)
    needs:      a capability the profile must have ("bf16", "fp8e4m3", "tf32"), else unsupported
    workaround: the profile flag under which the bundled kernels avoid this primitive
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
          workaround="emulate_bf16"),
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
          workaround="emulate_bf16"),
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

# Backends whose Triton takes tl.dot(input_precision="tf32") (triton's backend options:
# every NVIDIA target, AMD only gfx942; the interpreter accepts it and computes fp32).
_TF32_BACKENDS = {"cuda": None, "interpreter": None, "hip": ("gfx942",)}


def unsupported_reason(probe: Probe, profile) -> str | None:
    """Why `profile` cannot run this probe, or None."""
    if probe.needs is None:
        return None
    if probe.needs == "tf32":
        archs = _TF32_BACKENDS.get(profile.name, ())
        if archs is None or profile.arch in archs:
            return None
        return f"tl.dot input_precision tf32 not offered by triton on {profile.key}"
    if probe.needs not in profile.dtypes:
        return f"dtype {probe.needs} not supported on {profile.key} (supported: {', '.join(profile.dtypes)})"
    return None


def select(probe_ids=()) -> tuple[Probe, ...]:
    """The probes with these ids (all if none); ValueError names an unknown id."""
    unknown = [probe_id for probe_id in probe_ids if probe_id not in PROBE_IDS]
    if unknown:
        raise ValueError(f"unknown probe {unknown[0]!r}; known: {', '.join(PROBE_IDS)}")
    return tuple(probe for probe in PROBES if not probe_ids or probe.id in probe_ids)


def reproduce_command(probe: Probe, backend_option: str | None) -> str:
    backend = ["--backend", backend_option] if backend_option else []
    return shlex.join(["python", "-m", "conformance", "probes", *backend, "--probe", probe.id])


def run_probe(probe: Probe, profile, backend_option: str | None = None, registry=None) -> dict:
    """Run one probe on `profile`'s device; its results line.

    registry: known-issue entries (default: the bundled known_issues.toml); one scoped
    by this probe turns a fail or error into xfail and a pass into xpass."""
    started = time.perf_counter()
    line = {"case": probe.id, "kind": "probe", "probe": probe.name, "dtype": probe.dtype,
            "primitive": probe.primitive, "verdict": None, "rule_verdict": None, "reason": "",
            "max_error": None, "tolerance": None, "unit": probe.unit, "tolerance_basis": probe.basis,
            "worked_around": None, "backend": profile.key, "duration_s": None,
            "reproduce": reproduce_command(probe, backend_option)}
    unsupported = unsupported_reason(probe, profile)
    if unsupported:
        line.update(verdict=verdicts.UNSUPPORTED, reason=unsupported)
    else:
        line.update(_judge(probe, profile))
    line["rule_verdict"] = line["verdict"]
    if line["verdict"] != verdicts.UNSUPPORTED:
        issue = known_issues.match_probe(probe.id, profile, triton_version(), registry)
        line["verdict"] = known_issues.apply_known_issue(line["rule_verdict"], issue)
        if issue is not None:
            line["known_issue"] = issue.record()
        if line["verdict"] == verdicts.XPASS:
            line["reason"] = f"known issue {issue.id} no longer fails: remove its registry entry"
    line["duration_s"] = round(time.perf_counter() - started, 4)
    return line


def _judge(probe: Probe, profile) -> dict:
    try:
        with np.errstate(all="ignore"):  # the interpreter's numpy warns on overflow to inf, as intended here
            measured = probe.measure(profile.device)
        if profile.device == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        return {"verdict": verdicts.ERROR, **error_fields(exc)}
    fields = {"max_error": measured.max_error, "tolerance": measured.tolerance}
    if measured.passed:
        return {"verdict": verdicts.PASS, **fields}
    reason = f"{measured.detail}; max error {measured.max_error:.3g} > tolerance {measured.tolerance:.3g} {probe.unit}"
    if probe.workaround and getattr(profile, probe.workaround, False):
        fields["worked_around"] = probe.workaround
        reason += f"; kernels work around it on this profile: {probe.workaround}"
    return {"verdict": verdicts.FAIL, "reason": reason, **fields}


def run_probes(profile, probe_ids=(), backend_option: str | None = None, registry=None) -> list[dict]:
    """Results lines of the selected probes (all by default) on `profile`, which must be active."""
    return [run_probe(probe, profile, backend_option, registry) for probe in select(probe_ids)]


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
