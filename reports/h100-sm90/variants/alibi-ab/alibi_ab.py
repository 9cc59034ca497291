"""A/B of the ALiBi distance: fp32 positions (committed) against the integer distance converted per score."""
import os, sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from conformance.backends import activate
activate()
import torch, triton
from conformance.bundled import kernels
from conformance.bundled.mutants.transform import Edit, Mutant, load

NEW = '''    diagonal = (rows + (seq_k - seq_q)).to(tl.float32)
    distance = tl.abs(diagonal[:, None] - cols.to(tl.float32)[None, :])
    return slope * distance
'''
OLD = '''    distance = tl.abs(rows[:, None] + (seq_k - seq_q) - cols[None, :])
    return slope * distance.to(tl.float32)
'''
CAUSAL_FLOAT = '''    diagonal = (rows + (seq_k - seq_q)).to(tl.float32)
    distance = diagonal[:, None] - cols.to(tl.float32)[None, :]
    return slope * tl.abs(distance)
'''
variants = {"float (committed)": kernels,
            "int": load(Mutant("ab_alibi_int", "A/B", (Edit("scores.py", NEW, OLD),)))}
for d in (64, 128):
    h, b, s = 2048 // d, 4, 8192
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    slopes = torch.tensor([2 ** (-8 * (i + 1) / h) for i in range(h)], device="cuda")
    for name, module in [("plain", kernels)] + list(variants.items()):
        opts = {} if name == "plain" else {"alibi_slopes": slopes}
        with torch.no_grad():
            fwd = triton.testing.do_bench(lambda: module.flash_attention(q, k, v, causal=True, **opts), warmup=25, rep=200)
        out = module.flash_attention(q, k, v, causal=True, **opts)
        g = torch.randn_like(out)
        bwd = triton.testing.do_bench(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True), warmup=10, rep=200)
        print(f"D{d} {name:18s} fwd {fwd:.3f} ms  bwd {bwd:.3f} ms", flush=True)
