"""`run`'s options beyond tier, case, kernel and backend, and their pytest translation.

    --seeds N                 every selected case under seeds 0 .. N-1
    --shard K/N               only the K-th of N cost-balanced parts of the selection
                              (conformance.running.shards); the union of the N is the selection
    --config KERNEL:CFG       the selected cases with one kernel's launch configuration set
                              (kernels.tuning_space), e.g. bwd_dq:m128n64s3w8
    --distribution SPEC       input values (conformance.cases.distributions), e.g. logits:1e4
    --resume DIR              finish the run in DIR (conformance.running.selection)
    --isolate/--no-isolate    cases in a worker process (conformance.running.isolation); default: on for GPUs
    --case-timeout S          per-case limit of isolated runs; default 300 s on GPUs, 600 s on the CPU
    --check-determinism/--no-check-determinism
                              launch forwards twice, compare bits (conformance.judging.determinism); default: on for GPUs
    -n N|auto                 pytest-xdist workers; on a GPU, none or `auto` is several per GPU
                              (conformance.running.parallelism); on the CPU `auto` is one per core

The plugin reads the same choices from its `--conformance-*` options.
"""

from __future__ import annotations

import argparse

from conformance.running.parallelism import gpu_plan
from conformance.running.selection import DEFAULTS, resumed_selection

# selection key -> (attribute of the parsed `run` arguments, plugin option)
SELECTION_ARGUMENTS = {
    "tier": ("tier", "--conformance-tier"),
    "cases": ("case", "--conformance-case"),
    "seeds": ("seeds", "--conformance-seeds"),
    "kernels": ("kernel", "--conformance-kernel"),
    "backend": ("backend", "--conformance-backend"),
    "distribution": ("distribution", "--conformance-distribution"),
    "capabilities": ("capabilities", "--conformance-capabilities"),
    "dropout_masks": ("dropout_mask", "--conformance-dropout-mask"),
    "ops": ("op", "--conformance-op"),
    "config": ("config", "--conformance-config"),
    "shard": ("shard", "--conformance-shard"),
}
_SWITCHES = {"isolate": "--conformance-isolate", "check_determinism": "--conformance-determinism"}


def workers(text: str):
    """-n's value: a non-negative int (0: no xdist) or `auto`."""
    if text == "auto":
        return text
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of workers or 'auto', got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative number of workers, got {value}")
    return value


def add_arguments(run: argparse.ArgumentParser) -> None:
    """Add the options of the module doc to the `run` (or `flake`) subparser."""
    run.add_argument("--shard", metavar="K/N",
                     help="run only the K-th of N disjoint, cost-balanced parts of the selection (1 <= K <= N)")
    run.add_argument("--config", metavar="KERNEL:CFG",
                     help="run the selected cases with this launch configuration of one bundled kernel, "
                          "e.g. bwd_dq:m128n64s3w8 (the sweep tier's cfg= token)")
    run.add_argument("--seeds", type=int, metavar="N", help="run every selected case under seeds 0..N-1")
    run.add_argument("--distribution", metavar="SPEC",
                     help="input values: normal, scaled:S, logits:L, outliers:M, nearconst:E, negative:L")
    run.add_argument("--resume", metavar="DIR",
                     help="finish the run in DIR: its own selection, recorded cases skipped, the rest appended")
    run.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                     help="run cases in a worker process that may crash or hang (default: on for GPUs)")
    run.add_argument("--case-timeout", type=float, metavar="S",
                     help="per-case time limit when isolated (default: 300 on GPUs, 600 on the CPU)")
    run.add_argument("--check-determinism", action=argparse.BooleanOptionalAction, default=None,
                     help="launch every forward twice and fail it if the bits differ (default: on for GPUs)")
    run.add_argument("-n", dest="workers", type=workers, metavar="N",
                     help="pytest-xdist worker processes, or auto (default on a GPU: several per GPU, "
                          "from its memory and the host's cores; on the CPU: one per core)")


def selection_of(args) -> dict:
    """The run's selection: from the arguments, or (--resume) from the folder's env.json.
    ValueError when --resume is combined with selection options or finds no run."""
    given = {key: getattr(args, attribute) for key, (attribute, _) in SELECTION_ARGUMENTS.items()}
    return resumed_selection(args.resume, given) if args.resume else given


def plugin_arguments(args, profile) -> list[str]:
    """The plugin options (and -n) for `args`; the selection's only when not resuming."""
    arguments = []
    if args.resume:
        arguments += ["--conformance-resume", args.resume]
    else:
        for key, (attribute, option) in SELECTION_ARGUMENTS.items():
            value = getattr(args, attribute)
            for item in value if isinstance(value, list) else [value]:
                if item is not None and not (key == "tier" and item == DEFAULTS["tier"]):
                    arguments += [option, str(item)]
    for attribute, option in _SWITCHES.items():
        if getattr(args, attribute) is not None:
            arguments += [option, "on" if getattr(args, attribute) else "off"]
    if args.case_timeout is not None:
        arguments += ["--conformance-case-timeout", str(args.case_timeout)]
    count = xdist_workers(args.workers, profile)
    # xdist by name: the run's pytest does not autoload plugins (commands._own_plugins_only)
    return arguments + (["-p", "xdist.plugin", "-n", str(count), *distribution_mode(count)] if count else [])


def xdist_workers(requested, profile):
    """-n for pytest. On a GPU profile with a GPU present, none or `auto` means the worker
    plan (conformance.running.parallelism: several workers per GPU); a number is kept. On
    the CPU: what was asked (`auto` is pytest-xdist's, one per core; none, no xdist)."""
    if profile.device != "cuda":
        return requested
    import torch

    if not torch.cuda.is_available():  # a GPU profile named on a machine without one
        return 1 if requested == "auto" else requested
    return gpu_plan(requested).workers


def worker_plan_text(requested, profile) -> str | None:
    """The worker plan of a GPU run, as printed at its start; None on the CPU."""
    if profile.device != "cuda":
        return None
    import torch

    return gpu_plan(requested).describe() if torch.cuda.is_available() else None


def distribution_mode(count) -> list[str]:
    """How pytest-xdist hands out cases: by work stealing where it can (pytest-xdist >= 3.2),
    so that the slow cases at the end of a tier do not wait behind a worker's backlog."""
    if count in (None, 0, 1):
        return []
    try:
        from importlib.metadata import version

        major, minor = (int(part) for part in version("pytest-xdist").split(".")[:2])
    except Exception:
        return []
    return ["--dist", "worksteal"] if (major, minor) >= (3, 2) else []
