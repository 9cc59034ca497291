"""The kill table: mutants.jsonl (one line per mutant, appended as each hunt ends)
and mutants.md rendered from it and env.json alone."""

from __future__ import annotations

from pathlib import Path

from tabulate import tabulate

from conformance.cases.catalog import Case
from conformance.diagnosing import shrinking
from conformance.judging import verdicts
from conformance.reporting.markdown import table
from conformance.reporting.report import format_ratio
from conformance.running.results import JsonLinesWriter, read_env, read_json_lines

MUTANTS_FILE = "mutants.jsonl"
TABLE_FILE = "mutants.md"
_ENV_FIELDS = ("device", "backend", "torch", "triton", "harness", "time_utc", "command")
_RESULT_WORDS = {verdicts.PASS: "killed", verdicts.FAIL: "SURVIVED", verdicts.ERROR: "BROKEN",
                 verdicts.UNSUPPORTED: "survived, unreachable here"}


def mutants_writer(out_dir: str | Path) -> JsonLinesWriter:
    """Appends mutant lines to DIR/mutants.jsonl, durable as each is written."""
    return JsonLinesWriter(Path(out_dir) / MUTANTS_FILE)


def read_mutant_lines(out_dir: str | Path) -> list[dict]:
    return read_json_lines(Path(out_dir) / MUTANTS_FILE)


def result_text(line: dict) -> str:
    """killed / SURVIVED / BROKEN / unreachable here (the reason says why)."""
    return _RESULT_WORDS.get(line["verdict"], line["verdict"])


def kill_text(kill: dict) -> str:
    """`case id` (verdict: tensor ratio, ...), or for a case with no tensor judged (an error:
    a crash, a hang, an exception) (verdict: the start of its reason)."""
    detail = ", ".join(f"{t['name']} {format_ratio(t['ratio'])}" for t in kill["tensors"])
    if not detail and kill.get("reason"):
        reason = kill["reason"].splitlines()[0]
        detail = reason if len(reason) <= 80 else reason[:77] + "..."
    return f"`{kill['case']}` ({kill['verdict']}{': ' + detail if detail else ''})"


def _cases_run(line: dict) -> str:
    return ", ".join(f"{tier} {count}" for tier, count in line["cases_run"].items()) or "-"


def totals_text(lines: list[dict]) -> str:
    counts = {word: sum(1 for line in lines if line["verdict"] == verdict)
              for verdict, word in ((verdicts.PASS, "killed"), (verdicts.FAIL, "survived"),
                                    (verdicts.UNSUPPORTED, "not reachable on this backend"),
                                    (verdicts.ERROR, "broken"))}
    return f"{len(lines)} mutants: " + ", ".join(f"{word} {count}" for word, count in counts.items() if count)


def table_rows(lines: list[dict], kills_per_row: int | None = None, separator: str = "<br>") -> list[list]:
    rows = []
    for line in lines:
        kills = line["kills"] if kills_per_row is None else line["kills"][:kills_per_row]
        more = len(line["kills"]) - len(kills)
        killed_by = separator.join(kill_text(kill) for kill in kills) + (f" (+{more} more)" if more else "")
        rows.append([line["mutant"], line["fault"], result_text(line), line["tier"] or "-",
                     _cases_run(line), killed_by or line["reason"] or "-"])
    return rows


HEADERS = ["mutant", "fault class", "result", "killed in tier", "cases run", "killed by (case: tensor ratios)"]


LOCALIZED_HEADERS = ["mutant", "fault class", "pattern (tensor: from the largest kill)", "evidence",
                     "shrunk to (smallest case that still kills)"]


def _largest_diagnosed(kills: list[dict]) -> dict:
    """The kill whose case is largest among those given a pattern: a pattern needs room to
    show (at Sq = 2 every fault is in "the last rows")."""
    diagnosed = [kill for kill in kills if kill.get("fault_pattern")
                 and not kill["fault_pattern"].endswith("unclassified")] or kills
    return max(diagnosed, key=lambda kill: shrinking.cost(Case.from_id(kill["case"])))


def localized_rows(lines: list[dict]) -> list[list]:
    """mutant -> the fault pattern its first kill was localized to -> the shrunk case."""
    rows = []
    for line in lines:
        if not line["kills"]:
            continue
        kill = _largest_diagnosed(line["kills"])
        named = [t for t in kill["tensors"] if t.get("pattern")]
        best = next((t for t in named if f"{t['name']}: {t['pattern']}" == kill.get("fault_pattern")), None)
        shrunk = line.get("shrunk")
        rows.append([line["mutant"], line["fault"], kill.get("fault_pattern") or "-",
                     best["evidence"] if best else "-",
                     f"`{shrunk['case']}`" + ("" if shrunk.get("complete", True) else " (budget spent)")
                     if shrunk and "case" in shrunk else (shrunk or {}).get("note", "-")])
    return rows


def markdown(env: dict, lines: list[dict]) -> str:
    env_rows = [[key, str(env[key].get("revision") if isinstance(env[key], dict) else env[key])]
                for key in _ENV_FIELDS if env.get(key) is not None]
    parts = [
        "# Mutant kill table", "",
        f"{totals_text(lines)}. A mutant is killed when a case ends fail, nonfinite or error; "
        "tiers are climbed from smoke, in pairwise-coverage order within each (mutants/ordering.py).", "",
        table(HEADERS, table_rows(lines)), "",  # `|` escaped: fault classes mention |distance|
        *(["## Where each kill fails (conformance.diagnosing)", "", table(LOCALIZED_HEADERS, localized_rows(lines)), ""]
          if localized_rows(lines) else []),
        "## Environment", "",
        table(["field", "value"], env_rows), "",
        "Re-run one killing case: the `reproduce` command of its kill in mutants.jsonl.", "",
    ]
    return "\n".join(parts)


def terminal(lines: list[dict]) -> str:
    rows = table_rows(lines, kills_per_row=1, separator="; ")
    text = tabulate(rows, headers=HEADERS, tablefmt="simple", disable_numparse=True,
                    maxcolwidths=[None, 36, 12, None, 12, 64])
    return f"{text}\n\n{totals_text(lines)}\n"


def write_table(out_dir: str | Path) -> Path:
    """Render DIR/mutants.md from DIR/mutants.jsonl and DIR/env.json."""
    path = Path(out_dir) / TABLE_FILE
    path.write_text(markdown(read_env(out_dir), read_mutant_lines(out_dir)), encoding="utf-8")
    return path
