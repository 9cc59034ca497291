"""The tables every report format shows, aggregated from results lines.

A results line is one of three kinds (field `kind`, absent meaning "case"): a
catalog case, a primitive probe, or a compile-only check. Counts per verdict
treat them alike; each kind also has a table of its own. Functions return plain
data -- (headers, rows) of strings and ints, or small dicts -- and the format
modules only lay them out. Unknown extra fields are ignored.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from conformance.cases.catalog import DIRECTIONS, DTYPES
from conformance.judging import verdicts
from conformance.reporting import localized
from conformance.running.implementations import BUNDLED_MODULE

CASE, PROBE, COMPILE = "case", "probe", "compile"
KINDS = (CASE, PROBE, COMPILE)
# Verdicts listed line by line at the top of a report, in this order.
PROBLEM_VERDICTS = (verdicts.FAIL, verdicts.NONFINITE, verdicts.ERROR, verdicts.XPASS)
TENSOR_HEADERS = ["tensor", "kernel_err", "torch_err", "floor", "ratio", "ulps median/p99", "pattern"]
ENV_ORDER = ("device", "backend", "arch", "driver", "cuda_runtime", "hip_runtime", "torch", "triton",
             "numpy", "python", "platform", "harness", "time_utc", "tier", "implementation", "command")
_REASON_CHARS = 160
_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


# --- values ------------------------------------------------------------------------

def format_ratio(ratio) -> str:
    if ratio is None:
        return "-"
    if math.isnan(ratio) or math.isinf(ratio):
        return str(ratio)
    return f"{ratio:.3g}"


def format_error(value) -> str:
    return "-" if value is None else f"{value:.3e}"


def format_env_value(key: str, value) -> str:
    if key == "harness" and isinstance(value, dict):
        revision = value.get("revision") or "unknown"
        return f"{revision}{' (dirty)' if value.get('dirty') else ' (stated)' if value.get('stated') else ''}"
    if isinstance(value, dict):
        return ", ".join(f"{name}={item}" for name, item in value.items())
    if isinstance(value, list):
        return "; ".join(str(item) for item in value)
    return "-" if value is None else str(value)


def plain(text: str | None) -> str:
    """A recorded message without terminal colour codes (compilers print them)."""
    return _ANSI_ESCAPE.sub("", text or "")


def one_line(text: str | None, limit: int = _REASON_CHARS) -> str:
    """The first line of a (compiler) message, cut to `limit` characters."""
    lines = plain(text).strip().splitlines()
    first = lines[0] if lines else ""
    return first if len(first) <= limit else first[:limit - 1] + "…"


def ordered_ratios(ratios) -> list[float]:
    """Recorded ratios without the missing ones, NaN counting as worst (inf)."""
    return [math.inf if math.isnan(r) else r for r in ratios if r is not None]


def worst(ratios) -> float | None:
    """Largest ratio, NaN counting as worst; None for no ratios."""
    values = ordered_ratios(ratios)
    return max(values) if values else None


def median(ratios) -> float | None:
    """Median of the recorded ratios (NaN counting as inf); None for none."""
    values = ordered_ratios(ratios)
    return statistics.median(values) if values else None


# --- kinds and totals --------------------------------------------------------------

def kind(line: dict) -> str:
    return line.get("kind") or CASE


def kinds_present(lines: list[dict]) -> list[str]:
    """Kinds of the lines: the known ones in KINDS order, then any other in first-seen order."""
    seen = list(dict.fromkeys(kind(line) for line in lines))
    return [name for name in KINDS if name in seen] + [name for name in seen if name not in KINDS]


def of_kind(lines: list[dict], wanted: str) -> list[dict]:
    return [line for line in lines if kind(line) == wanted]


def verdict_totals(lines: list[dict]) -> Counter:
    """Lines per verdict."""
    return Counter(line["verdict"] for line in lines)


def present_verdicts(lines: list[dict]) -> list[str]:
    seen = verdict_totals(lines)
    return [verdict for verdict in verdicts.VERDICTS if verdict == verdicts.PASS or seen[verdict]]


def totals_text(lines: list[dict]) -> str:
    """'264 cases: pass 260, fail 4' (+ probes and compile checks when present)."""
    parts = []
    for name, plural in ((CASE, "cases"), (PROBE, "probes"), (COMPILE, "compile checks")):
        subset = of_kind(lines, name)
        if subset or (name == CASE and not lines):
            totals = verdict_totals(subset)
            counts = ", ".join(f"{v} {totals[v]}" for v in verdicts.VERDICTS if totals[v])
            label = plural if len(subset) != 1 else plural.rstrip("s")
            parts.append(f"{len(subset)} {label}" + (f": {counts}" if counts else ""))
    return "; ".join(parts)


def determinism_text(lines: list[dict], env: dict | None = None) -> str | None:
    """'N forwards launched twice, M differed bitwise' when the run checked determinism; that it
    did not, when env.json says the check was off and the run judged forwards; else None."""
    checked = [line for line in lines if line.get("deterministic") is not None]
    if not checked:
        forwards = any(line.get("direction") == "fwd" for line in of_kind(lines, CASE))
        if forwards and (env or {}).get("checks", {}).get("determinism") is False:
            return ("Determinism: not checked (the check is off by default on the CPU interpreter, which "
                    "runs a kernel's programs one after another; on GPUs it is on, and every forward is "
                    "launched twice).")
        return None
    differing = sum(not line["deterministic"] for line in checked)
    return f"Determinism: {len(checked)} forwards launched twice, {differing} differed bitwise (a `fail` each)."


def totals_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Rows per verdict, a column per kind of line present (and 'all' with several)."""
    kinds = kinds_present(lines) or [CASE]
    per_kind = {name: verdict_totals(of_kind(lines, name)) for name in kinds}
    rows = []
    for verdict in verdicts.VERDICTS:
        counts = [per_kind[name][verdict] for name in kinds]
        rows.append([verdict, *counts, *([sum(counts)] if len(kinds) > 1 else [])])
    headers = ["verdict", *(f"{name}s" if name != COMPILE else "compile" for name in kinds)]
    return headers + (["all"] if len(kinds) > 1 else []), rows


