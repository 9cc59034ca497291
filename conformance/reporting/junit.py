"""junit.xml: one testcase per results line, for CI dashboards.

The common JUnit XML format (Ant/Jenkins/Surefire, with properties on suites and
cases as most CI tools read them):

    <testsuites name tests failures errors skipped time>
      <testsuite name="conformance.case" ...>     one suite per kind of line
        <properties> the env.json fingerprint </properties>
        <testcase classname="flash_attention.bwd" name="<case id>" time>
          <properties> verdict, worst_ratio, ratio.<tensor>, ... </properties>
          <failure> | <error> | <skipped>          by verdict, see OUTCOMES
          <system-out> reproducer </system-out>

fail, nonfinite and xpass are failures, error is an error, unsupported and xfail
are skipped (with the reason, or the known issue's id and description). A failing
probe whose fault the kernels work around (`worked_around`) is skipped too, with
that said: like the run's exit code, a dashboard then shows red only for what is
not handled.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import Counter

from tabulate import tabulate

from conformance.judging import verdicts
from conformance.reporting import localized, summary

# verdict -> JUnit child element of the testcase (None: passed).
OUTCOMES = {
    verdicts.PASS: None,
    verdicts.FAIL: "failure",
    verdicts.NONFINITE: "failure",
    verdicts.XPASS: "failure",
    verdicts.ERROR: "error",
    verdicts.UNSUPPORTED: "skipped",
    verdicts.XFAIL: "skipped",
}
# Recorded scalar fields copied into a testcase's properties when present.
_PROPERTY_FIELDS = ("worst_ratio", "backend", "implementation", "backend_fault", "max_error", "tolerance",
                    "target", "registers", "spills_bytes", "shared_bytes", "shared_limit_bytes", "compile_s")
# XML 1.0 forbids these characters (compiler messages carry ANSI escapes).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(value) -> str:
    return _NOT_XML.sub("", "" if value is None else str(value))


def _properties(parent: ET.Element, pairs) -> None:
    element = ET.SubElement(parent, "properties")
    for name, value in pairs:
        ET.SubElement(element, "property", name=_text(name), value=_text(value))


def _case_properties(line: dict) -> list[tuple[str, object]]:
    pairs = [("verdict", line["verdict"])]
    pairs += [(name, line[name]) for name in _PROPERTY_FIELDS if line.get(name) is not None]
    pairs += [(f"ratio.{tensor['name']}", tensor.get("ratio")) for tensor in line.get("tensors", [])]
    if line.get("known_issue"):
        pairs.append(("known_issue", line["known_issue"]["id"]))
    return pairs


def _details(line: dict) -> str:
    parts = [summary.plain(line.get("reason")) or line["verdict"]]
    if line.get("backend_fault"):
        parts.append(line["backend_fault"])
    if line.get("tensors"):
        parts.append(tabulate(summary.tensor_rows(line), headers=summary.TENSOR_HEADERS, disable_numparse=True))
    parts += localized.where_lines(line)
    if line.get("traceback"):
        parts.append(summary.plain(line["traceback"]))
    if line.get("reproduce"):
        parts.append(f"reproduce: {line['reproduce']}")
    return "\n".join(parts)


def _outcome(line: dict) -> str | None:
    """The JUnit element of a line's verdict (None: passed); an unknown verdict is not a pass."""
    if line.get("worked_around") and line["verdict"] in (verdicts.FAIL, verdicts.ERROR):
        return "skipped"
    return OUTCOMES.get(line["verdict"], "error")


def _skip_message(line: dict) -> str:
    issue = line.get("known_issue")
    if line["verdict"] == verdicts.XFAIL and issue:
        return f"known issue {issue['id']}: {issue.get('description', '')} ({line.get('reason', '')})"
    if line.get("worked_around"):
        return f"{line['verdict']}, worked around by the kernels ({line['worked_around']}): {line.get('reason', '')}"
    return line.get("reason") or line["verdict"]


def _testcase(suite: ET.Element, line: dict) -> None:
    case = ET.SubElement(suite, "testcase", classname=_text(line["case"].split("[")[0]), name=_text(line["case"]),
                         time=f"{line.get('duration_s') or line.get('compile_s') or 0:.4f}")
    _properties(case, _case_properties(line))
    outcome = _outcome(line)
    if outcome == "skipped":
        ET.SubElement(case, "skipped", message=_text(_skip_message(line)))
    elif outcome is not None:
        element = ET.SubElement(case, outcome, message=_text(summary.one_line(line.get("reason"), 400)),
                                type=_text(line["verdict"]))
        element.text = _text(_details(line))
    if line.get("reproduce"):
        ET.SubElement(case, "system-out").text = _text(line["reproduce"])


def _counts(lines: list[dict]) -> dict[str, str]:
    outcomes = Counter(_outcome(line) for line in lines)
    seconds = sum(line.get("duration_s") or line.get("compile_s") or 0 for line in lines)
    return {"tests": str(len(lines)), "failures": str(outcomes["failure"]), "errors": str(outcomes["error"]),
            "skipped": str(outcomes["skipped"]), "time": f"{seconds:.4f}"}


def render(env: dict, lines: list[dict]) -> str:
    """The whole JUnit XML document of one run."""
    root = ET.Element("testsuites", name="fa-conformance", **_counts(lines))
    timestamp = str(env.get("time_utc") or "").removesuffix("Z")
    for index, name in enumerate(summary.kinds_present(lines)):
        subset = summary.of_kind(lines, name)
        suite = ET.SubElement(root, "testsuite", name=f"conformance.{name}", id=str(index),
                              **_counts(subset), **({"timestamp": timestamp} if timestamp else {}))
        _properties(suite, summary.environment_rows(env))
        for line in subset:
            _testcase(suite, line)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
