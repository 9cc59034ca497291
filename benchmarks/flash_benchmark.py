"""Forward and backward TFLOP/s of the bundled flash_attention next to torch SDPA.

    python benchmarks/flash_benchmark.py [--seqlens 1024,4096,16384] [--head-dims 64,128]
                                         [--dtype bf16] [--out DIR]

Shapes follow FlagAttention's benchmark: batch = 32k / seqlen tokens, heads =
2048 / head_dim, so every row moves the same number of tokens.  FLOPs count the
matmuls only (4·B·H·Sq·Sk·D forward, halved when causal; backward 2.5x forward).
Times are medians of repeated launches timed with device events
(`triton.testing.do_bench`).  Needs a GPU.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import torch
import triton

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from conformance.backends import activate  # noqa: E402

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOKENS, MODEL_WIDTH = 32 * 1024, 2048


def attention_flops(batch, heads, seqlen, head_dim, causal, direction):
    flops = 4.0 * batch * heads * seqlen * seqlen * head_dim
    flops *= 0.5 if causal else 1.0
    return flops * (2.5 if direction == "bwd" else 1.0)


def sdpa_backends():
    """SDPA implementations to compare against, by name -> context manager factory."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return {
        "sdpa-flash": lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION),
        "sdpa-cudnn": lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION),
    }


def time_ms(fn, grads=None):
    return triton.testing.do_bench(fn, warmup=25, rep=100, grad_to_none=grads, return_mode="median")


def measure(impl, q, k, v, causal):
    """Median forward and backward milliseconds of one implementation."""
    do = torch.randn_like(q)
    out = impl(q, k, v, causal)
    fwd = time_ms(lambda: impl(q, k, v, causal))
    bwd = time_ms(lambda: out.backward(do, retain_graph=True), grads=[q, k, v])
    return fwd, bwd


def implementations():
    import kernels

    impls = {"triton (bundled)": lambda q, k, v, c: kernels.flash_attention(q, k, v, causal=c)}
    for name, ctx in sdpa_backends().items():
        def run(q, k, v, c, ctx=ctx):
            with ctx():
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=c)
        impls[name] = run
    return impls


def bench(seqlens, head_dims, dtype_name):
    rows = []
    for head_dim in head_dims:
        for seqlen in seqlens:
            for causal in (False, True):
                batch, heads = max(1, TOKENS // seqlen), MODEL_WIDTH // head_dim
                shape = (batch, heads, seqlen, head_dim)
                gen = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (torch.randn(shape, device="cuda", dtype=DTYPES[dtype_name], generator=gen)
                           .requires_grad_() for _ in range(3))
                for name, impl in implementations().items():
                    try:
                        fwd_ms, bwd_ms = measure(impl, q, k, v, causal)
                    except Exception as exc:  # a backend that cannot run this shape
                        rows.append(dict(impl=name, seqlen=seqlen, head_dim=head_dim, causal=causal,
                                         dtype=dtype_name, error=f"{type(exc).__name__}: {exc}"[:120]))
                        continue
                    rows.append(dict(
                        impl=name, seqlen=seqlen, head_dim=head_dim, causal=causal, dtype=dtype_name,
                        batch=batch, heads=heads, fwd_ms=fwd_ms, bwd_ms=bwd_ms,
                        fwd_tflops=attention_flops(*shape, causal, "fwd") / fwd_ms / 1e9,
                        bwd_tflops=attention_flops(*shape, causal, "bwd") / bwd_ms / 1e9,
                    ))
                    print(json.dumps(rows[-1]), flush=True)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqlens", default="1024,4096,16384")
    parser.add_argument("--head-dims", default="64,128")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        parser.error("a CUDA GPU is required")
    activate()
    rows = bench([int(s) for s in args.seqlens.split(",")],
                 [int(d) for d in args.head_dims.split(",")], args.dtype)
    from tabulate import tabulate

    cols = ["impl", "dtype", "head_dim", "seqlen", "causal", "fwd_tflops", "bwd_tflops", "error"]
    table = tabulate([[r.get(c, "") for c in cols] for r in rows], headers=cols, floatfmt=".1f")
    print(f"\n{torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}\n")
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "benchmark.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (args.out / "benchmark.txt").write_text(table + "\n")


if __name__ == "__main__":
    main()
