"""Session 7 scratch: the merge kernel's device time under tile-size and warp variants,
inside CUDA-graph replays of the whole unchecked call (torch.profiler, CUDA activity)."""
import json, statistics, sys, pathlib
sys.path.insert(0, ".")
from conformance.backends import activate
activate()
import torch
from torch.autograd import DeviceType
from torch.profiler import profile, ProfilerActivity
from conformance.bundled.benchmarks import decode, timing
from conformance.bundled.kernels import decode_plan, tuning
from conformance.bundled.kernels.launch_tables import LaunchConfig

out = pathlib.Path(sys.argv[1])
cells = ([decode.Cell("bf16", 16, 1, 1, c) for c in (1024, 4096, 16384)]
         + [decode.Cell("bf16", 16, 1, 8, c) for c in (1024, 4096)]
         + [decode.Cell("bf16", 16, 4, 1, 4096), decode.Cell("bf16", 16, 1, 32, 1024)])
COPIES = 16
for cell in cells:
    problems = [decode.problem(cell, seed=s) for s in range(COPIES)]
    for elements in (1024, 2048, 4096, 8192):
        for warps in (1, 2, 4):
            decode_plan.MERGE_TILE_ELEMENTS = elements
            decode_plan._plan.cache_clear()
            tuning.OVERRIDES["decode_merge"] = LaunchConfig(16, 64, num_warps=warps, num_stages=1)
            try:
                replay = timing.graph_replay([decode._bundled(cell, p, check_values=False) for p in problems])
                for _ in range(30):
                    replay()
                torch.cuda.synchronize()
                starts = [torch.Event(enable_timing=True) for _ in range(20)]
                ends = [torch.Event(enable_timing=True) for _ in range(20)]
                for s, e in zip(starts, ends):
                    s.record(); replay(); e.record()
                torch.cuda.synchronize()
                per_call = statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)) * 1e3 / COPIES
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        replay()
                    torch.cuda.synchronize()
                by_name = {}
                for e in prof.events():
                    if e.device_type == DeviceType.CUDA:
                        by_name.setdefault(e.name[:40], []).append(e.time_range.end - e.time_range.start)
                line = {"cell": cell.label, "elements": elements, "warps": warps, "event_us_per_call": per_call,
                        "kernels": {k: statistics.median(v) for k, v in by_name.items()}}
            except Exception as exc:
                line = {"cell": cell.label, "elements": elements, "warps": warps, "error": repr(exc)[:300]}
            finally:
                tuning.OVERRIDES.pop("decode_merge", None)
            print(json.dumps(line), flush=True)
            with out.open("a") as sink:
                sink.write(json.dumps(line) + "\n")
            del replay
    del problems
    torch.cuda.empty_cache()
