"""Where the bundled backward spends its time: CUDA time per kernel (needs a GPU).

    python benchmarks/profile_backward.py [--head-dims 64,128] [--seq-len 8192] [--dtype fp16]
                                          [--kernels-root DIR]

One forward, then the backward run under torch.profiler (after warm-up calls); prints
each kernel's mean time per backward and its share, per head dim and causal mode, at
the benchmark's shapes (B*S = 32k tokens, H*D = 2048).  --kernels-root takes the
kernels of another checkout (run this as a script, so nothing of this one is imported
before), so two versions compare on one card.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import itertools
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Run as a script from a clone: make the clone's `conformance` importable (as flash_benchmark.py).
if not __package__ and (ROOT / "conformance").is_dir() and str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after a --kernels-root checkout, which goes first


def _profile(flash_attention, d: int, s: int, causal: bool, dtype, calls: int = 10) -> dict[str, float]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    heads, batch = 2048 // d, 32768 // s
    q, k, v = (torch.randn(batch, heads, s, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
    out = flash_attention(q, k, v, causal=causal)
    grad = torch.randn_like(out)
    for _ in range(3):
        torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
        torch.cuda.synchronize()
    per_kernel = collections.Counter()
    for event in prof.key_averages():
        if event.device_type.name == "CUDA" or getattr(event, "device_time_total", 0):
            per_kernel[event.key] += getattr(event, "device_time_total", 0.0) / calls / 1000.0
    return {name: ms for name, ms in per_kernel.items() if ms > 0}


def _kernels_of(checkout: pathlib.Path | None):
    """The bundled kernels package of the checkout at `checkout` (None: this harness's own)."""
    if checkout is None:
        return importlib.import_module("conformance.bundled.kernels")
    sys.path.insert(0, str(checkout))
    if not (checkout / "conformance" / "bundled").is_dir():
        return importlib.import_module("kernels")  # a checkout from before conformance.bundled
    kernels = importlib.import_module("conformance.bundled.kernels")
    if not pathlib.Path(kernels.__file__).resolve().is_relative_to(checkout):
        raise SystemExit(f"profile_backward: another checkout's conformance is already imported "
                         f"({kernels.__file__}); run this file as a script")
    return kernels


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script (the docs' command reference is generated from it)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--head-dims", default="64,128", help="comma-separated head dims")
    parser.add_argument("--seq-len", type=int, default=8192, help="S of every problem")
    parser.add_argument("--dtype", default="fp16", choices=("fp16", "bf16"), help="input dtype")
    parser.add_argument("--kernels-root", type=pathlib.Path, help="a checkout whose kernels to profile")
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    import torch

    kernels = _kernels_of(args.kernels_root.resolve() if args.kernels_root else None)

    if not torch.cuda.is_available():
        print("profile_backward: needs a GPU", file=sys.stderr)
        return 2
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    print(f"kernels from {pathlib.Path(kernels.__file__).parent}")
    for d, causal in itertools.product((int(x) for x in args.head_dims.split(",")), (False, True)):
        times = _profile(kernels.flash_attention, d, args.seq_len, causal, dtype)
        total = sum(times.values())
        flops = 4 * (32768 // args.seq_len) * (2048 // d) * args.seq_len ** 2 * d * (0.5 if causal else 1) * 2.5
        print(f"\nD={d} {'causal' if causal else 'non-causal'} S={args.seq_len} {args.dtype}: "
              f"{total:.3f} ms per backward, {flops / total / 1e9:.0f} TFLOP/s")
        for name, ms in sorted(times.items(), key=lambda item: -item[1]):
            print(f"  {ms:8.3f} ms  {100 * ms / total:5.1f} %  {name[:90]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
