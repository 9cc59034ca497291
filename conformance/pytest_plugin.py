"""The harness's pytest entry point: `pytest -p conformance.pytest_plugin --conformance-tier smoke`.

Installed, the distribution declares this module as a `pytest11` entry point, so pytest
loads it into *every* run in that environment -- other projects' test suites included.
It therefore costs nothing until it is asked for: it declares the `--conformance-*`
options (importing neither torch nor triton nor the catalog) and does nothing else
unless one of them is given or an argument names the catalog file (conformance/suite.py,
or `conformance.suite` with --pyargs).  Then it

* refuses, as one usage error, a Python that lacks what the harness needs
  (conformance.dependencies), instead of an ImportError traceback;
* registers the catalog plugin (conformance.running.plugin: backend activation, one
  test item per selected case, the results folder and its report);
* if no argument names the catalog file, has that plugin add the catalog to the
  session's collectors (ADD_CATALOG), so the catalog runs next to whatever else was
  asked for -- not by adding the file to the arguments: an installed harness often
  sits in the repository's own `.venv/`, where pytest collects nothing:

      pytest --conformance-tier smoke                    # your tests, then the smoke tier
      pytest --conformance-tier smoke -m conformance     # the smoke tier alone

The entry point is named after this module, so the entry point, `-p
conformance.pytest_plugin`, the repository's conftest.py and the catalog plugin (which
lists this one in its `pytest_plugins`) all name one plugin, which pytest registers once.
(PYTEST_DONT_REWRITE: this module asserts nothing, and is often imported before pytest
could rewrite it.)
"""

from __future__ import annotations

import argparse

from pathlib import Path

import pytest

from conformance import dependencies

CATALOG_PLUGIN = "conformance.running.plugin"
ADD_CATALOG = pytest.StashKey[bool]()  # the catalog plugin adds the catalog to the session's collectors
SUITE_FILE = Path(__file__).resolve().with_name("suite.py")
SUITE_MODULE = "conformance.suite"
SWITCHES = {"on": True, "off": False, "auto": None}  # auto: on for GPU profiles
TIERS = "smoke, standard, full, sweep, sweep-quick"  # conformance.cases.tiers (not imported: too dear here)

# (option, keyword arguments of addoption): every option's default means "not asked for".
OPTIONS = (
    ("--conformance-tier", dict(default="auto", help=f"catalog tier to run: {TIERS} or auto (the backend's default)")),
    ("--conformance-case", dict(action="append", default=[], metavar="ID",
                                help="run this case id (repeatable; replaces the tier)")),
    ("--conformance-out", dict(default=None, metavar="DIR", help="run folder for results.jsonl, env.json, "
                               "summary.md (default reports/runs/<time>-<backend>)")),
    ("--conformance-backend", dict(default=None, metavar="KEY",
                                   help="backend profile, e.g. interpreter or cuda:sm_90 (default: detected)")),
    ("--conformance-kernel", dict(action="append", default=[], metavar="OP=MOD:FN",
                                  help="judge this implementation of OP instead of the bundled kernel")),
    ("--conformance-op", dict(action="append", default=[], metavar="OP",
                              help="only this operator's cases (repeatable)")),
    ("--conformance-capabilities", dict(default=None, metavar="FILE",
                                        help="TOML file declaring what the judged implementations support")),
    ("--conformance-dropout-mask", dict(action="append", default=[], metavar="[OP=]MOD:FN",
                                        help="recompute the keep mask of a kernel that returns (seed, offset)")),
    ("--conformance-shard", dict(default=None, metavar="K/N",
                                 help="only the K-th of N cost-balanced parts of the selected cases")),
    ("--conformance-config", dict(default=None, metavar="KERNEL:CFG",
                                  help="the selected cases with this launch configuration of one bundled kernel")),
    ("--conformance-seeds", dict(type=int, default=None, metavar="N",
                                 help="run every selected case under seeds 0..N-1")),
    ("--conformance-distribution", dict(default=None, metavar="SPEC", help="input value distribution, e.g. "
                                        "logits:1e4 (conformance/cases/distributions.py)")),
    ("--conformance-resume", dict(default=None, metavar="DIR", help="continue the run in DIR with its own "
                                  "selection: skip recorded cases, append the rest")),
    ("--conformance-isolate", dict(choices=list(SWITCHES), default="auto", help="run cases in a worker process "
                                   "that may crash or hang (auto: on for GPUs)")),
    ("--conformance-case-timeout", dict(type=float, default=None, metavar="S", help="per-case time limit of "
                                        "isolated runs (default: 300 on GPUs, 600 on the CPU)")),
    ("--conformance-determinism", dict(choices=list(SWITCHES), default="auto", help="launch every forward twice, "
                                       "fail it if the bits differ (auto: on for GPUs)")),
)


def _dest(option: str) -> str:
    return option.removeprefix("--").replace("-", "_")


def pytest_addoption(parser):
    group = parser.getgroup("conformance", "FlashAttention conformance harness (conformance.pytest_plugin)")
    for option, keywords in OPTIONS:
        group.addoption(option, **keywords)


def options_parser() -> argparse.ArgumentParser:
    """The plugin's options as an argparse parser: how the docs' command reference reads them."""
    parser = argparse.ArgumentParser(prog="python -m pytest", add_help=False)
    for option, keywords in OPTIONS:
        parser.add_argument(option, **keywords)
    return parser


def names_suite(arg: str) -> bool:
    """Whether a pytest argument names the catalog file (of any copy of the harness)."""
    path = Path(arg.split("::", 1)[0])
    return arg.split("::", 1)[0] == SUITE_MODULE or (path.name == SUITE_FILE.name and path.parent.name == "conformance")


def catalog_requested(config) -> bool:
    """A `--conformance-*` option given (even at its default) or the catalog file named."""
    changed = any(config.getoption(_dest(option)) != keywords["default"] for option, keywords in OPTIONS)
    typed = any(str(arg).startswith("--conformance-") for arg in config.invocation_params.args)
    return changed or typed or any(names_suite(str(arg)) for arg in config.args)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if not catalog_requested(config):
        return
    refusal = dependencies.refusal("run")
    if refusal:
        raise pytest.UsageError(f"conformance: {refusal}")
    config.stash[ADD_CATALOG] = not any(names_suite(str(arg)) for arg in config.args)
    config.pluginmanager.import_plugin(CATALOG_PLUGIN)
