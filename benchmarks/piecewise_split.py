"""What piecewise_attention's split loops buy, on a GPU: the kernels as they are (far,
crossing and near tiles in loops of their own, one score product on one-kind tiles)
against the same kernels with every tile sent through the selecting path (both
products, as before the split), which is what swapping the region helpers gives.

    python benchmarks/piecewise_split.py --out DIR        # both modes, a process each; env.json
    python benchmarks/piecewise_split.py --render DIR     # the table again

Each mode runs in a process of its own (triton compiles a kernel once per process, with
the helpers it found then), in the order split, selecting, split, so that a drift of
the GPU's clock over the run shows as two different split figures.  Shapes as the flash
benchmark's: B = 32k tokens / S, H = 2048 / D, fp16; threshold S / 8.  TFLOP/s count the
flash kernels' FLOPs (benchmarks/grid.py), not the extra score product: a figure to
compare the modes by, not peers.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
# Run as a script from a clone: make the clone's `conformance` importable (as flash_benchmark.py does).
if not __package__ and (ROOT / "conformance").is_dir() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

MODES = ("split", "selecting", "split")
SHAPES = [(seq, head_dim, causal) for seq in (4096, 8192) for head_dim in (64, 128) for causal in (False, True)]


@triton.jit
def no_far_keys(row_start, seq_q, seq_k, dist_threshold, BLOCK_N: tl.constexpr):
    return row_start * 0


@triton.jit
def no_near_keys(row_end, seq_q, seq_k, dist_threshold, far_end, BLOCK_N: tl.constexpr):
    return seq_k + BLOCK_N


@triton.jit
def no_near_rows(col_start, seq_q, seq_k, dist_threshold, first_row, BLOCK_M: tl.constexpr):
    return first_row


@triton.jit
def no_far_rows(col_end, seq_q, seq_k, dist_threshold, near_end, BLOCK_M: tl.constexpr):
    return seq_q + BLOCK_M


def selecting_path_swaps() -> list[tuple]:
    """(module, name, helper) for every region helper: with all of them swapped, no tile is
    far or near and every tile takes the selecting path."""
    from conformance.bundled.kernels import piecewise_backward, piecewise_forward

    return [(piecewise_forward, "far_keys_end", no_far_keys), (piecewise_forward, "near_keys_start", no_near_keys),
            (piecewise_backward, "far_keys_end", no_far_keys), (piecewise_backward, "near_keys_start", no_near_keys),
            (piecewise_backward, "near_rows_end", no_near_rows), (piecewise_backward, "far_rows_start", no_far_rows)]


def use_selecting_path() -> None:
    for module, name, helper in selecting_path_swaps():
        assert hasattr(module, name), name  # a renamed helper must not leave the split in place
        setattr(module, name, helper)


def measure(mode: str) -> list[dict]:
    import torch

    from conformance.bundled import kernels
    from conformance.bundled.benchmarks import grid
    from conformance.bundled.benchmarks.timing import RepetitionPolicy, interleaved_medians

    if mode == "selecting":
        use_selecting_path()
    lines = []
    for seq, head_dim, causal in SHAPES:
        problem = grid.Problem.sized("fp16", head_dim, causal, seq)
        q1, k1, q2, k2, v = (torch.randn(problem.shape, device="cuda", dtype=torch.float16, requires_grad=True)
                             for _ in range(5))
        threshold = seq // 8
        def forward():
            with torch.no_grad():
                return kernels.piecewise_attention(q1, k1, q2, k2, v, threshold, causal=causal)

        out = kernels.piecewise_attention(q1, k1, q2, k2, v, threshold, causal=causal)
        grad_out = torch.randn_like(out)
        backward = lambda: torch.autograd.grad(out, (q1, k1, q2, k2, v), grad_out, retain_graph=True)  # noqa: E731
        timed = interleaved_medians({"fwd": forward, "bwd": backward}, RepetitionPolicy())
        for direction in grid.DIRECTIONS:
            median_ms = timed[direction][0]
            lines.append({"mode": mode, "seq": seq, "head_dim": head_dim, "causal": causal, "threshold": threshold,
                          "direction": direction, "median_ms": median_ms,
                          "tflops": grid.tflops(problem.flops(direction), median_ms)})
    return lines


def write_environment(out: Path) -> None:
    """env.json: the machine, torch and triton the modes run on (the harness's fingerprint)."""
    from conformance import backends
    from conformance.running.environment import command_line, fingerprint
    from conformance.running.results import write_env

    env = fingerprint(backends.activate(), tier=None, command=command_line(),
                      implementations={"bundled": "kernels:piecewise_attention"})
    env["benchmark"] = {"modes": list(MODES), "shapes": "benchmarks/grid.py (Problem.sized), fp16, threshold S / 8"}
    write_env(out, env)


def render(out: Path) -> str:
    from tabulate import tabulate

    runs = [json.loads(line) for name in sorted(out.glob("mode-*.jsonl")) for line in name.read_text().splitlines()]
    rows = []
    for seq, head_dim, causal in SHAPES:
        cells = {}
        for line in runs:
            if (line["seq"], line["head_dim"], line["causal"]) == (seq, head_dim, causal):
                cells.setdefault((line["mode"], line["direction"]), []).append(line["tflops"])
        figures = [" / ".join(f"{value:.0f}" for value in cells.get((mode, direction), []))
                   for mode in ("split", "selecting") for direction in ("fwd", "bwd")]
        gains = [min(cells[("split", d)]) / cells[("selecting", d)][0] for d in ("fwd", "bwd")]
        rows.append([seq, head_dim, "causal" if causal else "non-causal", *figures,
                     f"{gains[0]:.2f} / {gains[1]:.2f}"])
    headers = ["S", "D", "mask", "split fwd (runs 1 / 3)", "split bwd", "selecting fwd", "selecting bwd",
               "gain fwd / bwd (slower split run)"]
    return ("piecewise_attention, fp16, threshold S/8, TFLOP/s in flash FLOPs\n\n"
            + tabulate(rows, headers, tablefmt="github") + "\n")


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script (the docs' command reference is generated from it)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="folder for the runs and the table")
    parser.add_argument("--render", type=Path, help="render the table of an earlier --out folder")
    parser.add_argument("--mode", choices=("split", "selecting"), help=argparse.SUPPRESS)  # one process's mode
    return parser


def main() -> int:
    parser = build_parser()
    args = parser.parse_args()
    if args.mode:
        print("\n".join(json.dumps(line) for line in measure(args.mode)))
        return 0
    out = args.render or args.out
    if out is None:
        parser.error("--out or --render is required")
    if args.out:
        out.mkdir(parents=True, exist_ok=True)
        write_environment(out)
        for index, mode in enumerate(MODES, start=1):
            result = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--mode", mode],
                                    capture_output=True, text=True, check=True)
            (out / f"mode-{index}-{mode}.jsonl").write_text(result.stdout)
    table = render(out)
    (out / "piecewise_split.md").write_text(table)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
