"""A run's selection -- which cases it checks and how their inputs are made -- and resuming.

The selection is what the run's options decide: tier, case ids, seeds, kernels
(`op=module:function` specs), their capabilities file and dropout-mask functions,
operators (`--op`: only their cases), backend and input distribution. The plugin records
it in env.json (key `selection`), so that

    python -m conformance run --resume DIR

can finish an interrupted run: it re-selects exactly what DIR's run selected,
skips every case DIR/results.jsonl already holds, and appends the rest. How cases
run (isolation, time limit, determinism check, workers) may change on resume.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from conformance.cases.catalog import Case
from conformance.cases.tiers import select
from conformance.running.configurations import with_config
from conformance.running.shards import parse_shard, sharded
from conformance.running.results import RESULTS_FILE, read_env, read_results

# key -> value when the option is not given
DEFAULTS = {"tier": "auto", "cases": [], "seeds": None, "kernels": [], "backend": None, "distribution": None,
            "capabilities": None, "dropout_masks": [], "ops": [], "config": None, "shard": None}


def reseeded(cases: list[Case], seeds: int | None) -> list[Case]:
    """Every case under seeds 0 .. seeds-1 (case by case); the cases as they are for None."""
    if seeds is None:
        return list(cases)
    if seeds < 1:
        raise ValueError(f"--seeds: must be at least 1, got {seeds}")
    unique = {}
    for case in cases:
        for seed in range(seeds):
            reseeded_case = dataclasses.replace(case, seed=seed)
            unique.setdefault(reseeded_case.id, reseeded_case)
    return list(unique.values())


def of_ops(cases: list[Case], ops) -> list[Case]:
    """The cases of these operators only (all cases when `ops` is empty)."""
    return [case for case in cases if not ops or case.op in ops]


def refined(cases: list[Case], selection: dict, profile) -> list[Case]:
    """A tier's or the ids' cases under the selection's other options, in the one order
    every entry point applies them: --op, --config, --seeds, then --shard (a shard is a
    part of the reseeded selection).  ValueError naming the option."""
    cases = with_config(of_ops(cases, selection.get("ops")), selection.get("config"), profile)
    return sharded(reseeded(cases, selection["seeds"]), parse_shard(selection.get("shard")))


def selected_cases(selection: dict, profile) -> tuple[str, list[Case]]:
    """(label for env.json, cases) of a selection; ValueError on a bad tier, id or option."""
    label, cases = select(selection["tier"], selection["cases"], profile)
    return label, refined(cases, selection, profile)


def recorded_lines(run_dir: str | Path) -> list[dict]:
    """Every line a run folder's results.jsonl holds (none if it has no such file)."""
    return read_results(run_dir) if (Path(run_dir) / RESULTS_FILE).exists() else []


def recorded_ids(run_dir: str | Path) -> set[str]:
    """Ids of every line a run folder's results.jsonl holds."""
    return {line["case"] for line in recorded_lines(run_dir)}


def resumed_selection(run_dir: str | Path, given: dict) -> dict:
    """The selection recorded in DIR/env.json; ValueError if there is none, or if `given`
    (the options of the resuming command) sets a selection option of its own."""
    changed = sorted(key for key, default in DEFAULTS.items() if given.get(key, default) != default)
    if changed:
        raise ValueError(f"--resume reuses the run's own selection; drop {', '.join(changed)}")
    recorded = read_env(run_dir).get("selection")
    if not isinstance(recorded, dict):
        raise ValueError(f"--resume: {run_dir} holds no run to resume (no selection in its env.json)")
    return {**DEFAULTS, **{key: recorded[key] for key in DEFAULTS if key in recorded}}


def resumed_env(run_dir: str | Path, fresh: dict) -> dict:
    """env.json of a resumed run: the original one, plus when, how and by which revision
    each resume ran (`resumed`); `fresh` when the folder has none."""
    original = read_env(run_dir)
    if not original:
        return fresh
    resumes = list(original.get("resumed") or [])
    resumes.append({key: fresh.get(key) for key in ("time_utc", "command", "harness", "device")})
    return {**original, "resumed": resumes}
