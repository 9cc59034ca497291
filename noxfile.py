"""Entry points: `nox -s conformance`, `nox -s tests`, `nox -s benchmark`, `nox -s matrix`.

Every session runs in its own virtualenv that can *see* the packages of the
Python running nox (through a .pth file).  A GPU vendor's machine therefore keeps
its own torch and triton builds — nothing here replaces them — and only what is
missing is installed into the session's virtualenv.  On a fresh CPU-only machine
that means torch (the CPU wheel), triton, numpy and the test tools.

Set FA_ISOLATED=1 to ignore the host's packages and install everything, which is
what a brand-new machine sees. The `matrix` sessions are always isolated: each
installs its own triton release.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path

import nox
from packaging.version import Version  # a dependency of nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

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


def _host_site_dirs() -> list[str]:
    dirs = list(site.getsitepackages())
    user = site.getusersitepackages()
    return [d for d in [*dirs, user] if Path(d).is_dir()]


def _host_packages_pth(session: nox.Session) -> Path:
    purelib = session.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                          silent=True).strip()
    return Path(purelib) / "fa_host_packages.pth"


def _share_host_packages(session: nox.Session, share: bool) -> None:
    """Let the session's virtualenv import the host interpreter's packages (or stop it)."""
    pth = _host_packages_pth(session)
    if share:
        pth.write_text("".join(d + "\n" for d in _host_site_dirs()))
    else:
        pth.unlink(missing_ok=True)


def _missing_modules(session: nox.Session) -> list[str]:
    probe = ("import importlib.util as u; "
             f"print(' '.join(m for m in {list(REQUIREMENTS)!r} if u.find_spec(m) is None))")
    return session.run("python", "-c", probe, silent=True).split()


def install_dependencies(session: nox.Session) -> None:
    _share_host_packages(session, share=os.environ.get("FA_ISOLATED", "0") in ("", "0"))
    missing = _missing_modules(session)
    if missing:
        session.install(*(REQUIREMENTS[m] for m in missing))
    session.run("python", "-c", "import torch, triton; "
                "print(f'torch {torch.__version__}, triton {triton.__version__}, '"
                "f'cuda available: {torch.cuda.is_available()}')")


@nox.session
def conformance(session: nox.Session) -> None:
    """Qualify this machine: the `standard` tier on a GPU, `smoke` on the CPU interpreter.

    Extra arguments go to `python -m conformance run`, e.g.
    `nox -s conformance -- --tier full` or `-- --kernel flash_attention=my.module:fn`.
    """
    install_dependencies(session)
    session.run("python", "-m", "conformance", "run", *session.posargs)


@nox.session
def tests(session: nox.Session) -> None:
    """The harness's own tests, the smoke tier of real kernel launches, and the
    compile-only tier's quick scope for sm_80, sm_90, gfx90a and gfx942 (no GPU)."""
    install_dependencies(session)
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider", "-n", "auto",
                "tests", "conformance/suite.py", "--conformance-tier", "smoke",
                "--conformance-out", "reports/runs/ci-smoke", *session.posargs)
    session.run("python", "-m", "conformance", "compile", "--scope", "quick", "--out", "reports/runs/ci-compile")


@nox.session
def mutants(session: nox.Session) -> None:
    """The mutant kill table: every deliberately broken kernel variant hunted with the
    catalog (smoke on the CPU interpreter, standard on a GPU). Extra arguments go to
    `python -m mutants`, e.g. `nox -s mutants -- --tier standard --max-kills 3 --out DIR`.
    """
    install_dependencies(session)
    session.run("python", "-m", "mutants", *session.posargs)


@nox.session
def flake(session: nox.Session) -> None:
    """False alarms of the bundled (correct) kernels: the backend's flake set under 20
    seeds, reported per case group in DIR/flake.md (nightly; ~5 min with -n 2 on 2 CPU cores).
    Extra arguments go to `python -m conformance flake`, e.g. `-- -n 2 --out DIR`."""
    install_dependencies(session)
    session.run("python", "-m", "conformance", "flake", *session.posargs)


@nox.session
def benchmark(session: nox.Session) -> None:
    """TFLOP/s and peak memory of the bundled kernel next to torch SDPA's backends (needs a GPU).

    Writes reports/runs/<time>-benchmark/ (benchmark.jsonl, env.json, benchmark.md and
    the plot: PNG if matplotlib is installed, else SVG). Extra arguments go to
    benchmarks/flash_benchmark.py, e.g. `nox -s benchmark -- --quick` or `-- --out DIR`.
    """
    install_dependencies(session)
    session.run("python", "benchmarks/flash_benchmark.py", *session.posargs)


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
    `python -m conformance.matrix_job` (e.g. `-- -n 2`, `-- --label h100`).
    """
    _share_host_packages(session, share=False)
    session.install(REQUIREMENTS["torch"], MATRIX_NUMPY.get(triton, "numpy"),
                    *(REQUIREMENTS[m] for m in ("pytest", "xdist", "hypothesis", "tabulate", "packaging")))
    session.install(f"triton=={triton}")  # after torch, whose CUDA builds pin a triton of their own
    session.run("python", "-m", "conformance.matrix_job", *session.posargs)


if __name__ == "__main__":  # `python noxfile.py` is not how to run this file
    sys.exit("run `nox -s conformance` or `nox -s tests`")
