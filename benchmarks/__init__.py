"""Benchmark of the bundled attention kernels next to torch SDPA (`nox -s benchmark`).

    python benchmarks/flash_benchmark.py [--quick] [--out DIR]

grid.py (what is measured, FLOP arithmetic), timing.py (CUDA events, peak memory),
implementations.py (bundled kernel, SDPA backends), report.py (benchmark.md and the
plot, from benchmark.jsonl only), svg.py (the plot).
"""
