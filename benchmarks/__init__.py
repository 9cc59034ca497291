"""Benchmark of the bundled attention kernels next to torch SDPA (`nox -s benchmark`).

    python benchmarks/flash_benchmark.py [--quick] [--out DIR]
    python benchmarks/variants_benchmark.py [--quick] [--out DIR]   # window, varlen, softcap, ALiBi

grid.py (what is measured, FLOP arithmetic), timing.py (CUDA events, peak memory),
implementations.py (bundled kernel, SDPA backends, compiled FlexAttention), run.py (the
measuring loop, env.json), report.py (benchmark.md and the plot, from benchmark.jsonl
only), svg.py (the plot); the variants benchmark's own: variants.py (its grid, visible
pairs and FLOPs, the implementations), variants_report.py (its ratios and targets).
"""
