"""The environment fingerprint stored as a run's env.json.

A qualification report is only as good as the record of what it ran on: device,
backend profile, driver, library versions, the harness revision (and whether the
working tree was dirty), and how the run was invoked. Every probe tolerates
absence (no GPU, no git, no nvidia-smi) by recording None.
"""

from __future__ import annotations


import datetime
import functools
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from conformance.judging.rule import RULE_REVISION

HARNESS_ROOT = Path(__file__).resolve().parents[2]  # a clone's root, or the site-packages holding it
DISTRIBUTION = "fa-conformance"


def _run(command: list[str], cwd: Path | None = None) -> str | None:
    try:
        completed = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return completed.stdout.strip() if completed.returncode == 0 else None


def _package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


@functools.lru_cache(maxsize=None)
def triton_version() -> str | None:
    """The installed Triton's version (vendor forks report their own builds)."""
    try:
        import triton
    except ImportError:
        return None
    return getattr(triton, "__version__", None) or _package_version("triton")


def git_revision(root: Path = HARNESS_ROOT) -> dict:
    """{"revision": sha or None, "dirty": bool or None} of the harness checkout; for an
    installed harness, the distribution and its version as the revision.

    FA_HARNESS_REVISION, when set, is the revision the sender states for a copy of a
    checkout shipped to a lab machine; it wins, because such a copy may carry no .git
    or a stale one (the checkout's own view is kept under "checkout")."""
    if (root / ".git").exists():
        revision = _run(["git", "rev-parse", "HEAD"], cwd=root)
        status = _run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root) if revision else None
        checkout = {"revision": revision, "dirty": None if status is None else bool(status)}
    else:  # installed (site-packages may sit inside some other git repository: never ask git there)
        version = _package_version(DISTRIBUTION)
        checkout = {"revision": f"{DISTRIBUTION} {version}" if version else None, "dirty": None}
    stated = os.environ.get("FA_HARNESS_REVISION")
    if stated:
        return {"revision": stated, "dirty": None, "stated": True, "checkout": checkout}
    return checkout


def _device_facts(profile) -> dict:
    import torch

    facts = {"device": platform.processor() or platform.machine(), "driver": None,
             "cuda_runtime": torch.version.cuda, "hip_runtime": getattr(torch.version, "hip", None)}
    if profile.device == "cuda" and torch.cuda.is_available():
        facts["device"] = torch.cuda.get_device_name()
        facts["driver"] = _run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
        if facts["driver"]:
            facts["driver"] = facts["driver"].splitlines()[0]
        facts["gpus"] = visible_gpus(torch.cuda)
    return facts


def visible_gpus(cuda) -> list[dict]:
    """Every GPU this process can use: CUDA index (relative to CUDA_VISIBLE_DEVICES), name
    and UUID, so a multi-GPU report names each card its cases ran on."""
    gpus = []
    for index in range(cuda.device_count()):
        properties = cuda.get_device_properties(index)
        uuid = getattr(properties, "uuid", None)
        gpus.append({"index": index, "name": properties.name, "uuid": str(uuid) if uuid is not None else None})
    return gpus


def fingerprint(profile, *, tier: str | None, implementations: dict, command: str) -> dict:
    """Everything env.json records about this process and machine."""
    import torch

    return {
        "backend": profile.key,
        "backend_name": profile.name,
        "arch": profile.arch,
        **_device_facts(profile),
        "torch": torch.__version__,
        "triton": triton_version(),
        "numpy": _package_version("numpy"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "harness": git_revision(),
        "rule": RULE_REVISION,
        "time_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "tier": tier,
        "implementation": implementations,
        "command": command,
        "profile_notes": list(profile.notes),
    }


def command_line() -> str:
    """How this process was started, as a copyable line."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name == "__main__.py" and Path(argv[0]).parent.name == "conformance":
        argv = ["python", "-m", "conformance", *argv[1:]]
    elif argv and Path(argv[0]).name == DISTRIBUTION:  # the installed command
        argv = [DISTRIBUTION, *argv[1:]]
    elif argv and Path(argv[0]).name in ("pytest", "py.test", "__main__.py"):
        argv = ["python", "-m", "pytest", *argv[1:]]
    return shlex.join(argv)
