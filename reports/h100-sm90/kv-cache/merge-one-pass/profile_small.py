"""Session 7 scratch: per-kernel device time of each implementation on small decode cells,
inside CUDA-graph replays (torch.profiler, CUDA activity)."""
import json, statistics, sys, pathlib
sys.path.insert(0, ".")
from conformance.backends import activate
activate()
import torch
from torch.autograd import DeviceType
from torch.profiler import profile, ProfilerActivity
from conformance.bundled.benchmarks import decode, timing

out = pathlib.Path(sys.argv[1])
cells = ([decode.Cell("bf16", 16, 1, 1, c) for c in (1024, 4096, 16384, 32768)]
         + [decode.Cell("bf16", 16, 1, 8, c) for c in (1024, 4096)]
         + [decode.Cell("bf16", 64, 1, 1, 16384), decode.Cell("bf16", 64, 1, 8, 4096)])
impls = sys.argv[2].split(",")
COPIES = 16
for cell in cells:
    problems = [decode.problem(cell, seed=s) for s in range(COPIES)]
    for name in impls:
        if name in decode.CONTIGUOUS and cell.page_size != 16:
            continue
        if name == "flag_paged" and cell.seq_q != 1:
            continue
        try:
            replay = timing.graph_replay([decode._BUILDERS[name](cell, p) for p in problems])
            for _ in range(30):
                replay()
            torch.cuda.synchronize()
            starts = [torch.Event(enable_timing=True) for _ in range(20)]
            ends = [torch.Event(enable_timing=True) for _ in range(20)]
            for s, e in zip(starts, ends):
                s.record(); replay(); e.record()
            torch.cuda.synchronize()
            per_call_us = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3 / COPIES
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    replay()
                torch.cuda.synchronize()
            kernels = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA),
                             key=lambda e: e.time_range.start)
            by_name = {}
            for e in kernels:
                by_name.setdefault(e.name[:60], []).append(e.time_range.end - e.time_range.start)
            span = (kernels[-1].time_range.end - kernels[0].time_range.start) / (5 * COPIES)
            busy = sum(e.time_range.end - e.time_range.start for e in kernels) / (5 * COPIES)
            line = {"cell": cell.label, "impl": name, "event_us_per_call": per_call_us, "span_us_per_call": span,
                    "kernel_us_per_call": busy,
                    "kernels": {k: (len(v) / (5 * COPIES), statistics.median(v)) for k, v in by_name.items()}}
        except Exception as exc:
            line = {"cell": cell.label, "impl": name, "error": repr(exc)[:300]}
        print(json.dumps(line), flush=True)
        with out.open("a") as sink:
            sink.write(json.dumps(line) + "\n")
    del problems
    torch.cuda.empty_cache()
