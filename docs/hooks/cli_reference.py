"""The command-line reference page, generated from the argparse parsers themselves.

Every command the harness ships builds its parser in a `build_parser()` function;
this module walks those parsers (subcommands included) and writes one markdown
section per command: its usage line, description and a table of its options with
their defaults and choices. Nothing here is typed by hand, so the page cannot
drift from the code: an option added to a parser is on the page at the next build.
The nox sessions are listed from noxfile.py's own docstrings, read without
importing nox.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Command:
    """One documented command line: how a user types it and where its parser is built."""

    invocation: str
    parser_factory: str  # "module:function" returning an argparse.ArgumentParser
    summary: str


COMMANDS = (
    Command("python -m conformance", "conformance.cli:build_parser",
            "the harness: list, run, report, diff, matrix, probes, compile, flake, shrink"),
    Command("python -m mutants", "mutants.cli:build_parser", "the mutant kill table"),
    Command("python -m pytest", "conformance.pytest_plugin:options_parser",
            "the catalog under plain pytest (the plugin's options)"),
    Command("python -m conformance.robustness.matrix_job", "conformance.robustness.matrix_job:build_parser",
            "one Triton release of the nightly matrix (what `nox -s matrix` runs)"),
    Command("python benchmarks/flash_benchmark.py", "benchmarks.flash_benchmark:build_parser",
            "TFLOP/s and memory next to torch SDPA and FlexAttention (`nox -s benchmark`)"),
    Command("python benchmarks/variants_benchmark.py", "benchmarks.variants_benchmark:build_parser",
            "the attention variants against FlexAttention and the dense kernel (`nox -s benchmark_variants`)"),
    Command("python benchmarks/decode_benchmark.py", "benchmarks.decode_benchmark:build_parser",
            "KV-cache decoding bandwidth against the copy bandwidth, FlagAttention and FlexAttention "
            "(`nox -s benchmark_decode`)"),
    Command("python benchmarks/harness_speed.py", "benchmarks.harness_speed:build_parser",
            "the harness's own cases per second (`nox -s harness_speed`)"),
    Command("python benchmarks/tune_launch.py", "benchmarks.tune_launch:build_parser",
            "a grid of launch configurations timed on this GPU"),
    Command("python benchmarks/profile_backward.py", "benchmarks.profile_backward:build_parser",
            "the backward's time per kernel"),
    Command("python benchmarks/piecewise_split.py", "benchmarks.piecewise_split:build_parser",
            "piecewise_attention's split loops against the selecting path"),
)


def load_parser(factory: str) -> argparse.ArgumentParser:
    if str(ROOT) not in sys.path:  # the checkout's own packages, also when MkDocs runs from elsewhere
        sys.path.insert(0, str(ROOT))
    module, function = factory.split(":")
    return getattr(importlib.import_module(module), function)()


def anchor(invocation: str) -> str:
    """The id MkDocs gives the heading of a command: Python-Markdown's toc slugify, restated
    here so that the tests need no MkDocs (the strict build checks every anchor anyway)."""
    text = unicodedata.normalize("NFKD", invocation).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def _cell(text: str) -> str:
    """One table cell: on one line, its pipes escaped, and `<placeholders>` outside code spans
    kept as text (markdown would take reports/runs/<time> for an HTML tag and drop it)."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    return "`".join(part if i % 2 else part.replace("<", "&lt;").replace(">", "&gt;") for i, part in enumerate(parts))


def _flags(action: argparse.Action) -> str:
    names = action.option_strings or [action.dest]
    shown = ", ".join(f"`{name}`" for name in names)
    if action.nargs == 0:
        return shown
    if action.choices:
        return f"{shown} {{{', '.join(str(c) for c in action.choices)}}}"
    metavar = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    return f"{shown} `{metavar}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = parser._get_formatter()._expand_help(action) if action.help else ""  # %(default)s and friends
    default = action.default
    said = "default" in text.lower()
    if action.option_strings and action.nargs != 0 and default not in (None, [], argparse.SUPPRESS) and not said:
        text = f"{text} (default: `{default}`)".strip()
    if action.required and action.option_strings:
        text = f"**required.** {text}"
    if isinstance(action, argparse._AppendAction) and "repeatable" not in text.lower():
        text = f"{text} Repeatable.".strip()
    return _cell(text) or "—"


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    rows = [a for a in parser._actions
            if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)) and a.help != argparse.SUPPRESS]
    if not rows:
        return ["No options."]
    table = ["| option | meaning |", "|---|---|"]
    table += [f"| {_cell(_flags(a))} | {_help(parser, a)} |" for a in rows]
    return table


def _usage(parser: argparse.ArgumentParser, prog: str) -> str:
    parser.prog = prog
    formatter = argparse.HelpFormatter(prog, width=100)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return formatter.format_help().strip()


def _command_section(parser: argparse.ArgumentParser, prog: str, depth: int, summary: str = "") -> list[str]:
    lines = [f"{'#' * depth} `{prog}`", ""]
    if summary:
        lines += [summary[0].upper() + summary[1:] + ".", ""]
    lines += ["```text", _usage(parser, prog), "```", ""]
    if parser.description and parser.description.strip() != summary:
        lines += [" ".join(parser.description.split()), ""]
    lines += [*_options_table(parser), ""]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help for choice in action._choices_actions}
            for name, sub in action.choices.items():
                lines += _command_section(sub, f"{prog} {name}", depth + 1, helps.get(name) or "")
    return lines


def nox_sessions(noxfile: Path = ROOT / "noxfile.py") -> list[tuple[str, str]]:
    """(name, docstring) of every function decorated as a nox session, in file order."""
    tree = ast.parse(noxfile.read_text(encoding="utf-8"))
    sessions = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any("session" in ast.unparse(d) for d in node.decorator_list):
            sessions.append((node.name, " ".join((ast.get_docstring(node) or "").split())))
    return sessions


def render() -> str:
    """The whole reference page, as markdown."""
    lines = ["# Command reference", "",
             "Generated at every build from the commands' own argparse parsers and from the "
             "docstrings of `noxfile.py`: what is here is what the code accepts. "
             "Exit codes, for every `python -m conformance` command: 0 when every case passes "
             "(or is `unsupported` or `xfail`), 1 when a case is `fail`, `nonfinite`, `error` or "
             "`xpass` (or the run stopped early), 2 for a usage error, named in one line.", "",
             "## nox sessions", "", "| session | what it does |", "|---|---|"]
    lines += [f"| `nox -s {name}` | {_cell(doc)} |" for name, doc in nox_sessions()]
    lines += ["", "## Commands", ""]
    lines += [f"- [`{c.invocation}`](#{anchor(c.invocation)}): {c.summary}" for c in COMMANDS]
    lines.append("")
    for command in COMMANDS:
        lines += _command_section(load_parser(command.parser_factory), command.invocation, 2, command.summary)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # python docs/hooks/cli_reference.py > /tmp/cli.md, to read it without a build
    os.chdir(ROOT)
    print(render(), end="")
