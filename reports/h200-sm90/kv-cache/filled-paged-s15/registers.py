"""Registers and shared memory of the decode split kernel for sm_90, compiled here (no GPU),
under the split-kernel configuration CFG (BLOCK_N x warps x stages, as
kernels.tuning.OVERRIDES sets it): paged (pages of 64) and contiguous, bf16, D 128, Sq 1,
H 32 / Hkv 8, unchecked, one split; TTGIR and PTX written to DUMP + paged/contig.
From the checkout: PYTHONPATH=.:... CFG=64x4x3 DUMP=/tmp/x- python registers.py"""
import os, tempfile
from dataclasses import replace
os.environ.pop("TRITON_INTERPRET", None)
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp()
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from conformance import backends
from conformance.compile_only.worker import CompileOnlyDriver
from conformance.compile_only.resources import usage
profile = backends.profile_by_key("cuda:sm_90")
driver.set_active(CompileOnlyDriver(GPUTarget(*profile.compile_target)))
backends.activate(replace(profile, device="cpu"))
import torch
from conformance.bundled import kernels
from conformance.bundled.kernels import launch

seen = []
def compiler(kernel, grid, *args, **kwargs):
    if kernel.__name__ != "decode_split_kernel":
        return
    compiled = kernel.warmup(*args, grid=grid, **kwargs)
    seen.append((kwargs.get("PAGED"), kwargs.get("ONE_SPLIT"), usage(compiled, "cuda"))); open(os.environ["DUMP"] + ("paged" if kwargs.get("PAGED") else "contig") + ".ttgir","w").write(compiled.asm["ttgir"]); open(os.environ["DUMP"] + ("paged" if kwargs.get("PAGED") else "contig") + ".ptx","w").write(compiled.asm["ptx"])
launch.set_launcher(compiler)
from conformance.bundled.kernels import tuning
from conformance.bundled.kernels.launch_tables import LaunchConfig
bn, w, st = map(int, os.environ["CFG"].split("x"))
tuning.OVERRIDES["decode_split"] = LaunchConfig(64, bn, num_warps=w, num_stages=st)
for page in (64, None):
    for seq_q in (1,):
        for splits in (1,):
            seen.clear()
            q = torch.randn(2, seq_q, 32, 128).to(torch.bfloat16)
            if page:
                cache = torch.randn(2 * 1024 // page, page, 8, 128).to(torch.bfloat16)
                table = torch.arange(2 * 1024 // page, dtype=torch.int32).reshape(2, -1)
                kernels.kv_cache_attention(q, cache, cache, torch.tensor([1000, 900], dtype=torch.int32), block_table=table,
                                           causal=True, num_splits=splits, check_values=False)
            else:
                cache = torch.randn(2, 1024, 8, 128).to(torch.bfloat16)
                kernels.kv_cache_attention(q, cache, cache, torch.tensor([1000, 900], dtype=torch.int32),
                                           causal=True, num_splits=splits, check_values=False)
            for paged, one, use in seen:
                print(f"page {page} Sq {seq_q} splits {splits}: {use}")