# --- environment -------------------------------------------------------------------

def environment_rows(env: dict, limit: int | None = None) -> list[list[str]]:
    """(field, value) rows of env.json's fingerprint, each value cut to `limit` characters
    where one is given (a table read in a terminal: a command naming many cases would
    otherwise widen every row to its length), saying how long it is and where it is whole."""
    keys = [key for key in ENV_ORDER if key in env]
    keys += [key for key in env if key not in ENV_ORDER
             and key not in ("profile_notes", "capabilities", "machines", "merge_warnings", "timing")]
    return [[key, _cut(format_env_value(key, env[key]), limit)] for key in keys]


def _cut(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters; env.json holds it whole)"


def implementation_table(env: dict, lines: list[dict]) -> tuple[list[str], list[list]]:
    """Per operator judged by something other than the bundled kernels, or declaring
    capabilities, or returning extras: what ran, what it declared (and where), and the
    return conventions seen (conformance.judging.returns) with their case counts."""
    names = env.get("implementation") or {}
    declarations = env.get("capabilities") or {}
    conventions = defaultdict(Counter)
    for line in of_kind(lines, CASE):
        if line.get("return_convention"):
            conventions[line.get("op")][line["return_convention"]] += 1
    rows = []
    for op, name in names.items():
        declared = declarations.get(op) or {}
        if name.startswith(f"{BUNDLED_MODULE}:") and not declared and not conventions.get(op):
            continue
        keys = declared.get("declared") or {}
        text = "; ".join(f"{key}={_declared_value(value)}" for key, value in keys.items() if key != "reasons")
        seen = ", ".join(f"{kind} ({count})" for kind, count in sorted(conventions[op].items()))
        rows.append([op, name, text or "(none: assumed to support every case)", declared.get("source") or "-",
                     seen or "-"])
    return ["op", "implementation", "declared capabilities", "declared in", "return convention (cases)"], rows


def _declared_value(value) -> str:
    return "[" + ", ".join(str(item) for item in value) + "]" if isinstance(value, list) else str(value).lower()


# --- cases -------------------------------------------------------------------------

_GROUP_FIELDS = ("op", "direction", "dtype", "head_dim", "causal")


