"""The probe's graph-mode illegal access with FlexAttention captured first: does making every copy
before any capture (prebuild) or never emptying torch's cache (keepcache) make it go away?"""
import sys
sys.path.insert(0, ".")
mode = sys.argv[1]
sys.argv = ["decode_probe.py", *sys.argv[2:]]
import torch
from benchmarks import decode_probe
decode = decode_probe.decode
if mode == "prebuild":
    real_problem = decode.problem
    def problem(cell, device="cuda", seed=0):
        tensors = real_problem(cell, device, seed)
        tensors.contiguous(cell.context)
        tensors.dense(cell.context)
        return tensors
    decode.problem = problem
elif mode in ("keepscratch", "countscratch"):
    import triton
    kept, calls = [], []
    def scratch(size, alignment, stream):
        calls.append((size, stream))
        buffer = torch.empty(size, dtype=torch.int8, device="cuda")
        if mode == "keepscratch":
            kept.append(buffer)
        return buffer
    triton.set_allocator(scratch)
    import atexit
    atexit.register(lambda: print(f"scratch requests: {len(calls)}, sizes {sorted(set(c[0] for c in calls))[:8]}", flush=True))
elif mode == "keepcache":
    torch.cuda.empty_cache = lambda: None
raise SystemExit(decode_probe.main())
