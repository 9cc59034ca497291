"""The HTML and JUnit XML reports, and `python -m conformance report --format`,
on the recorded run folders of tests/data."""

import math
import re
import xml.etree.ElementTree as ET
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conformance.cli import main
from conformance.reporting import html, junit, pictures
from conformance.running.results import read_env, read_results

DATA = Path(__file__).parent / "data"
FIXTURE = DATA / "report_run"
H100 = DATA / "h100_sample"


def rendered(fmt, folder=FIXTURE):
    return {"html": html.render, "junit": junit.render}[fmt](read_env(folder), read_results(folder))


# --- JUnit XML ---------------------------------------------------------------------

# The common JUnit XML format (Ant/Jenkins/Surefire with properties on suites and
# cases): allowed children per element, and which attributes are required.
CHILDREN = {
    "testsuites": {"testsuite"},
    "testsuite": {"properties", "testcase", "system-out", "system-err"},
    "testcase": {"properties", "skipped", "error", "failure", "system-out", "system-err"},
    "properties": {"property"},
}
REQUIRED = {"testsuite": {"name", "tests"}, "testcase": {"name", "classname"}, "property": {"name", "value"}}
COUNTED = ("tests", "failures", "errors", "skipped")


def assert_common_junit_schema(element):
    allowed = CHILDREN.get(element.tag, set())
    assert {child.tag for child in element} <= allowed, element.tag
    assert REQUIRED.get(element.tag, set()) <= set(element.attrib), element.tag
    if element.tag in ("testsuite", "testcase"):
        assert [child.tag for child in element].count("properties") <= 1
    if element.tag == "testcase":
        float(element.get("time"))
        assert sum(child.tag in ("skipped", "error", "failure") for child in element) <= 1
    for child in element:
        assert_common_junit_schema(child)


def outcome_counts(cases):
    tags = [next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), None)
            for case in cases]
    return {"tests": len(cases), "failures": tags.count("failure"), "errors": tags.count("error"),
            "skipped": tags.count("skipped")}


@pytest.mark.parametrize("folder", [FIXTURE, H100])
def test_junit_parses_and_follows_the_common_schema(folder):
    root = ET.fromstring(rendered("junit", folder))
    assert root.tag == "testsuites"
    assert_common_junit_schema(root)
    cases = root.findall("testsuite/testcase")
    assert len(cases) == len(read_results(folder))
    for element, members in [(root, cases), *((suite, suite.findall("testcase")) for suite in root)]:
        assert {name: int(element.get(name)) for name in COUNTED} == outcome_counts(members)


def test_junit_outcome_per_verdict():
    root = ET.fromstring(rendered("junit"))
    by_name = {case.get("name"): case for case in root.iter("testcase")}
    outcomes = {line["case"]: next((c.tag for c in by_name[line["case"]] if c.tag != "properties"
                                    and c.tag != "system-out"), "passed") for line in read_results(FIXTURE)}
    expected = {"pass": "passed", "fail": "failure", "nonfinite": "failure", "xpass": "failure", "error": "error",
                "unsupported": "skipped", "xfail": "skipped"}
    assert all(outcomes[line["case"]] == expected[line["verdict"]] for line in read_results(FIXTURE))
    assert [suite.get("name") for suite in root] == ["conformance.case", "conformance.probe", "conformance.compile"]


def test_junit_carries_ratios_reasons_and_known_issues():
    root = ET.fromstring(rendered("junit"))
    by_name = {case.get("name"): case for case in root.iter("testcase")}
    failing = by_name["flash_attention.bwd[bf16,d128,causal,B2,H8,Hkv2,Sq509,Sk1024,seed0]"]
    properties = {p.get("name"): p.get("value") for p in failing.iter("property")}
    recorded = next(line for line in read_results(FIXTURE) if line["case"] == failing.get("name"))
    assert float(properties["ratio.dk"]) == recorded["tensors"][1]["ratio"]  # the recorded value, unrounded
    assert properties["backend_fault"] == "likely backend fault: bf16 tl.dot"
    failure = failing.find("failure")
    assert failure.get("type") == "fail" and "dk ratio 2.72 > 2" in failure.get("message")
    assert "reproduce: python -m conformance run --case" in failure.text
    xfail = by_name["flash_attention.bwd[bf16,d16,noncausal,B2,H8,Hkv8,Sq128,Sk128,seed0]"].find("skipped")
    assert xfail.get("message").startswith("known issue sm90-bf16-d16-dkdv: bf16 dK/dV at head_dim 16")
    nonfinite = by_name["flash_attention.fwd[bf16,d128,noncausal,B1,H16,Hkv16,Sq2048,Sk2048,seed0]"]
    assert {p.get("name"): p.get("value") for p in nonfinite.iter("property")}["ratio.out"] == "inf"
    suite_properties = {p.get("name"): p.get("value") for p in root.find("testsuite/properties")}
    assert suite_properties["device"] == "NVIDIA H100 80GB HBM3" and suite_properties["triton"] == "3.6.0"


