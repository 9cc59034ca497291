"""Which variant's profiled replay meets the illegal access (the probe's --profile path, one cell)."""
import sys
sys.path.insert(0, ".")
sys.argv = ["decode_probe.py", *sys.argv[1:]]
import torch
from benchmarks import decode_probe
timing = decode_probe.timing
real = timing.kernel_times
seen = iter(range(1000))
def traced(call):
    index = next(seen)
    torch.cuda.synchronize()
    print(f"profiling variant #{index}", flush=True)
    result = real(call)
    torch.cuda.synchronize()
    print(f"  #{index} ok: {sorted(result)}", flush=True)
    return result
timing.kernel_times = traced
original_probe = decode_probe.probe
def probe(cell, splits, peers, configs, timing_mode, profiled):
    lines = original_probe(cell, splits, peers, configs, timing_mode, profiled)
    return lines
raise SystemExit(decode_probe.main())
