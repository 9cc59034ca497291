"""One column of the triton-version matrix: this environment's runs, written under
`ROOT/LABEL/triton-<version>/`, then the matrix over every version there re-rendered.

    python -m conformance.robustness.matrix_job [--root reports/matrix] [--label LABEL] [-n N]
                                     [--compile-scope quick|full] [--parts run,compile]

`nox -s matrix` and `tox -e tritonXY` call this inside one isolated virtualenv per
triton release. What runs depends on the machine:

* no GPU: the `smoke` tier on the interpreter (folder `run/`), the `sweep-quick` tier
  (folder `sweep/`: every tile shape of every kernel's tuning space, descriptor loads
  where that triton has them) and the compile-only tier for its default targets, every
  architecture family the kernels support (folder `compile/`; scope `quick` as in CI unless
  --compile-scope full): a target that release cannot compile for is one `unsupported`
  line with the compiler's reason;
* a GPU: the backend's default tier on the GPU (folder `run/`).

Each part is its own `python -m conformance` process (TRITON_INTERPRET of the
interpreter run must not reach the compiler), and its exit status is a result,
not an error: a triton release that fails cases, or cannot start at all, is what
the matrix is for. The statuses go to `status.json` beside the run folders.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from conformance.running.spawn import module_command

STATUS_FILE = "status.json"
MATRIX_FILES = {"markdown": "matrix.md", "html": "matrix.html"}


def _label(profile) -> str:
    return "cpu" if profile.interpreted else profile.key.replace(":", "-")


def parts(profile, workers: int | None, compile_scope: str = "quick") -> dict[str, list[str]]:
    """Folder name -> `python -m conformance` arguments (without --out) for this machine."""
    run = ["run", "--tier", "auto"] + (["-n", str(workers)] if workers else [])
    if not profile.interpreted:
        return {"run": run}
    sweep = ["run", "--tier", "sweep-quick"] + (["-n", str(workers)] if workers else [])
    return {"run": run, "sweep": sweep,
            "compile": ["compile", "--scope", compile_scope]}  # the tier's default targets


def run_parts(version_dir: Path, selected: dict[str, list[str]]) -> dict[str, int]:
    """Run each part into version_dir/<part>; the exit statuses by part."""
    statuses = {}
    for name, arguments in selected.items():
        arguments = [*arguments, "--out", str(version_dir / name)]
        print("matrix: python -m conformance", " ".join(arguments), flush=True)
        statuses[name] = subprocess.run(module_command("conformance", *arguments)).returncode
    return statuses


def _previous_exit_codes(version_dir: Path) -> dict[str, int]:
    status = version_dir / STATUS_FILE
    return json.loads(status.read_text(encoding="utf-8"))["exit_codes"] if status.exists() else {}


def render_matrix(label_dir: Path) -> None:
    """Re-render LABEL/matrix.md and matrix.html over every version folder there."""
    from conformance.reporting.matrix import load_matrix, render

    matrix = load_matrix([label_dir])
    for fmt, name in MATRIX_FILES.items():
        (label_dir / name).write_text(render(matrix, fmt), encoding="utf-8")


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script (the docs' command reference is generated from it)."""
    parser = argparse.ArgumentParser(prog="python -m conformance.robustness.matrix_job", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default="reports/matrix", help="matrix folder (default reports/matrix)")
    parser.add_argument("--label", help="machine label (default: cpu, or the backend key such as cuda-sm_90)")
    parser.add_argument("-n", dest="workers", type=int, help="pytest-xdist workers for the tier run")
    parser.add_argument("--compile-scope", default="quick", choices=("quick", "full"),
                        help="scope of the compile-only tier (default quick, as in CI)")
    parser.add_argument("--parts", help="comma-separated subset of this machine's parts (run, sweep, compile) to run now; "
                                        "the other parts' folders are left as they are")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)

    from conformance import backends

    profile = backends.detect()
    version = metadata.version("triton")
    label_dir = Path(args.root) / (args.label or _label(profile))
    version_dir = label_dir / f"triton-{version}"
    selected = parts(profile, args.workers, args.compile_scope)
    if args.parts:
        wanted = args.parts.split(",")
        if not set(wanted) <= set(selected):
            parser.error(f"--parts: this machine runs {', '.join(selected)}, not {args.parts}")
        selected = {name: arguments for name, arguments in selected.items() if name in wanted}
    statuses = {**_previous_exit_codes(version_dir), **run_parts(version_dir, selected)}
    version_dir.mkdir(parents=True, exist_ok=True)
    status = {"triton": version, "backend": profile.key, "exit_codes": statuses}
    (version_dir / STATUS_FILE).write_text(json.dumps(status, indent=2) + "\n", encoding="utf-8")
    render_matrix(label_dir)
    print(f"matrix: triton {version}: {statuses}; matrix at {label_dir / MATRIX_FILES['markdown']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
