"""Launch configurations in a run: a case's own (`cfg=kernel:m128n64s3w8`, the sweep
tiers), `run --config`, and what becomes of a configuration the device cannot launch.

The bundled kernels read their launch tables through kernels.tuning; a case with a
configuration runs inside kernels.tuning_space.configured, so that one kernel of its
call takes that configuration and every other kernel its table's; its results line says
what that kernel really launched with (`launched_config`, kernels.tuning.recorded_launches).
"""

from __future__ import annotations

import contextlib
import dataclasses

from conformance.cases.catalog import Case
from conformance.bundled.kernels.tuning_space import check_in_space, config_text, configured, parse_config

NOT_BUNDLED = "launch configurations are the bundled kernels' own: this implementation has none to set"


def with_config(cases: list[Case], config: str | None, profile) -> list[Case]:
    """The cases with `config` (`kernel:configuration`, run --config) as their launch
    configuration; ValueError naming --config when it is malformed, names a kernel a
    case does not launch, or is not in that kernel's tuning space on the profile's target
    (the message lists the space)."""
    if config is None:
        return cases
    kernel, separator, text = config.partition(":")
    if not separator:
        raise ValueError(f"--config: expected kernel:configuration such as bwd_dq:m128n64s3w8, got {config!r}")
    out = []
    for case in cases:
        try:
            check_in_space(kernel, text, profile.target, case.dtype)
            out.append(dataclasses.replace(case, config=config))
        except ValueError as exc:
            raise ValueError(f"--config: {exc}") from None
    return out


def applied(case: Case):
    """The context a case's call runs in: its kernel configured, or nothing to change."""
    if case.config is None:
        return contextlib.nullcontext()
    kernel, _, text = case.config.partition(":")
    return configured(kernel, parse_config(text))


def launched_config(case: Case, launched: dict) -> dict:
    """`launched_config` for a configured case's results line: `kernel:configuration` that
    its configured kernel launched with (from a `recorded_launches()` record), None if it
    never launched; nothing for a case without a configuration."""
    if case.config is None:
        return {}
    kernel = case.config.partition(":")[0]
    used = launched.get(kernel)
    return {"launched_config": None if used is None else f"{kernel}:{config_text(used)}"}


def cannot_launch(case: Case, exc: BaseException) -> str | None:
    """The reason a configured case is `unsupported`: its configuration does not fit the
    device (triton's OutOfResources: shared memory, registers); None for any other failure,
    which stays an error."""
    if case.config is None:
        return None
    kernel, _, config = case.config.partition(":")
    while exc is not None:
        if type(exc).__name__ == "OutOfResources":
            return f"{kernel} cannot launch {config} here: {str(exc).splitlines()[0]}"
        exc = exc.__cause__ or exc.__context__
    return None


# Seconds per configured case and worker, compile included (each configuration compiles
# its kernel anew), as measured: the H100 sweep, 1,038 cases in 240 s with 12 workers
# (2.8 s; reports/h100-sm90/sweep), the interpreter's sweep-quick, 93 cases in 48 s with 2
# workers (1.0 s; the 2-core CPU build machine).
_SECONDS_PER_CASE = {"cuda": 2.8, "cpu": 1.0}


def cost_estimate(cases: list[Case], profile, workers) -> str:
    """What a run of configured cases will cost, said before it starts."""
    configs = {case.config for case in cases if case.config}
    kernels = {config.partition(":")[0] for config in configs}
    parallel = workers if isinstance(workers, int) and workers > 0 else 1
    minutes = len(cases) * _SECONDS_PER_CASE.get(profile.device, 3.0) / parallel / 60
    return (f"conformance: {len(configs)} launch configurations of {len(kernels)} kernels x "
            f"{len(cases) / max(1, len(configs)):.1f} cases each = {len(cases)} cases on {profile.key}; "
            f"about {minutes:.0f} min with {parallel} worker{'s' if parallel != 1 else ''} (a rough estimate: "
            "every configuration compiles its kernel anew)")