def _position(values, value) -> int:
    return values.index(value) if value in values else len(values)


def _group_sort_key(key: tuple):
    op, direction, dtype, head_dim, causal = key
    return (str(op), _position(DIRECTIONS, direction), _position(DTYPES, dtype), head_dim or 0, bool(causal))


def group_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Case rows per op x direction x dtype x head dim x causal: verdict counts,
    worst and median of the cases' worst ratios."""
    cases = of_kind(lines, CASE)
    columns = present_verdicts(cases)
    groups = defaultdict(list)
    for line in cases:
        groups[tuple(line.get(name) for name in _GROUP_FIELDS)].append(line)
    rows = []
    for key in sorted(groups, key=_group_sort_key):
        counts = verdict_totals(groups[key])
        op, direction, dtype, head_dim, causal = key
        ratios = [line.get("worst_ratio") for line in groups[key]]
        rows.append([op, direction, dtype, head_dim, "causal" if causal else "noncausal",
                     *(counts[verdict] or "" for verdict in columns),
                     format_ratio(worst(ratios)), format_ratio(median(ratios))])
    return ["op", "dir", "dtype", "D", "mask", *columns, "worst ratio", "median ratio"], rows


def tensor_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Rows per tensor name: cases judged, worst ratio and the case it came from."""
    found = {}
    for line in of_kind(lines, CASE):
        for tensor in line.get("tensors", []):
            ratio = worst([tensor["ratio"]])
            count, worst_ratio, case = found.get(tensor["name"], (0, None, None))
            if worst_ratio is None or ratio > worst_ratio:
                worst_ratio, case = ratio, line["case"]
            found[tensor["name"]] = (count + 1, worst_ratio, case)
    rows = [[name, count, format_ratio(ratio), case] for name, (count, ratio, case) in found.items()]
    return ["tensor", "cases", "worst ratio", "case"], rows


def tensor_rows(line: dict) -> list[list[str]]:
    """One case's errors per tensor (TENSOR_HEADERS)."""
    return [[t["name"], format_error(t.get("kernel_err")), format_error(t.get("torch_err")),
             format_error(t.get("floor")), format_ratio(t.get("ratio")), localized.ulps_text(t),
             localized.pattern_text(t)] for t in line.get("tensors", [])]


def problems(lines: list[dict]) -> list[dict]:
    """Lines that fail the run, fail first, then nonfinite, error, xpass (file order within).

    Probes are not among them: they inform (their own table, and the `backend_fault`
    of the cases they explain); cases and compile checks decide. The exception is an
    xpass probe: its known-issue entry is stale and must go, as a case's would."""
    order = {verdict: index for index, verdict in enumerate(PROBLEM_VERDICTS)}
    deciding = (line for line in lines if line["verdict"] in order
                and (kind(line) != PROBE or line["verdict"] == verdicts.XPASS))
    return sorted(deciding, key=lambda line: order[line["verdict"]])


def known_issue_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Active known issues (the entries lines matched): verdict counts and an example case."""
    issues, counts, examples = {}, defaultdict(Counter), {}
    for line in lines:
        record = line.get("known_issue")
        if record:
            issues.setdefault(record["id"], record)
            counts[record["id"]][line["verdict"]] += 1
            examples.setdefault(record["id"], line["case"])
    rows = [[issue_id, record.get("description", ""), record.get("reason", ""),
             counts[issue_id][verdicts.XFAIL], counts[issue_id][verdicts.XPASS], examples[issue_id]]
            for issue_id, record in issues.items()]
    return ["issue", "description", "reason", "xfail", "xpass", "example case"], rows


def unsupported_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Why lines were unsupported: reason, count, first id."""
    by_reason = defaultdict(list)
    for line in lines:
        if line["verdict"] == verdicts.UNSUPPORTED:
            by_reason[line.get("reason") or "(no reason recorded)"].append(line["case"])
    rows = [[reason, len(ids), ids[0]] for reason, ids in by_reason.items()]
    return ["reason", "count", "first"], rows


# --- probes and compile checks -----------------------------------------------------

