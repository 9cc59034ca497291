"""Prototype probe (not committed as code): would a packed batch gain from running its long
sequences on the dense kernel's tiles and its short ones on the varlen table's?  Times (CUDA
graph replays, median of 30) the whole batch as the kernels run it, and split into two packed
calls at a length threshold, each with its own launch configuration (overrides)."""
import json, sys
import torch
from conformance.bundled import kernels
from conformance.bundled.benchmarks.variants import varlen_lengths, varlen_offsets
from conformance.bundled.kernels import tuning, tuning_space
from contextlib import ExitStack


def graph_ms(fn, reps=30):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(3):
        g.replay()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(True), torch.cuda.Event(True)
        a.record(); g.replay(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def packed(lengths, H, D, dtype, grad):
    T = sum(lengths)
    xs = [torch.randn(T, H, D, device="cuda", dtype=dtype, requires_grad=grad) for _ in range(3)]
    return xs, varlen_offsets(lengths, "cuda"), max(lengths)


def call(group, overrides, direction):
    (q, k, v), off, longest = group
    def fwd():
        with ExitStack() as stack:
            for kernel, config in overrides.items():
                stack.enter_context(tuning_space.configured(kernel, config))
            return kernels.flash_attention_varlen(q, k, v, off, off, longest, longest, causal=True)
    if direction == "fwd":
        def run():
            with torch.no_grad():
                fwd()
        return run
    out = fwd()
    grad = torch.randn_like(out)
    def run():
        with ExitStack() as stack:
            for kernel, config in overrides.items():
                stack.enter_context(tuning_space.configured(kernel, config))
            torch.autograd.grad(out, (q, k, v), grad, retain_graph=True)
    return run


def main():
    out = open(sys.argv[1], "w")
    for dtype_name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
        for D, S in ((64, 8192), (128, 8192), (128, 16384)):
            H = 2048 // D
            lengths = varlen_lengths(S)
            dense_q = [torch.randn(32768 // S, H, S, D, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3)]
            pairs = sum(n * (n + 1) // 2 for n in lengths)
            dense_pairs = (32768 // S) * S * (S + 1) // 2
            for direction in ("fwd", "bwd"):
                if direction == "fwd":
                    def dense():
                        with torch.no_grad():
                            kernels.flash_attention(*dense_q, causal=True)
                else:
                    o = kernels.flash_attention(*dense_q, causal=True); g = torch.randn_like(o)
                    dense = lambda: torch.autograd.grad(o, dense_q, g, retain_graph=True)
                t_dense = graph_ms(dense)
                own = {k: tuning.launch_config(k, D, dtype_name) for k in ("fwd", "bwd_dq", "bwd_dkdv")}
                table = {k: tuning.launch_config(k, D, dtype_name, variants="varlen") for k in ("fwd", "bwd_dq", "bwd_dkdv")}
                small_dq = tuning.LaunchConfig(64, 64, num_warps=4, num_stages=2, descriptors=True)
                whole = packed(lengths, H, D, dtype, direction == "bwd")
                rec = dict(dtype=dtype_name, D=D, S=S, dir=direction, dense_ms=t_dense)
                rec["as_is"] = graph_ms(call(whole, {}, direction))
                rec["all_own_tiles"] = graph_ms(call(whole, own if direction == "fwd" else {}, direction))
                for T in (256, 1024, 2048):
                    long_l = [n for n in lengths if n >= T]; short_l = [n for n in lengths if n < T]
                    lg, sh = packed(long_l, H, D, dtype, direction == "bwd"), packed(short_l, H, D, dtype, direction == "bwd")
                    if direction == "fwd":
                        t_long = graph_ms(call(lg, {"fwd": own["fwd"]}, direction))
                        t_short = graph_ms(call(sh, {"fwd": table["fwd"]}, direction))
                    else:
                        t_long = graph_ms(call(lg, {}, direction))
                        t_short = graph_ms(call(sh, {"bwd_dq": small_dq}, direction))
                    rec[f"split{T}"] = [t_long, t_short, len(short_l)]
                for key in ("as_is", "all_own_tiles"):
                    rec[key + "_ratio"] = (pairs / rec[key]) / (dense_pairs / t_dense)
                for T in (256, 1024, 2048):
                    tl_, ts_, _ = rec[f"split{T}"]
                    rec[f"split{T}_ratio"] = (pairs / (tl_ + ts_)) / (dense_pairs / t_dense)
                print(json.dumps(rec), flush=True); out.write(json.dumps(rec) + "\n"); out.flush()
            del dense_q


if __name__ == "__main__":
    main()
