"""Launch-configuration sweep of one kernel of the bundled flash_attention (needs a GPU).

    python benchmarks/tune_launch.py [--kernel fwd|bwd_dkdv|bwd_dq] [--head-dims 64,128]
                                     [--seq-len 8192] [--dtype fp16] [--out FILE]
                                     [--block-m 64,128] [--block-n ...] [--warps ...] [--stages ...]
                                     [--window LEFT | --varlen]

For each head dim and causal mode, every (BLOCK_M, BLOCK_N, num_warps, num_stages) of
the grid below is the configuration of every launch of that kernel (`judged`), and the
median time (triton.testing.do_bench) of the forward, or of the whole backward for a
backward kernel, gives TFLOP/s; B*S = 32k tokens and H*D = 2048, as in the benchmark.  Configurations that do not compile or launch
(shared memory, registers) are listed with their error.  One JSON line per
measurement goes to --out (and the environment's fingerprint to FILE.env.json beside it), a
table per problem to stdout, best first, each row against the row the current tables give
that problem (`table` in the JSON lines), so that a sweep reads as a change to the tables.  This chose
the launch tables in kernels/tuning.py; whether a configuration is *correct* is the
conformance tiers' business.

--window LEFT sweeps the causal sliding window (LEFT, 0) instead (causal only), for the
kernel's "window" variant table (`{kernel}.window`, kernels.tuning.launch_config) where the
target's tables hold one for a band that narrow (LaunchTable.widest_band), else for its own; --varlen
the packed batch of benchmarks/variants.varlen_lengths (causal only), for its "varlen" table.
TFLOP/s then count the visible pairs only, as the variants benchmark does.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import pathlib
import sys
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Run as a script from a clone: make the clone's `conformance` importable (never on -m, where it
# already is, nor in an installed copy, whose parent folder holds the bundled code itself).
if not __package__ and (ROOT / "conformance").is_dir() and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import triton  # noqa: E402

from conformance.bundled.benchmarks.variants import varlen_lengths, varlen_offsets, visible_pairs  # noqa: E402
from conformance.bundled import kernels  # noqa: E402
from conformance.bundled.kernels import tuning, tuning_space  # noqa: E402
from conformance.bundled.kernels.problem import table_choice  # noqa: E402

GRID = dict(block_m=(64, 128), block_n=(64, 128), num_warps=(4, 8), num_stages=(2, 3, 4), descriptors=(False,))
BACKWARD_GRID = dict(GRID, num_stages=(2, 3))  # the backward's loops hold more tiles
AXIS_FLAGS = dict(block_m="block-m", block_n="block-n", num_warps="warps", num_stages="stages",
                  descriptors="descriptors")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


@dataclass(frozen=True)
class Shape:
    """The problem swept: dense (B, H, S, D), a causal window (left, 0), or a packed batch."""

    head_dim: int
    seq_len: int
    causal: bool
    window: int = 0  # left; 0: no window
    varlen: bool = False
    tokens: int = 32768  # B * S, the benchmark's

    @property
    def batch(self) -> int:
        return self.tokens // self.seq_len

    def table_choice(self) -> dict:
        """launch_config's `variants` and `band_keys` for this problem, as the kernels choose
        them (kernels.problem.table_choice)."""
        return table_choice((self.window, 0) if self.window else None, self.varlen)

    def call(self, q, k, v):
        if self.varlen:
            lengths = varlen_lengths(self.seq_len, self.tokens)
            offsets = varlen_offsets(lengths, q.device)
            packed = [x.transpose(1, 2).reshape(-1, x.shape[1], x.shape[3]) for x in (q, k, v)]
            return lambda *xs: kernels.flash_attention_varlen(*xs, offsets, offsets, max(lengths), max(lengths),
                                                              causal=True), packed
        window = {"window_size": (self.window, 0)} if self.window else {}
        return lambda *xs: kernels.flash_attention(*xs, causal=self.causal, **window), [q, k, v]

    def pairs(self) -> int:
        """Visible (query, key) pairs per head, summed over the batch."""
        if self.varlen:
            return sum(visible_pairs(n, n, True) for n in varlen_lengths(self.seq_len, self.tokens))
        window = (self.window, 0) if self.window else None
        return self.batch * visible_pairs(self.seq_len, self.seq_len, self.causal, window)


def _timed(kernel: str, shape: Shape, q, k, v):
    """The call to time: the forward, or the backward of one forward (graph kept)."""
    attention, inputs = shape.call(q, k, v)
    if kernel == "fwd":
        return lambda: attention(*inputs)
    inputs = [x.requires_grad_() for x in inputs]
    out = attention(*inputs)
    grad = torch.randn_like(out)
    return lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True)


@contextlib.contextmanager
def judged(kernel: str, config: tuning.LaunchConfig):
    """Every launch of `kernel` inside takes `config`: an override (kernels.tuning_space.
    configured), which wins over each of the kernel's tables -- its own, a dtype's, the window's,
    the varlen one.  Replacing the kernel's own table instead let a problem with a variant
    table of its own (a packed batch on sm_90) keep that table's configuration for every row of
    a sweep.  RuntimeError on leaving when `kernel` never launched inside, or launched with
    anything else (kernels.tuning.recorded_launches: descriptors as it really took them)."""
    with tuning_space.configured(kernel, config), tuning.recorded_launches() as launched:
        yield
    used = launched.get(kernel)
    if used != config:
        raise RuntimeError(f"{kernel} was swept with {config} but launched with {used}"
                           if used else f"{kernel} never launched: the call timed does not reach it")


def measure(kernel: str, config: tuning.LaunchConfig, shape: Shape, dtype) -> float:
    """TFLOP/s over the visible pairs with every launch of `kernel` taking `config` (judged;
    backward: 2.5x the forward's FLOPs)."""
    heads = 2048 // shape.head_dim
    q, k, v = (torch.randn(shape.batch, heads, shape.seq_len, shape.head_dim, device="cuda", dtype=dtype)
               for _ in range(3))
    with judged(kernel, config):
        milliseconds = triton.testing.do_bench(_timed(kernel, shape, q, k, v), warmup=25, rep=100)
    flops = 4 * heads * shape.pairs() * shape.head_dim * (1.0 if kernel == "fwd" else 2.5)
    return flops / milliseconds / 1e9


def ranking(title: str, rows: list[dict], shown: int = 8) -> list[str]:
    """The sweep of one problem as printed: the `shown` fastest rows, then the row of the
    current table if it is not among them (or a line saying the grid lacks it), then up to
    three rows that failed; each timed row with its speed relative to the table's row."""
    def label(line):
        return (f"m{line['block_m']:>3} n{line['block_n']:>3} w{line['num_warps']} s{line['num_stages']}"
                f"{' tma' if line.get('descriptors') else '    '}")

    timed = sorted((line for line in rows if line["tflops"]), key=lambda line: -line["tflops"])
    table = next((line for line in rows if line.get("table")), None)
    out = [title]
    for line in timed[:shown] + [line for line in timed[shown:] if line is table]:
        versus = f"  {line['tflops'] / table['tflops']:5.2f}x table" if table and table["tflops"] else ""
        out.append(f"  {label(line)}  {line['tflops']:7.1f} TFLOP/s{versus}{'  <- table' if line is table else ''}")
    if table is None:
        out.append("  (the current table's row is not in this grid)")
    elif not table["tflops"]:
        out.append(f"  {label(table)}  the current table's row failed: {table['error']}")
    out += [f"  {label(line)}  {line['error']}" for line in rows if line["error"] and line is not table][:3]
    return out


def write_environment(out: pathlib.Path) -> pathlib.Path:
    """The sweep's environment fingerprint (machine, driver, torch, triton, harness revision,
    command) beside its JSON lines: FILE.jsonl -> FILE.env.json."""
    from conformance import backends
    from conformance.running.environment import command_line, fingerprint

    env = fingerprint(backends.activate(), tier=None, command=command_line(),
                      implementations={"bundled": "kernels:flash_attention, kernels:flash_attention_varlen"})
    path = out.with_suffix(".env.json")
    path.write_text(json.dumps(env, indent=2) + "\n", encoding="utf-8")
    return path


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
    problem = parser.add_mutually_exclusive_group()
    problem.add_argument("--window", type=int, default=0, metavar="LEFT",
                         help="sweep the causal window (LEFT, 0) (a narrow band: through the kernel's window table)")
    problem.add_argument("--varlen", action="store_true", help="sweep a packed batch of mixed lengths (causal)")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    grid = dict(GRID if args.kernel == "fwd" else BACKWARD_GRID)
    grid.update({axis: tuple(int(x) for x in getattr(args, axis).split(",")) for axis in GRID if getattr(args, axis)})
    if not torch.cuda.is_available():
        print("tune_launch: needs a GPU", file=sys.stderr)
        return 2
    if args.out:
        write_environment(args.out)
    out = open(args.out, "w", encoding="utf-8") if args.out else None
    causal_modes = (True,) if args.window or args.varlen else (False, True)
    for d, causal in itertools.product((int(x) for x in args.head_dims.split(",")), causal_modes):
        shape = Shape(d, args.seq_len, causal, args.window, args.varlen)
        table_row = tuning.launch_config(args.kernel, d, args.dtype, **shape.table_choice())
        rows = []
        for values in itertools.product(*grid.values()):
            config = tuning.LaunchConfig(**dict(zip(grid, values)))
            try:
                tflops, error = measure(args.kernel, config, shape, DTYPES[args.dtype]), ""
            except Exception as exc:  # out of resources and the like: recorded, not fatal
                tflops, error = None, f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            line = {"kernel": args.kernel, "head_dim": d, "causal": causal, "seq_len": args.seq_len, "dtype": args.dtype,
                    "window": args.window, "varlen": args.varlen, **config.as_dict(), "tflops": tflops, "error": error,
                    "table": config == table_row}
            rows.append(line)
            if out:
                out.write(json.dumps(line) + "\n")
                out.flush()
        problem = f"window ({args.window}, 0)" if args.window else "varlen" if args.varlen else \
            "causal" if causal else "non-causal"
        print("\n".join(ranking(f"{args.kernel} D={d} {problem} S={args.seq_len} {args.dtype}", rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
