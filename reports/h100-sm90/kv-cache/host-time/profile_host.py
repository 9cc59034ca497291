"""Session 3 call 1: where a decode call's host time goes now (replay on), checked and
unchecked, on the GPU machine's own CPU; wall vs GPU time on a 512 MiB cell."""
import cProfile, io, os, pstats, sys, time, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from conformance.backends import activate
activate()
import torch
from conformance.bundled.benchmarks import decode
from conformance.bundled.kernels import replay
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / ".peers/FlagAttention/src"))
import statistics

def event_samples(call, kind, n=200):
    """Median ms of calls each between a pair of events of `kind` (the benchmark's loop)."""
    make = (lambda: torch.cuda.Event(enable_timing=True)) if kind == "cuda" else (
        lambda: torch.Event(torch.device("cuda", 0), enable_timing=True))
    for _ in range(30):
        call()
    torch.cuda.synchronize()
    events = [(make(), make()) for _ in range(n)]
    for start, end in events:
        start.record(); call(); end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3

def wall_us(call, n=400):
    for _ in range(30):
        call()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        call()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    total = (time.perf_counter() - t) / n * 1e6
    return host, total

def graph_us(call, n=100):
    call(); torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call()
    graph.replay(); torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        graph.replay()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n * 1e3

for cell in [decode.Cell("bf16", 16, 1, 1, 1024), decode.Cell("bf16", 16, 1, 1, 131072), decode.Cell("bf16", 16, 1, 128, 1024)]:
    tensors = decode.problem(cell)
    for name in ["bundled", "bundled_unchecked", "flag_paged"]:
        try:
            call = decode._BUILDERS[name](cell, tensors)
            host, total = wall_us(call)
            gpu = graph_us(decode._BUILDERS["bundled_unchecked"](cell, tensors)) if name == "bundled" else graph_us(call)
            print(f"{cell.label:34s} {name:18s} host {host:7.1f} us/call  host+drain {total:7.1f}  gpu(graph, unchecked for bundled) {gpu:7.1f} us", flush=True)
            print(f"{'':34s} {name:18s} event-pair samples: torch.cuda.Event {event_samples(call, 'cuda'):7.1f} us  torch.Event {event_samples(call, 'torch'):7.1f} us", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(cell.label, name, "error", repr(exc)[:300], flush=True)
    del tensors
    torch.cuda.empty_cache()

cell = decode.Cell("bf16", 16, 1, 1, 1024)
tensors = decode.problem(cell)
for name in ["bundled_unchecked", "bundled"]:
    call = decode._BUILDERS[name](cell, tensors)
    for _ in range(50):
        call()
    torch.cuda.synchronize()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(1000):
        call()
    profile.disable()
    torch.cuda.synchronize()
    text = io.StringIO()
    stats = pstats.Stats(profile, stream=text)
    stats.sort_stats("tottime").print_stats(45)
    stats.sort_stats("cumulative").print_stats(45)
    print("=" * 30, name, "(1000 calls)")
    print(text.getvalue())
print("replay counts", replay.counts)
