"""A/B of the softcap's tanh on the GPU: plain causal against softcap 30 with each tanh the
kernels have had for fp16 / bf16 inputs: the committed tanh_16bit (reciprocal as rsqrt), its
division form, NVIDIA's tanh instruction (mutant softcap_hardware_tanh) and tanh_fp32.  One call, all taking turns (benchmarks.timing)."""
import sys, pathlib
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
from conformance.backends import activate
activate()
import torch
from conformance.bundled import kernels
from conformance.bundled.benchmarks import timing
from conformance.bundled.mutants.transform import Edit, Mutant, load

from conformance.bundled.mutants.definitions import BY_NAME
CHOICE = "    return TANH_16BIT.value\n"
RSQRT = "    r = tl.math.rsqrt(denominator * denominator)\n"
modules = {"plain": kernels, "softcap tanh_16bit rsqrt (committed)": kernels,
           "softcap tanh_16bit division": load(Mutant("ab_div", "A/B", (Edit("scores.py", RSQRT, "    r = 1.0 / denominator\n"),))),
           "softcap tanh instruction": load(BY_NAME["softcap_hardware_tanh"]),
           "softcap tanh_fp32": load(Mutant("ab_fp32", "A/B", (Edit("scores.py", CHOICE, "    return TANH_FP32.value\n"),)))}
policy = timing.RepetitionPolicy(target_ms=150.0, rounds=3)
for dtype in (torch.bfloat16, torch.float16):
    for d in (64, 128):
        h, b, s = 2048 // d, 32768 // 8192, 8192
        q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3))
        g = torch.randn(b, h, s, d, device="cuda", dtype=dtype)
        fwd, bwd = {}, {}
        for name, module in modules.items():
            opts = {} if name == "plain" else {"softcap": 30.0}
            def forward(module=module, opts=opts):
                with torch.no_grad():
                    return module.flash_attention(q, k, v, causal=True, **opts)
            out = module.flash_attention(q, k, v, causal=True, **opts)
            fwd[name] = forward
            bwd[name] = lambda out=out: torch.autograd.grad(out, (q, k, v), g, retain_graph=True)
        for direction, calls in (("fwd", fwd), ("bwd", bwd)):
            results = timing.interleaved_medians(calls, policy)
            plain = results["plain"][0]
            for name, result in results.items():
                if isinstance(result, BaseException):
                    print(f"{dtype} D{d} {direction} {name:26s} error {result}", flush=True)
                    continue
                print(f"{str(dtype)[6:]:9s} D{d:<4d} {direction} {name:26s} {result[0]:.3f} ms  {100 * (result[0] / plain - 1):+6.1f} % over plain", flush=True)