def test_junit_skips_a_failing_probe_the_kernels_work_around():
    lines = read_results(FIXTURE)
    worked_around = [dict(line, worked_around="interpreter_bf16_dot") if line["case"] == "probe.dot[bf16]" else line
                     for line in lines]
    suite = ET.fromstring(junit.render(read_env(FIXTURE), worked_around)).find("testsuite[@name='conformance.probe']")
    assert (suite.get("failures"), suite.get("skipped")) == ("0", "1")
    message = suite.find("testcase[@name='probe.dot[bf16]']/skipped").get("message")
    assert message.startswith("fail, worked around by the kernels (interpreter_bf16_dot): 16x16 tl.dot")


def test_junit_strips_characters_xml_forbids():
    text = rendered("junit")
    assert "\x1b" not in text
    error = next(case for case in ET.fromstring(text).iter("testcase")
                 if case.get("name").startswith("compile.fwd[hip"))
    assert error.find("error").get("message") == "CompilationError: at 12:4: unsupported layout conversion"


# --- HTML --------------------------------------------------------------------------

class _Collector(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.references, self.open = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.references += [value for name, value in attrs if name in ("src", "href", "xlink:href") and value]
        if tag not in ("meta", "br"):  # the void elements the reports use
            self.open.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open.pop() == tag, f"unbalanced </{tag}>"


@pytest.mark.parametrize("folder", [FIXTURE, H100])
def test_html_is_self_contained_and_well_formed(folder):
    text = rendered("html", folder)
    assert not re.search(r"https?:", text)
    collector = _Collector()
    collector.feed(text)
    assert collector.references == [] and "script" not in collector.tags and collector.open == []
    assert text.startswith("<!DOCTYPE html>") and "<style>" in text


def test_html_order_and_badges_of_the_deciding_lines():
    text = rendered("html")
    assert text.index("<h2>Primitive probes</h2>") < text.index("<h2>Not passing") < text.index("<h2>Worst ratio by")
    assert text.index("<h2>Worst ratio by") < text.index("<h2>Environment</h2>")
    # badges count cases and compile checks; the failing probe is in the probe table only
    assert '<span class="badge b-fail">fail 2</span>' in text and '<span class="badge b-pass">pass 4</span>' in text


def test_html_heat_map_marks_the_bound():
    text = rendered("html")
    assert '<h3>flash_attention · bwd</h3>' in text and '<h3>flash_attention · fwd</h3>' in text
    # over the bound: bwd bf16 d16 (xfail, 3.14), bwd bf16 d128 (2.72), fwd bf16 d128 (nonfinite, inf)
    assert text.count('class="hm hm-over"') == 3
    assert text.count(f"background:{pictures.NONFINITE_COLOUR}") == 1
    assert "bound 2" in text


def test_html_ratio_distribution_per_tensor():
    text = rendered("html", H100)
    for name in ("out", "lse", "dq", "dk", "dv"):
        assert f'aria-label="histogram of {name} ratios"' in text
    counts = sum(1 for line in read_results(H100) for tensor in line["tensors"] if tensor["name"] == "out")
    assert f"out: {counts} ratios, worst 1.81" in text


def test_colour_scale_is_centred_on_the_bound():
    assert pictures.colour(2.0) == "#f7f7f7"  # white exactly at the bound
    below, above = pictures.colour(1.0), pictures.colour(4.0)
    assert int(below[5:7], 16) > int(below[1:3], 16)  # bluish under the bound
    assert int(above[1:3], 16) > int(above[5:7], 16)  # reddish over it
    assert pictures.colour(math.inf) == pictures.colour(math.nan) == pictures.NONFINITE_COLOUR
    assert pictures.colour(None) == "#e0e0e0"


def test_histogram_bins_put_the_bound_in_the_last_passing_bin():
    ratios = [0.0, 2.0, 2.0001, math.inf]
    indices = [pictures._bin_index(r) for r in ratios]
    assert indices[0] == 0 and indices[3] == len(pictures.BIN_RANGE) - 1
    assert pictures.BIN_RANGE[indices[1]] == pictures.BINS_PER_OCTAVE  # (2^0.75, 2]
    assert indices[2] == indices[1] + 1


def test_the_pictures_bound_is_the_rule_bound():
    from conformance.judging.rule import BOUND

    assert pictures.BOUND == BOUND


# --- the command -------------------------------------------------------------------

@pytest.mark.parametrize("fmt, marker", [("terminal", "Conformance on cuda:sm_90"),
                                         ("markdown", "# Conformance report"), ("html", "<!DOCTYPE html>"),
                                         ("junit", '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites'),
                                         ("jsonl", '{"case": "probe.dot[fp16]"')])
def test_report_format_prints_one_format_and_writes_nothing(capsys, fmt, marker):
    before = sorted(path.name for path in FIXTURE.iterdir())
    assert main(["report", str(FIXTURE), "--format", fmt]) == 0
    assert capsys.readouterr().out.startswith(marker)
    assert sorted(path.name for path in FIXTURE.iterdir()) == before


def test_report_output_file_and_usage_errors(tmp_path, capsys):
    assert main(["report", str(FIXTURE), "--format", "junit", "--output", str(tmp_path / "j.xml")]) == 0
    ET.parse(tmp_path / "j.xml")
    assert main(["report", str(FIXTURE), "--output", str(tmp_path / "x")]) == 2
    assert main(["report", str(tmp_path)]) == 2
    assert "no results.jsonl" in capsys.readouterr().err
