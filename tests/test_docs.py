"""The guide's promises: a short README whose links land, pages that say what the code does,
and generated pages that cover everything they claim to (the build itself, strict, is
`nox -s docs`, which `nox -s tests` runs after the tests)."""

import argparse
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import cli_reference  # noqa: E402
import reports_index  # noqa: E402

README_MAX_LINES = 200


def _links(markdown: str) -> list[str]:
    return re.findall(r"\]\(([^)\s]+)\)", markdown)


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= README_MAX_LINES


def test_every_relative_link_of_the_readme_lands():
    # The README is read on GitHub and is the site's home page: its links must hold in both.
    for link in _links((ROOT / "README.md").read_text()):
        if "://" in link:
            continue
        target = link.split("#", 1)[0]
        assert target.startswith("docs/"), f"{link}: the README links into the guide only"
        assert (ROOT / target).exists(), f"README links to {link}, which does not exist"


def test_every_written_page_is_in_the_nav():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")
             if "hooks" not in p.parts]
    assert pages and all(page in nav for page in pages), [page for page in pages if page not in nav]


def test_the_tier_table_counts_the_catalog():
    from conformance.cases import tiers

    page = (ROOT / "docs" / "qualifying" / "index.md").read_text()
    stated = dict(re.findall(r"^\| `(smoke|standard|full)` \| ([\d,]+) \|", page, flags=re.MULTILINE))
    assert set(stated) == {"smoke", "standard", "full"}
    assert {tier: int(n.replace(",", "")) for tier, n in stated.items()} == \
        {tier: len(tiers.cases(tier)) for tier in stated}


def _every_parser(parser: argparse.ArgumentParser, prog: str):
    yield prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _every_parser(sub, f"{prog} {name}")


def test_the_command_reference_has_every_command_and_option():
    page = cli_reference.render()
    for command in cli_reference.COMMANDS:
        for prog, parser in _every_parser(cli_reference.load_parser(command.parser_factory), command.invocation):
            assert f"`{prog}`" in page, prog
            for action in parser._actions:
                if action.help == argparse.SUPPRESS or isinstance(action, argparse._HelpAction):
                    continue
                for flag in action.option_strings:
                    assert f"`{flag}`" in page, (prog, flag)
    for name, _ in cli_reference.nox_sessions():
        assert f"`nox -s {name}`" in page


def test_the_command_reference_lists_every_subcommand_the_cli_dispatches():
    from conformance import cli

    page = cli_reference.render()
    assert all(f"`python -m conformance {name}`" in page for name in cli.COMMANDS)


def test_the_nox_sessions_are_read_from_the_noxfile():
    sessions = dict(cli_reference.nox_sessions())
    assert {"conformance", "tests", "docs", "mutants", "matrix"} <= set(sessions)
    assert sessions["docs"].startswith("The user guide")


def _fake_run(folder: Path, env: dict, verdicts: list[str]) -> None:
    folder.mkdir(parents=True)
    (folder / "env.json").write_text(json.dumps(env))
    lines = [{"kind": "probe", "verdict": "fail"}] + [{"case": f"c{i}", "verdict": v} for i, v in enumerate(verdicts)]
    (folder / "results.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    (folder / "summary.md").write_text("# summary\n")


def test_the_reports_index_is_made_from_the_folders(tmp_path):
    gpu = {"backend": "cuda:sm_90", "device": "NVIDIA H100", "driver": "580", "gpus": [{"index": 0}],
           "torch": "2.11", "triton": "3.6", "harness": {"revision": "abcdef0123"}, "time_utc": "2026-11-25T10:00:00Z",
           "command": "python -m conformance run --tier standard"}
    cpu = {**gpu, "backend": "interpreter:cpu", "device": "x86_64", "gpus": [], "harness": {"revision": "1234567", "dirty": True}}
    _fake_run(tmp_path / "h100" / "standard", gpu, ["pass", "pass", "xfail"])
    _fake_run(tmp_path / "cpu" / "smoke", cpu, ["pass", "unsupported"])
    _fake_run(tmp_path / "runs" / "local", gpu, ["fail"])  # unpublished: never listed
    (tmp_path / "h100" / "README.md").write_text("# why\n")
    page = reports_index.render(tmp_path)
    assert "| [`h100/standard/`](h100/standard/summary.md) | `python -m conformance run --tier standard` | 2 pass, 1 xfail |" in page
    assert "NVIDIA H100 (`cuda:sm_90`)" in page and "abcdef0, 2026-11-25" in page and "[about](h100/README.md)" in page
    assert "Triton's CPU interpreter (no GPU)" in page and "1234567 (uncommitted changes)" in page
    assert "local" not in page
    assert "Runs on hardware: NVIDIA H100." in page


def test_the_published_reports_are_all_indexed():
    page = reports_index.render()
    for env_file in (ROOT / "reports").rglob("env.json"):
        folder = env_file.parent.relative_to(ROOT / "reports").as_posix()
        if not folder.startswith("runs/"):
            assert f"`{folder}/`" in page, folder


@pytest.mark.parametrize("old_heading", ["Set up and run", "The rule"])
def test_the_readme_keeps_what_ci_and_newcomers_rely_on(old_heading):
    readme = (ROOT / "README.md").read_text()
    assert f"## {old_heading}" in readme or f"**{old_heading}.**" in readme
