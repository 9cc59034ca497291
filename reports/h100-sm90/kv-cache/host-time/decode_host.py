"""Where a decode call's host time goes on the GPU machine: wall time per call of back-to-back
calls (host-bound at small caches), the GPU time alone (CUDA graph replay), and a profile."""
import cProfile, io, os, pstats, sys, time, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from conformance.backends import activate
activate()
import torch
from conformance.bundled.benchmarks import decode

out = pathlib.Path(os.environ.get("OUT", "/tmp"))

def wall_us(call, n=300):
    for _ in range(20):
        call()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        call()
    host = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    total = (time.perf_counter() - t) / n * 1e6
    return host, total

def graph_us(call, n=200):
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
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(n):
        graph.replay()
    end.record(); torch.cuda.synchronize()
    return start.elapsed_time(end) / n * 1e3

names = ["bundled", "bundled_unchecked", "flag_paged"]
for cell in [decode.Cell("bf16", 16, 1, 1, 1024), decode.Cell("bf16", 16, 1, 8, 4096), decode.Cell("bf16", 16, 1, 32, 1024)]:
    tensors = decode.problem(cell)
    for name in names:
        try:
            call = decode._BUILDERS[name](cell, tensors)
            host, total = wall_us(call)
            try:
                gpu = graph_us(call) if name != "bundled" else float("nan")
            except Exception as exc:  # noqa: BLE001
                gpu = float("nan"); print("graph failed", name, exc)
            print(f"{cell.label:32s} {name:18s} host {host:7.1f} us/call  host+drain {total:7.1f}  gpu(graph) {gpu:7.1f} us", flush=True)
        except Exception as exc:  # noqa: BLE001
            print(cell.label, name, "error", exc)

cell = decode.Cell("bf16", 16, 1, 1, 1024)
tensors = decode.problem(cell)
call = decode._BUILDERS["bundled_unchecked"](cell, tensors)
for _ in range(50):
    call()
torch.cuda.synchronize()
profile = cProfile.Profile()
profile.enable()
for _ in range(500):
    call()
profile.disable()
torch.cuda.synchronize()
text = io.StringIO()
stats = pstats.Stats(profile, stream=text)
stats.sort_stats("tottime").print_stats(30)
stats.sort_stats("cumulative").print_stats(40)
print(text.getvalue())
