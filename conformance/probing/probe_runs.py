"""Running primitive probes (conformance.probing.probes) on the active backend: one
results line each, with the known-issue registry applied (xfail / xpass)."""

from __future__ import annotations

import shlex
import time

import numpy as np
import torch

from conformance.judging import verdicts
from conformance.judging.verdicts import error_fields
from conformance.probing.probes import Probe, select, unsupported_reason
from conformance.robustness import known_issues
from conformance.running.environment import triton_version


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
    if probe.workaround in profile.target.workarounds:
        fields["worked_around"] = probe.workaround
        reason += f"; kernels work around it on this profile: {probe.workaround}"
    return {"verdict": verdicts.FAIL, "reason": reason, **fields}


def run_probes(profile, probe_ids=(), backend_option: str | None = None, registry=None) -> list[dict]:
    """Results lines of the selected probes (all by default) on `profile`, which must be active."""
    return [run_probe(probe, profile, backend_option, registry) for probe in select(probe_ids)]
