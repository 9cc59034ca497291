"""NVIDIA GPUs, one profile per compute capability.

The limits are the kernels' own facts (kernels.architectures, which cites the CUDA C++
Programming Guide's "Technical Specifications per Compute Capability" table): maximum
shared memory per thread block (opt-in), 64K 32-bit registers per block, 255 per thread,
the matrix unit tl.dot runs on, TMA, and the fp8 formats the tensor cores multiply (bf16
MMA from sm_80, fp8 e4m3/e5m2 from sm_89).  This module adds the products and detection.
"""

from __future__ import annotations

from conformance.backends.profile import HEAD_DIMS, KIB, BackendProfile, launch_notes
from conformance.bundled.kernels.architectures import arch_facts, known_architecture
from conformance.bundled.kernels.targets import Target

GUIDE = "https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications"

# compute capability -> the products it names (the keys --backend knows as cuda:sm_XY; the
# kernels' kernels.architectures lists the same capabilities).
CUDA_ARCHS = {
    (7, 5): "Turing (T4, RTX 20)",
    (8, 0): "Ampere (A100, A30)",
    (8, 6): "Ampere (RTX 30, A10, A40)",
    (8, 7): "Ampere (Jetson Orin)",
    (8, 9): "Ada (L4, L40, RTX 40)",
    (9, 0): "Hopper (H100, H200)",
    (10, 0): "datacenter Blackwell (B200, GB200)",
    (10, 3): "datacenter Blackwell Ultra (B300, GB300)",
    (12, 0): "consumer and workstation Blackwell (RTX 50, RTX PRO 6000)",
    (12, 1): "Blackwell (DGX Spark, GB10)",
}

DETECTION = ("torch.cuda.is_available() with torch.version.hip None and no Iluvatar CoreX "
             "marker; arch from torch.cuda.get_device_capability()")


def _assumed(capability: tuple[int, int]) -> tuple[str, ...]:
    """A note when `capability` is not listed and borrows the limits of a listed one."""
    if capability in CUDA_ARCHS:
        return ()
    _, known = known_architecture("cuda", capability[0] * 10 + capability[1])
    return (f"sm_{capability[0]}{capability[1]} is not in the harness's table of NVIDIA "
            f"architectures: the limits of sm_{known} are assumed.",)


def cuda_profile(capability: tuple[int, int]) -> BackendProfile:
    """The profile of an NVIDIA GPU of compute capability (major, minor)."""
    major, minor = capability
    arch = major * 10 + minor
    facts = arch_facts("cuda", arch)
    target = Target("cuda", arch, 32)
    shared_kib = facts.shared_memory_bytes // KIB
    return BackendProfile(
        name="cuda",
        arch=f"sm_{arch}",
        device="cuda",
        dtypes=target.dtypes,
        head_dims=HEAD_DIMS,
        default_tier="standard",
        target=target,
        tf32_dot=True,
        warp_size=32,
        shared_memory_bytes=facts.shared_memory_bytes,
        registers_per_thread=facts.registers_per_thread,
        register_file_per_block=64 * KIB,
        compile_target=("cuda", arch, 32),
        detection=DETECTION,
        notes=(
            f"{CUDA_ARCHS.get(capability, 'unlisted')}: {shared_kib} KB shared memory per block, 64K "
            f"registers per block, 255 per thread; tl.dot on {facts.matrix_unit}"
            f"{', TMA' if facts.tensor_memory_accelerator else ''} (CUDA C++ Programming Guide, {GUIDE}; "
            "kernels/architectures.py).",
            "fp8 inputs (float8_e4m3fn, float8_e5m2) are forward-only; listed from sm_89 on, "
            "where the tensor cores multiply them.",
            *launch_notes(target),
            *_assumed(capability),
        ),
    )
