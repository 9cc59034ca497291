"""What one decode call's host time is made of, on the GPU machine's own CPU: each part timed
alone in a loop (the parts of kv_cache_attention, a Triton launch as the JIT runs it, and the
same launch through the compiled kernel's launcher, bypassing the JIT's argument binding)."""
import sys, time, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from conformance.backends import activate
activate()
import torch, triton
from conformance.bundled.benchmarks import decode
from conformance.bundled.kernels import kv_cache as kv, launch as launch_module
from conformance.bundled.kernels.targets import current_target
from conformance.bundled.kernels.allocation import new_output

cell = decode.Cell("bf16", 16, 1, 1, 1024)
t = decode.problem(cell)
call = lambda: kv.kv_cache_attention(t.q, t.k_pages, t.v_pages, t.cache_seqlens, block_table=t.block_table, causal=True, check_values=False)
call(); torch.cuda.synchronize()

def per_call_us(fn, n=2000):
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - start) / n * 1e6
    torch.cuda.synchronize()
    return host

from conformance.bundled.kernels import replay
previous = replay.set_enabled(False)
print(f"whole call (unchecked, JIT dispatch)  {per_call_us(call):7.1f} us")
print(f"whole call (checked, JIT dispatch)    {per_call_us(lambda: kv.kv_cache_attention(t.q, t.k_pages, t.v_pages, t.cache_seqlens, block_table=t.block_table, causal=True), 500):7.1f} us")
replay.set_enabled(previous)
print(f"replays enabled: {previous}")
print(f"whole call (unchecked)      {per_call_us(call):7.1f} us")
checked = lambda: kv.kv_cache_attention(t.q, t.k_pages, t.v_pages, t.cache_seqlens, block_table=t.block_table, causal=True)
print(f"whole call (checked)        {per_call_us(checked, 500):7.1f} us")
args = (t.q, t.k_pages, t.v_pages, t.cache_seqlens, t.block_table, None, None, True, kv.NO_WINDOW, 0.0, None, None, 0, None, None, False)
print(f"_check_arguments unchecked  {per_call_us(lambda: kv._check_arguments(*args)):7.1f} us")
args_checked = args[:-1] + (True,)
print(f"_check_arguments checked    {per_call_us(lambda: kv._check_arguments(*args_checked), 500):7.1f} us")
print(f"current_target()            {per_call_us(current_target):7.1f} us")
print(f"torch.empty (16 KiB)        {per_call_us(lambda: torch.empty(4096, device='cuda')):7.1f} us")
print(f"new_output                  {per_call_us(lambda: new_output((4096,), torch.float32, t.q.device)):7.1f} us")
problem = kv._check_arguments(*args)
print(f"_attend                     {per_call_us(lambda: kv._attend(t.q, t.k_pages, t.v_pages, problem)):7.1f} us")

launches = []
previous = launch_module.set_launcher(lambda kernel, grid, *a, **k: launches.append((kernel, grid, a, k)))
kv._attend(t.q, t.k_pages, t.v_pages, problem)
launch_module.set_launcher(previous)
for kernel, grid, a, k in launches:
    name = kernel.fn.__name__ if hasattr(kernel, "fn") else str(kernel)
    print(f"{name}: {len(a)} positional + {len(k)} keyword arguments, grid {grid}")
    print(f"  kernel[grid](...)         {per_call_us(lambda: kernel[grid](*a, **k)):7.1f} us")
    print(f"  replay.launch(...)        {per_call_us(lambda: replay.launch(kernel, grid, a, k)):7.1f} us")
    compiled = kernel[grid](*a, **k)
    device = torch.cuda.current_device()
    try:
        binder = kernel.device_caches[device][4]
        bound, _, _ = binder(*a, **k)
        values = tuple(bound.values())
        stream = torch.cuda.current_stream().cuda_stream
        run = compiled.run
        fast = lambda: run(grid[0], grid[1], 1, stream, compiled.function, compiled.packed_metadata, None, None, None, *values)
        print(f"  compiled.run(...) bypass  {per_call_us(fast):7.1f} us")
        print(f"  binder(...) alone         {per_call_us(lambda: binder(*a, **k)):7.1f} us")
    except Exception as exc:  # noqa: BLE001
        print("  bypass failed:", type(exc).__name__, exc)

print("replay counts", replay.counts)
