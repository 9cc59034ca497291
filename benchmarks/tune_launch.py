"""Launch-configuration sweep of one kernel of the bundled flash_attention (needs a GPU).

    python benchmarks/tune_launch.py [--kernel fwd|bwd_dkdv|bwd_dq] [--head-dims 64,128]
                                     [--seq-len 8192] [--dtype fp16] [--out FILE]
                                     [--block-m 64,128] [--block-n ...] [--warps ...] [--stages ...]

For each head dim and causal mode, every (BLOCK_M, BLOCK_N, num_warps, num_stages) of
the grid below replaces that kernel's launch table for the current target, and the
median time (triton.testing.do_bench) of the forward, or of the whole backward for a
backward kernel, gives TFLOP/s; B*S = 32k tokens and H*D = 2048, as in the benchmark.  Configurations that do not compile or launch
(shared memory, registers) are listed with their error.  One JSON line per
measurement goes to --out, a table per problem to stdout, best first.  This chose
the launch tables in kernels/tuning.py; whether a configuration is *correct* is the
conformance tiers' business.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Run as a script from a clone: make the clone's `conformance` importable (never on -m, where it
# already is, nor in an installed copy, whose parent folder holds the bundled code itself).
if not __package__ and (ROOT / "conformance").is_dir() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402

from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import targets, tuning  # noqa: E402

GRID = dict(block_m=(64, 128), block_n=(64, 128), num_warps=(4, 8), num_stages=(2, 3, 4), descriptors=(False,))
BACKWARD_GRID = dict(GRID, num_stages=(2, 3))  # the backward's loops hold more tiles
AXIS_FLAGS = dict(block_m="block-m", block_n="block-n", num_warps="warps", num_stages="stages",
                  descriptors="descriptors")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _timed(kernel: str, q, k, v, causal: bool):
    """The call to time: the forward, or the backward of one forward (graph kept)."""
    if kernel == "fwd":
        return lambda: kernels.flash_attention(q, k, v, causal=causal)
    inputs = [x.requires_grad_() for x in (q, k, v)]
    out = kernels.flash_attention(*inputs, causal=causal)
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True)


def measure(kernel: str, config: tuning.LaunchConfig, d: int, s: int, causal: bool, dtype) -> float:
    """TFLOP/s with `config` as the only row of `kernel`'s table (backward: 2.5x the forward's FLOPs)."""
    tables = tuning.launch_tables(targets.current_target())
    saved = tables.get(kernel)
    tables[kernel] = tuning.table((256, config))
    try:
        heads, batch = 2048 // d, 32768 // s
        q, k, v = (torch.randn(batch, heads, s, d, device="cuda", dtype=dtype) for _ in range(3))
        milliseconds = triton.testing.do_bench(_timed(kernel, q, k, v, causal), warmup=25, rep=100)
        flops = 4 * batch * heads * s * s * d * (0.5 if causal else 1.0) * (1.0 if kernel == "fwd" else 2.5)
        return flops / milliseconds / 1e9
    finally:
        tables[kernel] = saved


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script (the docs' command reference is generated from it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", default="fwd", choices=("fwd", "bwd_dkdv", "bwd_dq"), help="the kernel to sweep")
    parser.add_argument("--head-dims", default="64,128", help="comma-separated head dims")
    parser.add_argument("--seq-len", type=int, default=8192, help="S of every problem")
    parser.add_argument("--dtype", default="fp16", choices=sorted(DTYPES), help="input dtype")
    parser.add_argument("--out", type=pathlib.Path, help="also write one JSON line per configuration here")
    for axis in GRID:
        parser.add_argument("--" + AXIS_FLAGS[axis], dest=axis, help=f"values of {axis} (default: the built-in grid)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    grid = dict(GRID if args.kernel == "fwd" else BACKWARD_GRID)
    grid.update({axis: tuple(int(x) for x in getattr(args, axis).split(",")) for axis in GRID if getattr(args, axis)})
    if not torch.cuda.is_available():
        print("tune_launch: needs a GPU", file=sys.stderr)
        return 2
    out = open(args.out, "w", encoding="utf-8") if args.out else None
    for d, causal in itertools.product((int(x) for x in args.head_dims.split(",")), (False, True)):
        rows = []
        for values in itertools.product(*grid.values()):
            config = tuning.LaunchConfig(**dict(zip(grid, values)))
            try:
                tflops, error = measure(args.kernel, config, d, args.seq_len, causal, DTYPES[args.dtype]), ""
            except Exception as exc:  # out of resources and the like: recorded, not fatal
                tflops, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            line = {"kernel": args.kernel, "head_dim": d, "causal": causal, "seq_len": args.seq_len, "dtype": args.dtype,
                    **config.as_dict(), "tflops": tflops, "error": error}
            rows.append(line)
            if out:
                out.write(json.dumps(line) + "\n")
                out.flush()
        rows.sort(key=lambda line: -(line["tflops"] or 0))
        print(f"\n{args.kernel} D={d} {'causal' if causal else 'non-causal'} S={args.seq_len} {args.dtype}")
        for line in rows[:8] + [line for line in rows if line["error"]][:3]:
            print(f"  m{line['block_m']:>3} n{line['block_n']:>3} w{line['num_warps']} s{line['num_stages']}"
                  f"{' tma' if line.get('descriptors') else '    '}  "
                  f"{line['tflops'] or 0:7.1f} TFLOP/s {line['error']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
