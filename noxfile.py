"""Entry points: `nox -s conformance`, `nox -s tests`, `nox -s benchmark`.

Every session runs in its own virtualenv that can *see* the packages of the
Python running nox (through a .pth file).  A GPU vendor's machine therefore keeps
its own torch and triton builds — nothing here replaces them — and only what is
missing is installed into the session's virtualenv.  On a fresh CPU-only machine
that means torch (the CPU wheel), triton, numpy and the test tools.

Set FA_ISOLATED=1 to ignore the host's packages and install everything, which is
what a brand-new machine sees.
"""

from __future__ import annotations

import os
import site
import sys
from pathlib import Path

import nox

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
    """The harness's own tests plus the smoke tier of real kernel launches."""
    install_dependencies(session)
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider",
                "tests", "conformance/suite.py", "--conformance-tier", "smoke",
                "--conformance-out", "reports/runs/ci-smoke", *session.posargs)


@nox.session
def benchmark(session: nox.Session) -> None:
    """TFLOP/s of the bundled kernels next to torch SDPA (needs a GPU)."""
    install_dependencies(session)
    session.run("python", "benchmarks/flash_benchmark.py", *session.posargs)


if __name__ == "__main__":  # `python noxfile.py` is not how to run this file
    sys.exit("run `nox -s conformance` or `nox -s tests`")
