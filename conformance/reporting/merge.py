"""Several run folders read as one run: the shards of `run --shard K/N` from several
machines (or a folder holding them), for `report`, `diff` and `matrix`.

The merged results are every folder's lines, each case once; the merged env.json is
the first folder's, with `machines` (each folder's fingerprint: device, GPUs, triton,
harness, shard, time) and `merge_warnings`.  What would make the merged result wrong
is a warning the report shows and a `problem` the commands turn into a non-zero exit:
folders of different harness revisions, tiers, backends or Triton versions, a case
recorded twice with different verdicts, a shard missing from a K/N set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conformance.reporting.summary import format_env_value
from conformance.running.results import RESULTS_FILE, folders_with_results, read_env, read_results, results_file

# env.json fields whose difference between folders makes them not one run.
_SAME = ("harness", "tier", "backend", "triton")
_MACHINE_FIELDS = ("device", "gpus", "driver", "torch", "triton", "harness", "time_utc")


@dataclass
class MergedRun:
    folders: list[Path]
    env: dict
    lines: list[dict]
    problems: list[str] = field(default_factory=list)  # each makes the merged result wrong


def run_folders(paths) -> list[Path]:
    """The run folders named by `paths`, or found below them, in path order."""
    found = []
    for path in map(Path, paths):
        if results_file(path):
            found.append(path)
        else:
            found += folders_with_results(path)
    return found


def _shard(env: dict) -> str | None:
    return (env.get("selection") or {}).get("shard")


def _revision(env: dict):
    harness = env.get("harness")
    return harness.get("revision") if isinstance(harness, dict) else harness


def _differences(envs: list[dict]) -> list[str]:
    out = []
    for key in _SAME:
        values = {str(_revision(env) if key == "harness" else env.get(key)) for env in envs}
        if len(values) > 1:
            out.append(f"the folders differ in {key}: {', '.join(sorted(values))}")
    return out


def _missing_shards(envs: list[dict]) -> list[str]:
    shards = [_shard(env) for env in envs if _shard(env)]
    counts = {shard.split("/")[1] for shard in shards}
    if not shards:
        return []
    if len(counts) > 1:
        return [f"shards of different splits: {', '.join(sorted(shards))}"]
    count = int(counts.pop())
    present = {int(shard.split("/")[0]) for shard in shards}
    missing = sorted(set(range(1, count + 1)) - present)
    return [f"shard {index}/{count} missing" for index in missing]


def _unique_lines(folder_lines: list[tuple[Path, list[dict]]]) -> tuple[list[dict], list[str]]:
    seen: dict[str, tuple[Path, dict]] = {}
    merged, problems = [], []
    for folder, lines in folder_lines:
        for line in lines:
            first = seen.get(line["case"])
            if first is None:
                seen[line["case"]] = (folder, line)
                merged.append(line)
            elif first[1].get("verdict") != line.get("verdict") and line.get("kind") != "probe":
                problems.append(f"{line['case']} recorded twice with different verdicts: "
                                f"{first[1].get('verdict')} in {first[0]}, {line.get('verdict')} in {folder}")
    return merged, problems


def merge(paths) -> MergedRun:
    """The run folders under `paths` as one run (ValueError when there is none)."""
    folders = run_folders(paths)
    if not folders:
        raise ValueError(f"no {RESULTS_FILE} in or below {', '.join(map(str, paths))}")
    envs = [read_env(folder) for folder in folders]
    lines, duplicates = _unique_lines([(folder, read_results(folder)) for folder in folders])
    # A folder named alone is a run as it is (a single shard included); several folders, or
    # one found below the path named (a folder of shards with the others missing), must make a whole.
    whole = len(folders) > 1 or any(folder not in set(map(Path, paths)) for folder in folders)
    problems = _differences(envs) + _missing_shards(envs) + duplicates if whole else []
    env = dict(envs[0])
    if len(folders) > 1:
        env["machines"] = [{"folder": str(folder), "shard": _shard(e), **{k: e.get(k) for k in _MACHINE_FIELDS}}
                           for folder, e in zip(folders, envs)]
    if len(folders) > 1 or problems:
        env["merge_warnings"] = problems
    return MergedRun(folders, env, lines, problems)


def machine_table(env: dict) -> tuple[list[str], list[list]]:
    """One row per merged folder: where each part ran."""
    rows = [[m.get("shard") or "-", m.get("device") or "?",
             ", ".join(gpu.get("uuid") or str(gpu.get("index")) for gpu in m.get("gpus") or []) or "-",
             m.get("triton") or "?", format_env_value("harness", m.get("harness")), m.get("time_utc") or "?",
             m.get("folder")]
            for m in env.get("machines") or []]
    return ["shard", "device", "GPUs", "triton", "harness", "time", "folder"], rows
