"""The compile-only tier's tables: per target, in the terminal and in compile.md.

Built from the run folder's lines only; the per-kernel tables are the shared
report's (conformance.reporting), this module adds the per-target overview with
compile times and the run's notes.
"""

from __future__ import annotations

from collections import defaultdict

from conformance.judging import verdicts
from conformance.reporting import markdown, summary, terminal

JUDGED = ("pass: compiled within the target's limits; fail: shared memory over what a block may use, or "
          "more registers per thread than a block of that many warps can have; error: the compiler raised "
          "or died; unsupported: a sweep's configuration that cannot launch on the target, or a target the "
          "installed triton cannot compile for. Spills are reported, not failed; the vector spills column "
          "counts the checks that spilled vector registers to scratch (of fp16/bf16: those of half-precision "
          "inputs).")
HALF_PRECISION = ("fp16", "bf16")


def vector_spill(line: dict) -> bool:
    """The check spilled vector registers to scratch: any scratch on NVIDIA (ptxas spills
    registers to local memory), on AMD where the compiler counts spilled VGPRs (scratch that
    holds only scalar registers is cheap, see resources.py), or scratch it does not explain."""
    spilled = line.get("spilled_registers")
    if not line.get("spills_bytes"):
        return False
    return spilled is None or bool(spilled.get("vgpr"))


def overview(lines: list[dict]) -> tuple[list[str], list[list]]:
    """Per target: checks per verdict, total and slowest compile time, vector spills."""
    by_target = defaultdict(list)
    for line in summary.of_kind(lines, summary.COMPILE):
        by_target[line["target"]].append(line)
    columns = [verdicts.PASS, verdicts.FAIL, verdicts.ERROR, verdicts.UNSUPPORTED]
    rows = []
    for target, group in by_target.items():
        counts = summary.verdict_totals(group)
        timed = [line for line in group if line.get("compile_s") is not None]
        slowest = max(timed, key=lambda line: line["compile_s"], default=None)
        spilled = [line for line in group if vector_spill(line)]
        half = [line for line in spilled if line.get("dtype") in HALF_PRECISION]
        rows.append([target, len(group), *(counts[verdict] for verdict in columns),
                     f"{sum(line['compile_s'] for line in timed):.1f}",
                     "-" if slowest is None else f"{slowest['compile_s']:.1f} ({slowest['case']})",
                     len(spilled), len(half)])
    return ["target", "checks", *columns, "compile s (sum)", "slowest s", "vector spills", "of fp16/bf16"], rows


def refused_targets(lines: list[dict]) -> list[dict]:
    """The lines of targets the installed triton cannot compile for (tier.target_line)."""
    return [line for line in summary.of_kind(lines, summary.COMPILE) if line.get("kernel") == "target"]


def _header(env: dict, lines: list[dict]) -> str:
    return (f"{summary.totals_text(lines)} for {', '.join(env.get('targets') or [])} "
            f"(scope {env.get('scope')}, triton {env.get('triton')}, {env.get('wall_s')} s wall).")


def render_terminal(env: dict, lines: list[dict]) -> str:
    out = [_header(env, lines), "", terminal.grid(*overview(lines))]
    for target, (headers, rows) in summary.compile_tables(lines).items():
        out += ["", f"{target}:", terminal.grid(headers, rows)]
    out += [f"note: {note}" for note in env.get("compile_notes") or []]
    out += [f"UNSUPPORTED {line['target']}: {line['reason']}" for line in refused_targets(lines)
            if line["verdict"] == verdicts.UNSUPPORTED]  # an error is among the problems below
    # what fails the run last, so it is what stays on screen
    out += [f"{line['verdict'].upper():6s} {line['case']}: {summary.one_line(line.get('reason'), 300)}"
            for line in summary.problems(lines)]
    return "\n".join(out)


def render_markdown(env: dict, lines: list[dict]) -> str:
    parts = ["# Compile-only checks", "", _header(env, lines), "", JUDGED, ""]
    parts += markdown.environment_section(env)
    parts += ["## Per target", "", markdown.table(*overview(lines)), ""]
    parts += markdown.compile_section(lines)
    notes = [*(env.get("compile_notes") or []),
             *(f"{line['target']}: {line['verdict']}, {line['reason']}" for line in refused_targets(lines))]
    if notes:
        parts += ["## Notes", "", *(f"* {note}" for note in notes), ""]
    return "\n".join(parts).rstrip() + "\n"
