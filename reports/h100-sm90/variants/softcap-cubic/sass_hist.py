"""Instruction histogram (SASS, sm_90, triton 3.6 locally) of the flash forward kernel:
plain causal vs softcap causal, bf16, D given. PYTHONPATH=. python sass_hist.py D"""
import os, sys, tempfile, collections, re
from dataclasses import replace
os.environ.pop("TRITON_INTERPRET", None)
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.tools.disasm import get_sass
from conformance import backends
from conformance.compile_only.worker import CompileOnlyDriver
from conformance.compile_only.resources import usage
profile = backends.profile_by_key("cuda:sm_90")
driver.set_active(CompileOnlyDriver(GPUTarget(*profile.compile_target)))
backends.activate(replace(profile, device="cpu"))
import torch
from conformance.bundled import kernels
from conformance.bundled.kernels import launch
D = int(sys.argv[1]) if len(sys.argv) > 1 else 128
WANT = sys.argv[2] if len(sys.argv) > 2 else "flash_forward_kernel"
seen = []
def compiler(kernel, grid, *args, **kwargs):
    if kernel.__name__ != WANT:
        return
    seen.append(kernel.warmup(*args, grid=grid, **kwargs))
launch.set_launcher(compiler)
def hist(c):
    sass = get_sass(c.asm["cubin"])
    ops = collections.Counter()
    for line in sass.splitlines():
        m = re.search(r"\s(@!?P\d+\s+)?([A-Z][A-Z0-9]+)(\.[A-Z0-9.]+)?\s", line)
        if m and ";" in line:
            ops[m.group(2)] += 1
    return ops
q = torch.randn(1, 2, 1024, D).to(torch.bfloat16).requires_grad_(WANT != "flash_forward_kernel")
VARIANTS = {"plain": {}, "softcap": {"softcap": 30.0},
            "alibi": {"alibi_slopes": torch.tensor([0.5, 0.25])}, "varlen": {}}
for name in (os.environ.get("VARIANTS") or "plain,softcap").split(","):
    kw = VARIANTS[name]
    seen.clear()
    try:
        if name == "varlen":
            packed = q[0].transpose(0, 1).contiguous()
            offsets = torch.tensor([0, 300, 1024], dtype=torch.int32)
            out = kernels.flash_attention_varlen(packed, packed, packed, offsets, offsets, 724, 724, causal=True)
        else:
            out = kernels.flash_attention(q, q, q, causal=True, **kw)
        if WANT != "flash_forward_kernel":
            out.sum().backward()
    except Exception as e:
        print(name, "raised", repr(e)[:300])
    for c in seen:
        if os.environ.get("DUMP"):
            open(os.environ["DUMP"] + "." + name, "w").write(get_sass(c.asm["cubin"]))
        h = hist(c)
        keys = ["MUFU", "FFMA", "FMUL", "FADD", "FSEL", "FSETP", "FMNMX", "HGMMA", "LOP3", "IMAD", "SEL", "F2FP", "ISETP", "LDGSTS", "LDG", "SHFL"]
        print(name, usage(c, "cuda"), "total", sum(h.values()), {k: h[k] for k in keys if h[k]})
if os.environ.get("DUMP"):
    pass
