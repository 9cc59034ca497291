"""Registers and shared memory of the decode split kernel for sm_90, compiled here (no GPU):
paged (pages of 16 and 64) and contiguous, bf16, D 128, Sq 1 and 4, H 32 / Hkv 8, unchecked,
one split (B 128-like) and two. Run from the checkout with PYTHONPATH=.: python registers.py"""
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
    seen.append((kwargs.get("PAGED"), kwargs.get("ONE_SPLIT"), usage(compiled, "cuda")))
launch.set_launcher(compiler)
for page in (16, 64, None):
    for seq_q in (1, 4):
        for splits in (1, 2):
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
