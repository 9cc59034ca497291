"""NVIDIA GPUs, one profile per compute capability.

Limits per compute capability are from the CUDA C++ Programming Guide, table
"Technical Specifications per Compute Capability"
(https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications):
maximum shared memory per thread block (opt-in), 64K 32-bit registers per block,
255 registers per thread.  bf16 tensor-core MMA needs sm_80, fp8 (e4m3/e5m2) MMA
sm_89: the kernels' own facts (kernels.targets), read here.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.backends.profile import HEAD_DIMS, KIB, BackendProfile
from conformance.bundled.kernels.targets import Target

GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications"


@dataclass(frozen=True)
class CudaArch:
    capability: tuple[int, int]
    products: str
    shared_kib: int  # most shared memory one block may use (opt-in)


CUDA_ARCHS = {arch.capability: arch for arch in (
    CudaArch((7, 5), "Turing (T4, RTX 20)", 64),
    CudaArch((8, 0), "Ampere (A100, A30)", 163),
    CudaArch((8, 6), "Ampere (RTX 30, A10, A40)", 99),
    CudaArch((8, 7), "Ampere (Jetson Orin)", 163),
    CudaArch((8, 9), "Ada (L4, L40, RTX 40)", 99),
    CudaArch((9, 0), "Hopper (H100, H200)", 227),
    CudaArch((10, 0), "Blackwell (B200, GB200)", 227),
    CudaArch((12, 0), "Blackwell (RTX 50, RTX PRO)", 99),
)}

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
    target = Target("cuda", major * 10 + minor, 32)
    return BackendProfile(
        name="cuda",
        arch=f"sm_{major}{minor}",
        device="cuda",
        dtypes=target.dtypes,
        head_dims=HEAD_DIMS,
        default_tier="standard",
        target=target,
        tf32_dot=True,
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
