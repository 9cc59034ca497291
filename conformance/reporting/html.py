"""report.html: one self-contained file (inline CSS and SVG, nothing fetched).

The same content as summary.md, plus the pictures of `pictures`: a heat map of
the worst ratio per operator and direction, and the ratio distribution.
"""

from __future__ import annotations

from html import escape

from conformance.judging import verdicts
from conformance.reporting import compile_time, declared, time_breakdown
from conformance.reporting import configurations, devices, localized, markdown, merge, pictures, summary
from conformance.reporting.diff import MARKERS

# A cell starting with a matrix marker (regression, fix, ...) is shaded by it.
_MARK_CLASSES = {marker: f"m-{change}" for change, marker in MARKERS.items()}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#111;margin:0;background:#fafafa}
main{max-width:1320px;margin:0 auto;padding:18px 28px 60px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:19px;margin:30px 0 8px;border-bottom:1px solid #ccc;padding-bottom:3px}
h3{font-size:15px;margin:16px 0 6px}
table{border-collapse:collapse;margin:6px 0 10px;background:#fff}
th,td{border:1px solid #d0d0d0;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f0f0f0;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
code,.mono,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:12.5px}
pre{background:#f4f4f4;border:1px solid #ddd;padding:8px;overflow-x:auto;white-space:pre-wrap}
.totals{font-size:16px;margin:4px 0 2px}.note{color:#555;font-size:12.5px;margin:4px 0}
.v-pass{color:#1a7f37}.v-fail,.v-nonfinite,.v-error,.v-xpass{color:#b2182b;font-weight:700}
.v-xfail,.v-unsupported{color:#8a6d00}
.badge{display:inline-block;border-radius:10px;padding:1px 9px;margin-right:6px;color:#fff;font-weight:600}
.b-pass{background:#1a7f37}.b-fail,.b-nonfinite,.b-error,.b-xpass{background:#b2182b}
.b-xfail,.b-unsupported{background:#9a7b00}
.problem{background:#fff;border:1px solid #e3b8bd;border-left:5px solid #b2182b;padding:6px 14px;margin:10px 0}
.fault{color:#7a0019;font-weight:700}.reason{white-space:pre-wrap}
.heatmaps{display:flex;flex-wrap:wrap;gap:10px 34px;align-items:flex-start}
.hm-table td{text-align:center;min-width:62px;padding:5px 6px;border:1px solid #fff}
.hm-table td.hm-over{outline:3px solid #67000d;outline-offset:-3px}
.hm-table td.hm-empty{background:#fafafa;color:#bbb}.hm-table td.hm-none{background:#e0e0e0;color:#555;font-size:12px}
.hm-table th{text-align:center}
.legend svg text,.hist text{font-size:11px;fill:#333}
.hist text.title{font-size:12.5px;font-weight:600;fill:#111}.hist text.bound{fill:#000}
.hist text.count{font-size:9px;text-anchor:middle}
.hist-box{display:inline-block;margin:4px 18px 8px 0;background:#fff;border:1px solid #e4e4e4;padding:4px}
details>summary{cursor:pointer;font-weight:600;margin:6px 0}
td.m-regression{background:#fbd5d5}td.m-fixed{background:#d6f0dc}td.m-changed{background:#fff1c2}
td.m-drift{background:#e6ecf7}
"""


def table(headers, rows, mono: tuple[str, ...] = (), numeric: bool = True) -> str:
    """An HTML table; verdict cells coloured, `mono` columns in monospace, numbers
    right-aligned (unless not `numeric`)."""
    mono_columns = {index for index, name in enumerate(headers) if name in mono}
    head = "".join(f"<th>{escape(str(name))}</th>" for name in headers)
    body = "".join("<tr>" + "".join(_cell(value, index in mono_columns, numeric) for index, value in enumerate(row))
                   + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(value, mono: bool, numeric: bool) -> str:
    text = str(value)
    words = text.split()
    marker = words.pop(0) if words and words[0][:1] in _MARK_CLASSES else ""
    classes = [_MARK_CLASSES[marker[:1]]] if marker else []
    if words and words[0] in verdicts.VERDICTS:
        classes.append(f"v-{words[0]}")
    elif mono:
        classes.append("mono")
    elif numeric and (isinstance(value, int) or text in ("inf", "-inf", "nan")
                      or text.replace(".", "", 1).replace("e-", "").replace("e+", "").isdigit()):
        classes.append("num")
    return f'<td class="{" ".join(classes)}">{escape(text)}</td>' if classes else f"<td>{escape(text)}</td>"


def section(title: str, *body: str) -> str:
    return f"<section><h2>{escape(title)}</h2>{''.join(body)}</section>"


def _badges(lines: list[dict]) -> str:
    """Verdict counts of the lines that decide the run (not the probes)."""
    totals = summary.verdict_totals(line for line in lines if summary.kind(line) != summary.PROBE)
    return "".join(f'<span class="badge b-{v}">{v} {totals[v]}</span>' for v in verdicts.VERDICTS if totals[v])


def _environment(env: dict) -> str:
    rows = summary.environment_rows(env)
    notes = "".join(f"<li>{escape(note)}</li>" for note in env.get("profile_notes") or [])
    body = table(["field", "value"], rows, numeric=False) if rows else "<p>(no env.json)</p>"
    headers, machines = merge.machine_table(env)
    merged = f"<p>Merged from these runs:</p>{table(headers, machines, mono=('folder',))}" if machines else ""
    return section("Environment", body, f"<p>Backend notes:</p><ul>{notes}</ul>" if notes else "", merged)


def _problem(line: dict) -> str:
    parts = [f'<h3><span class="badge b-{escape(line["verdict"])}">{escape(line["verdict"])}</span>'
             f'<code>{escape(line["case"])}</code></h3>']
    if line.get("reason"):
        parts.append(f'<p class="reason">{escape(summary.plain(line["reason"]))}</p>')
    if line.get("backend_fault"):
        parts.append(f'<p class="fault">{escape(line["backend_fault"])}</p>')
    if line.get("tensors"):
        parts.append(table(summary.TENSOR_HEADERS, summary.tensor_rows(line)))
    where = localized.where_lines(line)
    if where:
        parts.append(f'<pre class="where">{escape(chr(10).join(where))}</pre>')
        parts += [localized.strip_svg(tensor) for tensor in line["tensors"] if tensor.get("where")]
    if line.get("traceback"):
        traceback = escape(summary.plain(line["traceback"]))
        parts.append(f"<details><summary>traceback</summary><pre>{traceback}</pre></details>")
    if line.get("reproduce"):
        parts.append(f"<p>Reproduce: <code>{escape(line['reproduce'])}</code></p>")
    return f'<div class="problem">{"".join(parts)}</div>'


def _problems(lines: list[dict]) -> str:
    found = summary.problems(lines)
    body = "".join(_problem(line) for line in found) if found else "<p>None.</p>"
    return section("Not passing (fail, nonfinite, error, xpass)", body)


def _probes(lines: list[dict]) -> str:
    headers, rows = summary.probe_table(lines)
    if not rows:
        return ""
    reproducers = "".join(f"<li><code>{escape(command)}</code></li>" for command in summary.probe_reproducers(lines))
    return section("Primitive probes", f"<p class='note'>{escape(markdown.PROBES_TEXT)}</p>",
                    table(headers, rows, ("reason",)),
                    f"<p>Reproduce:</p><ul>{reproducers}</ul>" if reproducers else "")


def _pictures(lines: list[dict]) -> str:
    maps = summary.heatmaps(lines)
    if not maps:
        return ""
    heat = "".join(pictures.heatmap(op, direction, cells) for (op, direction), cells in maps.items())
    samples = summary.ratio_samples(lines)
    out = section("Worst ratio by dtype and head dim", pictures.legend(), f'<div class="heatmaps">{heat}</div>')
    if samples:
        out += section("Ratio distribution per tensor", pictures.distribution(samples))
    return out


def _optional(title: str, headers, rows, mono=()) -> str:
    return section(title, table(headers, rows, mono)) if rows else ""


def _compile(lines: list[dict]) -> str:
    tables = summary.compile_tables(lines)
    if not tables:
        return ""
    blocks = []
    for target, (headers, rows) in tables.items():
        counts = summary.verdict_totals(line for line in summary.of_kind(lines, summary.COMPILE)
                                        if (line.get("target") or "?") == target)
        label = ", ".join(f"{verdict} {count}" for verdict, count in counts.items())
        blocks.append(f"<details open><summary>{escape(target)}: {escape(label)}</summary>"
                      f"{table(headers, rows, mono=('config', 'reason'))}</details>")
    return section("Compile-only checks", *blocks)


_HEADER_FIELDS = ("device", "backend", "triton", "torch", "harness", "time_utc")


def _header(env: dict, lines: list[dict], title: str) -> str:
    fingerprint = " · ".join(f"{key} {summary.format_env_value(key, env[key])}"
                             for key in _HEADER_FIELDS if key in env)
    implementation = env.get("implementation")
    determinism = summary.determinism_text(lines, env)
    return (f"<h1>{escape(title)}</h1><p class='totals'>{_badges(lines)}</p>"
            f"<p>{escape(markdown.headline(lines))}</p>"
            + (f"<p>{escape(determinism)}</p>" if determinism else "")
            + "".join(f"<p>Judged as declared: {escape(sentence)}</p>" for sentence in declared.convention_sentences(lines))
            + f"<p class='note'>{escape(fingerprint)} (full fingerprint at the end)</p>"
            + (f"<p>Implementation: {escape(summary.format_env_value('implementation', implementation))}</p>"
               if implementation else ""))


def render(env: dict, lines: list[dict]) -> str:
    """The whole HTML report of one run: the probes and what fails first, then the
    pictures, the tables, and the full environment fingerprint last."""
    title = f"Conformance report: {env.get('backend', '?')} ({env.get('device', '?')})"
    warnings = "".join(f"<p class='reason'><strong>Merge warning:</strong> {escape(w)}</p>"
                       for w in env.get("merge_warnings") or [])
    body = [_header(env, lines, title) + warnings,
            _optional("Implementations", *summary.implementation_table(env, lines), mono=("implementation",)),
            _optional("Cases per GPU", *devices.gpu_table(env, lines), mono=("UUID",)),
            _optional(compile_time.TITLE, *compile_time.compile_time_table(lines), mono=("implementation",)),
            _probes(lines), _problems(lines), _pictures(lines),
            section("Totals", table(*summary.totals_table(lines))),
            _optional("Known issues", *summary.known_issue_table(lines), mono=("example case",))]
    if summary.of_kind(lines, summary.CASE):
        body += [section("By operator, direction, dtype, head dim and mask", table(*summary.group_table(lines))),
                 _optional("Worst ratio per tensor", *summary.tensor_table(lines), mono=("case",))]
    body += [_optional("Launch configurations per kernel", *configurations.kernel_totals(lines)),
             _optional("Launch configurations", *configurations.configuration_table(lines),
                       mono=("configuration", "first failure / why not run")),
             _compile(lines), _optional("Unsupported", *summary.unsupported_table(lines), mono=("first",)),
             _optional(time_breakdown.TITLE, *time_breakdown.phase_table(env, lines)), _environment(env)]
    return page(title, body)


def page(title: str, body: list[str]) -> str:
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<style>{_CSS}</style></head><body><main>{''.join(body)}</main></body></html>\n")
