"""NVIDIA GPUs, one profile per compute capability.

Limits per compute capability are from the CUDA C++ Programming Guide, table
"Technical Specifications per Compute Capability"
(https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications):
maximum shared memory per thread block (opt-in), 64K 32-bit registers per block,
255 registers per thread.  bf16 tensor-core MMA needs sm_80, fp8 (e4m3/e5m2) MMA
sm_89 (triton's NVIDIA backend adds fp8e4nv to its supported fp8 types from
capability 89 on).
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.backends.profile import (
    FP8,
    HEAD_DIMS,
    HIGH_PRECISION,
    KIB,
    BackendProfile,
    LaunchConfig,
    table,
)

GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications"


@dataclass(frozen=True)
class CudaArch:
    capability: tuple[int, int]
    products: str
    shared_kib: int  # most shared memory one block may use (opt-in)
    bf16: bool
    fp8: bool


CUDA_ARCHS = {arch.capability: arch for arch in (
    CudaArch((7, 5), "Turing (T4, RTX 20)", 64, bf16=False, fp8=False),
    CudaArch((8, 0), "Ampere (A100, A30)", 163, bf16=True, fp8=False),
    CudaArch((8, 6), "Ampere (RTX 30, A10, A40)", 99, bf16=True, fp8=False),
    CudaArch((8, 7), "Ampere (Jetson Orin)", 163, bf16=True, fp8=False),
    CudaArch((8, 9), "Ada (L4, L40, RTX 40)", 99, bf16=True, fp8=True),
    CudaArch((9, 0), "Hopper (H100, H200)", 227, bf16=True, fp8=True),
    CudaArch((10, 0), "Blackwell (B200, GB200)", 227, bf16=True, fp8=True),
    CudaArch((12, 0), "Blackwell (RTX 50, RTX PRO)", 99, bf16=True, fp8=True),
)}

# Ampere and newer NVIDIA GPUs. Tiles follow the Triton fused-attention tutorial's
# proven shapes; D=128 needs 8 warps to keep the fp32 accumulators in registers.
# D=256 (and 192, padded to 256) halves the key tile so K/V stages fit the 99 KB of
# shared memory a block gets on sm_86/sm_89 (sm_80: 163 KB, sm_90: 227 KB).
CUDA_LAUNCH = {
    "fwd": table(
        (64, LaunchConfig(128, 64, num_warps=4, num_stages=3)),
        (128, LaunchConfig(128, 64, num_warps=8, num_stages=3)),
        (256, LaunchConfig(64, 32, num_warps=8, num_stages=2)),
    ),
    # delta = rowsum(dO * O) holds two [BLOCK_M, D] fp32 tiles: fewer rows as D grows
    # keep them in registers (128 rows at D = 256 spilled 2.7-6.7 KB, triton 3.2-3.9).
    "bwd_preprocess": table(
        (64, LaunchConfig(128, 64, num_warps=4, num_stages=1)),
        (128, LaunchConfig(64, 64, num_warps=4, num_stages=1)),
        (256, LaunchConfig(32, 64, num_warps=4, num_stages=1)),
    ),
    "bwd_dkdv": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=8, num_stages=2)),
        (256, LaunchConfig(32, 32, num_warps=8, num_stages=1)),
    ),
    "bwd_dq": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=8, num_stages=2)),
        (256, LaunchConfig(32, 32, num_warps=8, num_stages=1)),
    ),
    "total": table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=8, num_stages=2)),
        (256, LaunchConfig(32, 64, num_warps=8, num_stages=1)),
    ),
    # fp32 tiles are twice as large: smaller blocks keep them within the 99 KB of
    # shared memory that sm_86/sm_89 offer a block (sm_80/sm_90 have more).  fp32
    # ("ieee") dots run on FMA units, not tensor cores; with 4 warps the forward
    # spilled 0.8-1.1 KB at D = 64 and the kernels 1.6-54 KB at D = 128 (ptxas,
    # sm_80/sm_90, triton 3.9); 8 warps and 16-row or 16-key tiles keep them in registers.
    "fwd.fp32": table(
        (64, LaunchConfig(64, 32, num_warps=8, num_stages=2)),
        (256, LaunchConfig(16, 32, num_warps=8, num_stages=1)),
    ),
    "bwd_dkdv.fp32": table(
        (64, LaunchConfig(32, 32, num_warps=4, num_stages=1)),
        (128, LaunchConfig(32, 16, num_warps=8, num_stages=1)),
        (256, LaunchConfig(16, 32, num_warps=8, num_stages=1)),
    ),
    "bwd_dq.fp32": table(
        (64, LaunchConfig(32, 32, num_warps=4, num_stages=1)),
        (128, LaunchConfig(32, 32, num_warps=8, num_stages=1)),
        (256, LaunchConfig(32, 16, num_warps=8, num_stages=1)),
    ),
    "total.fp32": table(
        (128, LaunchConfig(32, 32, num_warps=4, num_stages=1)),
        (256, LaunchConfig(16, 32, num_warps=8, num_stages=1)),
    ),
    # piecewise kernels hold two score tiles (near and far) per block: tiles chosen
    # for zero register spills on sm_90 (compile probe, triton 3.9), all within the
    # ~99 KB of shared memory sm_86/sm_89 allow.
    "piecewise_fwd": table((64, LaunchConfig(128, 64, 8, 3)), (128, LaunchConfig(64, 32, 8, 2)),
                           (256, LaunchConfig(32, 32, 8, 2))),
    "piecewise_bwd_dkdv": table((64, LaunchConfig(32, 32, 4, 2)), (128, LaunchConfig(32, 64, 8, 2)),
                                (256, LaunchConfig(16, 32, 8, 1))),
    "piecewise_bwd_dq": table((64, LaunchConfig(64, 32, 4, 2)), (128, LaunchConfig(32, 64, 8, 2)),
                              (256, LaunchConfig(32, 16, 8, 1))),
    "piecewise_fwd.fp32": table((64, LaunchConfig(64, 32, 8, 2)), (128, LaunchConfig(32, 32, 8, 2)),
                                (256, LaunchConfig(16, 16, 4, 1))),
    "piecewise_bwd_dkdv.fp32": table((64, LaunchConfig(16, 32, 4, 1)), (128, LaunchConfig(16, 32, 4, 1)),
                                     (256, LaunchConfig(16, 16, 8, 1))),
    "piecewise_bwd_dq.fp32": table((64, LaunchConfig(32, 32, 8, 1)), (128, LaunchConfig(32, 16, 4, 1)),
                                   (256, LaunchConfig(16, 16, 8, 1))),
}

DETECTION = ("torch.cuda.is_available() with torch.version.hip None and no Iluvatar CoreX "
             "marker; arch from torch.cuda.get_device_capability()")


def _arch_facts(capability: tuple[int, int]) -> tuple[CudaArch, tuple[str, ...]]:
    """The table row of `capability`, or of the newest listed one below it (said in a note)."""
    if capability in CUDA_ARCHS:
        return CUDA_ARCHS[capability], ()
    older = [known for known in CUDA_ARCHS if known <= capability] or [min(CUDA_ARCHS)]
    facts = CUDA_ARCHS[max(older)]
    assumed = "sm_{}{}".format(*facts.capability)
    return facts, (f"sm_{capability[0]}{capability[1]} is not in the harness's table of NVIDIA "
                   f"architectures: the limits of {assumed} are assumed.",)


def cuda_profile(capability: tuple[int, int]) -> BackendProfile:
    """The profile of an NVIDIA GPU of compute capability (major, minor)."""
    major, minor = capability
    facts, assumed = _arch_facts((major, minor))
    dtypes = HIGH_PRECISION if facts.bf16 else ("fp16", "fp32")
    return BackendProfile(
        name="cuda",
        arch=f"sm_{major}{minor}",
        device="cuda",
        dtypes=dtypes + (FP8 if facts.fp8 else ()),
        head_dims=HEAD_DIMS,
        default_tier="standard",
        launch=CUDA_LAUNCH,
        warp_size=32,
        shared_memory_bytes=facts.shared_kib * KIB,
        registers_per_thread=255,
        register_file_per_block=64 * KIB,
        compile_target=("cuda", major * 10 + minor, 32),
        detection=DETECTION,
        notes=(
            f"{facts.products}: {facts.shared_kib} KB shared memory per block, 64K registers "
            f"per block, 255 per thread (CUDA C++ Programming Guide, {GUIDE}).",
            "fp8 inputs (float8_e4m3fn, float8_e5m2) are forward-only; listed from sm_89 on, "
            "where the tensor cores multiply them.",
            *assumed,
        ),
    )