def probe_verdict(line: dict) -> str:
    """A probe's verdict, with the known issue that converted it: 'xfail (sm90-fp8-mma-probes)'."""
    issue = line.get("known_issue")
    return f"{line['verdict']} ({issue['id']})" if issue else line["verdict"]


def probe_table(lines: list[dict]) -> tuple[list[str], list[list]]:
    """The primitive probes: id, primitive, verdict (and its known issue), max error against
    tolerance (in `unit`), reason."""
    rows = [[line["case"], line.get("primitive") or "-", probe_verdict(line), format_error(line.get("max_error")),
             format_error(line.get("tolerance")), line.get("unit") or "-", line.get("worked_around") or "",
             one_line(line.get("reason"), 240)]
            for line in of_kind(lines, PROBE)]
    return ["probe", "primitive", "verdict", "max error", "tolerance", "unit", "worked around", "reason"], rows


def probe_reproducers(lines: list[dict]) -> list[str]:
    """The one-line reproducers of the probes that did not pass."""
    return [line["reproduce"] for line in of_kind(lines, PROBE)
            if line["verdict"] not in (verdicts.PASS, verdicts.UNSUPPORTED) and line.get("reproduce")]


def format_config(config) -> str:
    if isinstance(config, dict):
        return " ".join(f"{key}={value}" for key, value in config.items())
    return "-" if config is None else str(config)


def _bytes(value) -> str:
    return "-" if value is None else f"{value:,}"


def compile_tables(lines: list[dict]) -> dict[str, tuple[list[str], list[list]]]:
    """target -> (headers, rows): kernel, config, verdict, registers, spills, shared memory, time."""
    by_target = defaultdict(list)
    for line in of_kind(lines, COMPILE):
        compile_s = line.get("compile_s")
        by_target[line.get("target") or "?"].append(
            [line.get("kernel") or line["case"], line.get("dtype") or "-", line.get("head_dim") or "-",
             format_config(line.get("config")), line["verdict"], _bytes(line.get("registers")),
             _bytes(line.get("spills_bytes")), _bytes(line.get("shared_bytes")),
             _bytes(line.get("shared_limit_bytes")), "-" if compile_s is None else f"{compile_s:.2f}",
             one_line(line.get("reason"))])
    headers = ["kernel", "dtype", "D", "config", "verdict", "registers", "spills B", "shared B", "limit B",
               "compile s", "reason"]
    return {target: (headers, rows) for target, rows in by_target.items()}


def compile_overview(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Per target: compile checks per verdict (the short form for the terminal)."""
    by_target = defaultdict(list)
    for line in of_kind(lines, COMPILE):
        by_target[line.get("target") or "?"].append(line)
    columns = present_verdicts(of_kind(lines, COMPILE))
    rows = [[target, *(verdict_totals(group)[v] or "" for v in columns)] for target, group in by_target.items()]
    return ["target", *columns], rows


# --- pictures ----------------------------------------------------------------------

@dataclass
class HeatCell:
    """The cases of one (dtype, head dim) of one operator and direction."""

    worst: float | None = None
    count: int = 0
    verdicts: Counter = field(default_factory=Counter)


def heatmaps(lines: list[dict]) -> dict[tuple, dict[tuple, HeatCell]]:
    """(op, direction) -> (dtype, head dim) -> HeatCell, in catalog order."""
    maps = defaultdict(lambda: defaultdict(HeatCell))
    for line in of_kind(lines, CASE):
        cell = maps[(line.get("op"), line.get("direction"))][(line.get("dtype"), line.get("head_dim"))]
        cell.worst = worst([cell.worst, line.get("worst_ratio")])
        cell.count += 1
        cell.verdicts[line["verdict"]] += 1
    ordered = sorted(maps, key=lambda key: (str(key[0]), _position(DIRECTIONS, key[1])))
    return {key: dict(maps[key]) for key in ordered}


def ratio_samples(lines: list[dict]) -> dict[str, list[float]]:
    """Tensor name -> every recorded ratio of that tensor (first-seen name order)."""
    samples = defaultdict(list)
    for line in of_kind(lines, CASE):
        for tensor in line.get("tensors", []):
            if tensor.get("ratio") is not None:
                samples[tensor["name"]].append(tensor["ratio"])
    return dict(samples)
