"""Iluvatar CoreX GPUs (BI-V100, BI-V150, MR-V100, ...), through their CUDA-compatible
torch and Triton builds.

What public sources say, and how sure it is:
* torch: CoreX builds of torch set `torch.corex = True` and use the "cuda" device
  type; torch.version.hip is None (FlagTree's Iluvatar Triton backend tests exactly
  this: third_party/iluvatar/backend/driver.py, `is_corex()`; FlagGems names the
  vendor "iluvatar" with device "cuda" and query tool `ixsmi`:
  src/flag_gems/runtime/backend/_iluvatar/__init__.py).  Certain for FlagTree's build.
* triton: the Iluvatar driver reports GPUTarget("cuda", capability, 64) -- a
  64-wide warp -- and its compiler backend calls itself "corex" (CorexBackend,
  backend_name "corex"); the extension module carries `triton._C.libtriton.iluvatar`
  and FlagTree writes FLAGTREE_BACKEND = "iluvatar" into triton._flagtree_backend
  (FlagTree: third_party/iluvatar/backend/{driver,compiler}.py).
* architectures: the compiler maps capability 70 -> ivcore10, 71 -> ivcore11,
  80 -> ivcore20 (FlagTree compiler.py `sm_arch_from_capability` and its LLVM target
  selection).  Which product is which ivcore is not published officially; a
  third-party note says BI-V100 = ivcore10 and BI-V150 = ivcore11 (unverified).
* dtypes: the Big Island GPGPU is specified with fp16 and bf16 throughput (147
  TFLOPS each: Iluvatar's 2021 announcement as reported by TechPowerUp and
  geektopia.es, not a datasheet), and
  FlagGems benchmarks its attention in fp16 and bf16 on Iluvatar: bf16 is listed.
  fp8: FlagTree's CorexOptions list fp8e5 always and fp8e4nv for capability 71
  *in software*; no fp8 matrix unit is documented, so fp8 is not listed.
* shared memory and registers per block are not published in any source found: the
  profile leaves them unknown (the compile-only tier cannot target CoreX with the
  PyPI triton anyway; it needs Iluvatar's own build).
* FlagGems' flash-attention forward test returns before comparing lse on Iluvatar
  ("TODO(Iluvatar)", tests/test_attention_ops.py): lse accuracy there is unverified
  upstream.  This harness judges lse like every other tensor.
"""

from __future__ import annotations

from conformance.backends.profile import HEAD_DIMS, BackendProfile
from conformance.bundled.kernels.targets import Target

# capability -> ivcore name (FlagTree's Iluvatar compiler).
ILUVATAR_ARCHS = {(7, 0): "ivcore10", (7, 1): "ivcore11", (8, 0): "ivcore20"}

# Untuned: the CUDA tiles with half the warps, so that a block of 64-wide warps has
# the thread count the CUDA tables were measured with.
DETECTION = ("torch.cuda.is_available() with torch.version.hip None and a CoreX marker: "
             "torch.corex is True, or triton's active target is ('cuda', capability, warp 64), "
             "or triton ships the iluvatar backend; arch from torch.cuda.get_device_capability()")


def iluvatar_profile(arch: str) -> BackendProfile:
    """The profile of an Iluvatar CoreX GPU by ivcore name (ivcore10, ivcore11, ivcore20)."""
    unknown = () if arch in ILUVATAR_ARCHS.values() else (
        f"{arch} is not one of the CoreX architectures FlagTree names "
        f"({', '.join(ILUVATAR_ARCHS.values())}): nothing about it is known here.",)
    capability = next((cap for cap, name in ILUVATAR_ARCHS.items() if name == arch), (7, 0))
    target = Target("cuda", capability[0] * 10 + capability[1], 64)
    return BackendProfile(
        name="iluvatar",
        arch=arch,
        device="cuda",
        dtypes=target.dtypes,
        head_dims=HEAD_DIMS,
        default_tier="standard",
        target=target,
        warp_size=64,
        detection=DETECTION,
        notes=(
            "Detection, dtypes and architectures come from FlagTree's Iluvatar backend and "
            "FlagGems (see conformance/backends/iluvatar.py for each source); shared memory "
            "and register limits are not published and not checked.",
            "bf16 is listed from the hardware's announced bf16 throughput, not from a run "
            "here; fp8 is not listed (software-only in Iluvatar's triton).",
            "Launch tables are untuned (CUDA tiles, half the warps of 64 lanes).",
            *unknown,
        ),
    )


def iluvatar_arch(capability: tuple[int, int]) -> str:
    """ivcore name of a CoreX device's reported capability ("sm_XY" if FlagTree names none)."""
    major, minor = capability
    return ILUVATAR_ARCHS.get((major, minor), f"sm_{major}{minor}")
