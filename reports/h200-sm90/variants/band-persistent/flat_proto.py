"""Prototype (not committed): does a persistent, flattened band forward beat one program a
query tile?  Causal window (LEFT, 0), Sq = Sk, contiguous (B, H, S, D) tensors."""
import json, os, sys
import torch, triton, triton.language as tl
from conformance.bundled.kernels.blocks import (LOG2_E, finished_rows, mma, narrow, online_softmax_weights,
                                                raw_scores)


@triton.jit
def _band_masked(s, key_start, whole_start, whole_end, rows, cols, left):
    if (key_start < whole_start) | (key_start >= whole_end):
        diag = rows[:, None]
        s = tl.where((cols[None, :] <= diag) & (cols[None, :] >= diag - left) & (cols[None, :] >= 0), s,
                     float("-inf"))
    return s


@triton.jit
def band_fwd(Q, K, V, O, LSE, sm_scale, S, left, n_band, tiles_per_head,
             BM: tl.constexpr, BN: tl.constexpr, D: tl.constexpr, STAGES: tl.constexpr,
             QT: tl.constexpr, MODE: tl.constexpr):
    # MODE 0: variable band (the bundled kernel's loop), 1: fixed count n_band, 2: fixed and
    # the QT-tile loop flattened, 3: fixed, QT-tile loop not flattened
    bh = tl.program_id(1)
    base = bh.to(tl.int64) * S * D
    dims = tl.arange(0, D)
    qk_scale = sm_scale * LOG2_E
    for t in tl.range(0, QT, flatten=(MODE == 2) | (MODE == 4)):
        tile = tl.program_id(0) * QT + t
        tile = tl.minimum(tile, tiles_per_head - 1)  # a ragged last program redoes the last tile
        row0 = tile * BM
        rows = row0 + tl.arange(0, BM)
        q = tl.load(Q + base + rows[:, None] * D + dims[None, :], mask=rows[:, None] < S, other=0.0)
        row_max = tl.full((BM,), float("-inf"), tl.float32)
        row_sum = tl.zeros((BM,), tl.float32)
        row_err = tl.zeros((BM,), tl.float32)
        acc = tl.zeros((BM, D), tl.float32)
        last_row = tl.minimum(row0 + BM, S) - 1
        first = ((row0 - left) // BN) * BN  # floor division also for negatives
        whole_start = tl.cdiv(tl.maximum(last_row - left, 0), BN) * BN
        whole_end = (row0 + 1) // BN * BN
        if MODE == 0:
            first = tl.maximum(first, 0)
            stop = tl.minimum(last_row + 1, S)
        else:
            stop = first + n_band * BN
        if MODE == 4:  # bounds invariant to the outer loop, as triton's loop flattening needs
            lo = 0
            hi = n_band
            step = 1
        else:
            lo = first
            hi = stop
            step = BN
        for it in tl.range(lo, hi, step, num_stages=STAGES):
            key_start = it
            if MODE == 4:
                key_start = first + it * BN
            cols = key_start + tl.arange(0, BN)
            inside = (cols >= 0) & (cols < S)
            k = tl.load(K + base + cols[:, None] * D + dims[None, :], mask=inside[:, None], other=0.0)
            s = raw_scores(q, k, False)
            s = _band_masked(s, key_start, whole_start, whole_end, rows, cols, left)
            p, rescale, row_max, row_sum, row_err = online_softmax_weights(s, row_max, row_sum, row_err, qk_scale)
            v = tl.load(V + base + cols[:, None] * D + dims[None, :], mask=inside[:, None], other=0.0)
            acc = mma(narrow(p, v.dtype, False), v, acc * rescale[:, None], False)
        out, lse = finished_rows(acc, row_max, row_sum, sm_scale)
        tl.store(O + base + rows[:, None] * D + dims[None, :], out.to(O.dtype.element_ty), mask=rows[:, None] < S)
        tl.store(LSE + bh * S + rows, lse, mask=rows < S)


def run(q, k, v, left, BM, BN, warps, stages, QT, mode):
    B, H, S, D = q.shape
    o = torch.empty_like(q)
    lse = torch.empty(B, H, S, device=q.device, dtype=torch.float32)
    tiles = triton.cdiv(S, BM)
    # steady tiles: first = floor((row0 - left)/BN)*BN, stop = row0 + BM  (BM % BN == 0)
    n_band = triton.cdiv(BM + left, BN) + (1 if left % BN else 0)
    grid = (triton.cdiv(tiles, QT), B * H)
    kern = band_fwd[grid](q, k, v, o, lse, D ** -0.5, S, left, n_band, tiles, BM=BM, BN=BN, D=D, STAGES=stages,
                          QT=QT, MODE=mode, num_warps=warps, num_stages=stages)
    return o, lse, kern


def ir_stats(kern):
    import re
    try:
        t = kern.asm["ttgir"]
        ops = re.findall(r"(scf\.for|ttg\.async_copy_global_to_local|ttng\.async_tma_copy_global_to_local|ttg\.async_wait)", t)
        return {op: ops.count(op) for op in set(ops)} | {"regs": kern.n_regs, "spills": kern.n_spills,
                                                         "shared": kern.metadata.shared}
    except Exception as e:
        return {"ir_error": repr(e)[:200]}


def timed(fn, reps=30):
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


MODES = ((0, 1), (1, 1), (4, 1), (4, 2), (4, 4), (4, 8))


def long_loops(out):
    # the 64x64 tile's rate in long loops: the prototype's variable band as plain causal (left = S)
    from conformance.bundled.kernels import flash_attention
    for D in (128, 64):
        S = 8192
        B, H = 32768 // S, 2048 // D
        q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        t_d = timed(lambda: flash_attention(q, k, v, causal=True))
        for BM, BN, warps, stages in ((64, 64, 4, 3 if D == 128 else 2), (128, 64, 8, 3), (128, 128, 8, 3)):
            t = timed(lambda: run(q, k, v, S, BM, BN, warps, stages, 1, 0))
            rec = dict(long_loops=True, D=D, S=S, BM=BM, BN=BN, warps=warps, stages=stages, ms=t, dense_ms=t_d,
                       vs_dense=t / t_d)
            print(json.dumps(rec)); out.write(json.dumps(rec) + "\n"); out.flush()


def main():
    from conformance.bundled.kernels import flash_attention
    out = open(sys.argv[1], "w")
    left = int(os.environ.get("LEFT", 1024))
    long_loops(out)
    for dtype in (torch.bfloat16,):
        for D, S in ((128, 8192), (64, 8192)):
            B, H = 32768 // S, 2048 // D
            torch.manual_seed(0)
            q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=dtype) for _ in range(3))
            qs, ks, vs = q, k, v
            pairs = B * (sum(min(i, left) + 1 for i in range(S)))
            flops = 4 * D * H * pairs
            ref = None
            try:
                fa = lambda: flash_attention(qs, ks, vs, causal=True, window_size=(left, 0))
                ref = fa()
                t_b = timed(fa)
                dense = lambda: flash_attention(qs, ks, vs, causal=True)
                t_d = timed(dense)
                dense_pairs = B * S * (S + 1) // 2
                ideal = t_d * pairs / dense_pairs
                rec = dict(D=D, S=S, impl="bundled", ms=t_b, tflops=flops / t_b / 1e9, vs_ideal=t_b / ideal,
                           dense_ms=t_d)
                print(json.dumps(rec)); out.write(json.dumps(rec) + "\n"); out.flush()
            except Exception as e:
                print("bundled failed", repr(e)[:400]); ideal = None
            configs = [(64, 64, 4, 3 if D == 128 else 2), (128, 64, 8, 3)]
            for BM, BN, warps, stages in configs:
                for mode, QT in MODES:
                    try:
                        fn = lambda: run(q, k, v, left, BM, BN, warps, stages, QT, mode)
                        o, lse, kern = fn()
                        err = None
                        if ref is not None:
                            r = ref[0] if isinstance(ref, tuple) else ref
                            err = (o.float() - r.float()).abs().max().item()
                        t = timed(fn)
                        rec = dict(D=D, S=S, BM=BM, BN=BN, warps=warps, stages=stages, mode=mode, QT=QT, ms=t,
                                   tflops=flops / t / 1e9, vs_ideal=(t / ideal if ideal else None), maxdiff=err,
                                   **ir_stats(kern))
                    except Exception as e:
                        rec = dict(D=D, S=S, BM=BM, BN=BN, warps=warps, stages=stages, mode=mode, QT=QT,
                                   error=repr(e)[:300])
                    print(json.dumps(rec)); out.write(json.dumps(rec) + "\n"); out.flush()
            del q, k, v


if __name__ == "__main__":
    main()
