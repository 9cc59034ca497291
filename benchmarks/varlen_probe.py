"""Where the varlen forward loses against the dense one (a diagnostic; needs a GPU).

    python benchmarks/varlen_probe.py

bf16, causal, D 64 and 128, H * D = 2048: the dense kernel on 4 x 8192 tokens, and the varlen
kernel on the same 32k tokens packed as 4 equal sequences and as the variants benchmark's mixed
lengths (shuffled, longest first, shortest first).  Each line: the wall time of a call
(triton.testing.do_bench) and its TFLOP/s over the visible pairs, beside the GPU time of each
CUDA kernel and copy (torch.profiler, 10 calls): wall time the kernels do not account for is
the host's (validation, launches) while the GPU waits.
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import triton  # noqa: E402

from conformance.bundled.benchmarks.variants import varlen_lengths, varlen_offsets  # noqa: E402
from conformance.bundled import kernels  # noqa: E402

def kernel_ms(fn, n=10) -> dict:
    """Milliseconds of GPU time per call of each kernel and copy `fn` runs."""
    fn(); torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    per = {}
    for e in prof.key_averages():
        if e.device_time_total > 0:
            per[e.key[:60]] = e.device_time_total / n / 1000
    return per

for D in (64, 128):
    H = 2048 // D
    mixed = varlen_lengths(8192)
    for name, lengths in [("equal 4x8192", [8192] * 4), ("mixed shuffled", mixed),
                          ("mixed longest first", sorted(mixed, reverse=True)), ("mixed shortest first", sorted(mixed))]:
        T = sum(lengths)
        q, k, v = (torch.randn(T, H, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        off = varlen_offsets(lengths, "cuda")
        f = lambda: kernels.flash_attention_varlen(q, k, v, off, off, max(lengths), max(lengths), causal=True)
        ms = triton.testing.do_bench(f, warmup=25, rep=200)
        pairs = sum(n * (n + 1) // 2 for n in lengths)
        per = kernel_ms(f)
        print(f"D{D} varlen {name:22s} wall {ms:.3f} ms  {4*H*D*pairs/ms/1e9:6.1f} TFLOP/s  kernels {per}", flush=True)
    q, k, v = (torch.randn(4, H, 8192, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    f = lambda: kernels.flash_attention(q, k, v, causal=True)
    ms = triton.testing.do_bench(f, warmup=25, rep=200)
    print(f"D{D} dense 4x8192 wall {ms:.3f} ms  {4*H*D*4*8192*8193/2/ms/1e9:6.1f} TFLOP/s  kernels {kernel_ms(f)}", flush=True)
