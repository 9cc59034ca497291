"""Session 4: a decode call's host time from one tree (argv[1]): wall time per call of a
host-bound loop, and the benchmark's event-pair median, at three cells."""
import pathlib, statistics, sys, time
root = pathlib.Path(sys.argv[1]).resolve()
sys.path.insert(0, str(root))
from conformance.backends import activate
activate()
import torch
from conformance.bundled.benchmarks import decode
import conformance.bundled.kernels as k
assert pathlib.Path(k.__file__).resolve().is_relative_to(root), k.__file__

def wall_us(call, n=2000):
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        call()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return host

def event_us(call, n=300):
    make = lambda: torch.Event(torch.device("cuda", 0), enable_timing=True)
    for _ in range(30):
        call()
    torch.cuda.synchronize()
    events = [(make(), make()) for _ in range(n)]
    for start, end in events:
        start.record(); call(); end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3

for cell in [decode.Cell("bf16", 16, 1, 1, 1024), decode.Cell("bf16", 64, 4, 8, 4096), decode.Cell("bf16", 16, 1, 128, 1024)]:
    tensors = decode.problem(cell)
    for name in ["bundled", "bundled_unchecked"]:
        call = decode._BUILDERS[name](cell, tensors)
        print(f"{sys.argv[2]:6s} {cell.label:34s} {name:18s} host {wall_us(call):7.1f} us/call  event-pair {event_us(call):7.1f} us", flush=True)
    del tensors
    torch.cuda.empty_cache()
