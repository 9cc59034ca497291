"""What each GPU architecture offers the kernels: the facts their launch tables are chosen by.

One record per architecture (`ArchFacts`), keyed as triton's GPUTarget names it:
("cuda", capability) and ("hip", gfx name).  kernels.tuning picks a launch table set by
these facts (shared memory, registers, wave size, matrix unit), never by "newer than";
kernels.targets reads the dtypes and tensor descriptors from them; a harness may read
them too (conformance/backends builds its profiles on them).

Sources:
* NVIDIA shared memory per block (the opt-in maximum) and registers: CUDA C++ Programming
  Guide, "Technical Specifications per Compute Capability"
  (https://docs.nvidia.com/cuda/cuda-c-programming-guide/#features-and-technical-specifications):
  64 KB on 7.5, 163 KB on 8.0 / 8.7, 99 KB on 8.6 / 8.9 / 12.x, 227 KB on 9.0 / 10.x;
  64K 32-bit registers per block, 255 per thread.
* AMD LDS per workgroup: triton's AMD backend (third_party/amd/lib/TritonAMDGPUToLLVM/
  TargetInfo.cpp, getSharedMemorySize: 160 KiB on gfx950, 64 KiB otherwise) and the ROCm GPU
  specifications (https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html); VGPRs per
  work-item: 512 on CDNA2 and newer (256 architectural + 256 accumulation, one file), 256 on
  RDNA (wave32).
* matrix unit: what triton 3.9 lowers tl.dot to for each target, measured by compiling one
  64x64x64 fp16 dot without a GPU: mma.sync m16n8k16 (MMA v2) on sm_80-sm_89 *and* sm_120 /
  sm_121 (consumer Blackwell has neither wgmma nor tcgen05/TMEM), wgmma (MMA v3) on sm_90,
  tcgen05.mma (MMA v5, accumulators in tensor memory) on sm_100 / sm_103; v_mfma (MFMA v2, v3,
  v4) on gfx90a, gfx942, gfx950; v_wmma_f32_16x16x16 on gfx11 (WMMA v1: A and B replicated in
  both half-waves, so an operand takes twice the VGPRs) and gfx12 (WMMA v2, no replication).
* fp8 kinds the matrix unit multiplies (triton's names): fp8e4nv / fp8e5 are the OCP formats
  of torch's float8_e4m3fn / float8_e5m2 (NVIDIA from sm_89; AMD gfx950 and gfx12: triton's
  HIPOptions, "native support for OCP fp8 variants since CDNA4/RDNA4"); fp8e4b8 / fp8e5b16
  are the FNUZ formats gfx942 multiplies (HIP's fp8 reference:
  https://rocm.docs.amd.com/projects/HIP/en/latest/reference/fp8_numbers.html).
"""

from __future__ import annotations

from dataclasses import dataclass

# triton's names of the fp8 formats torch's float8_e4m3fn and float8_e5m2 are (OCP).
OCP_FP8 = ("fp8e4nv", "fp8e5")
FNUZ_FP8 = ("fp8e4b8", "fp8e5b16")
# Matrix units (how triton lowers tl.dot, see the module docstring).
MMA_SYNC, WGMMA, TCGEN05 = "mma.sync", "wgmma", "tcgen05"
MFMA, WMMA_GFX11, WMMA_GFX12 = "mfma", "wmma-gfx11", "wmma-gfx12"


@dataclass(frozen=True)
class ArchFacts:
    """family: a name for the generation ("hopper", "rdna4", ...); shared_memory_bytes: the
    most shared memory (LDS) one block may use; registers_per_thread: 32-bit registers one
    thread can address; warp_size: threads per warp / wavefront; matrix_unit: what tl.dot
    runs on (MMA_SYNC ... WMMA_GFX12); tensor_memory_accelerator: a TMA unit that
    tensor descriptors load through; fp8_kinds: the fp8 formats the matrix unit multiplies
    (triton's names); bf16: bf16 matrix operands."""

    family: str
    shared_memory_bytes: int
    registers_per_thread: int
    warp_size: int
    matrix_unit: str
    tensor_memory_accelerator: bool = False
    fp8_kinds: tuple[str, ...] = ()
    bf16: bool = True

    @property
    def ocp_fp8(self) -> bool:
        """The matrix unit multiplies torch's float8_e4m3fn and float8_e5m2."""
        return set(OCP_FP8) <= set(self.fp8_kinds)


KB = 1024
_TURING = ArchFacts("turing", 64 * KB, 255, 32, MMA_SYNC, bf16=False)
_AMPERE = ArchFacts("ampere", 163 * KB, 255, 32, MMA_SYNC)
_AMPERE_99KB = ArchFacts("ampere", 99 * KB, 255, 32, MMA_SYNC)
_HOPPER = ArchFacts("hopper", 227 * KB, 255, 32, WGMMA, True, OCP_FP8)
_BLACKWELL = ArchFacts("blackwell", 227 * KB, 255, 32, TCGEN05, True, OCP_FP8)
# sm_120 / sm_121 (RTX 50, RTX PRO Blackwell, DGX Spark): TMA, fp8 mma.sync, 99 KB.
_BLACKWELL_CONSUMER = ArchFacts("blackwell-consumer", 99 * KB, 255, 32, MMA_SYNC, True, OCP_FP8)
_RDNA3 = ArchFacts("rdna3", 64 * KB, 256, 32, WMMA_GFX11)
_RDNA4 = ArchFacts("rdna4", 64 * KB, 256, 32, WMMA_GFX12, fp8_kinds=OCP_FP8)

# The first listed architecture of each family is the one a harness compiles for by default.
ARCHITECTURES: dict[tuple[str, int | str], ArchFacts] = {
    ("cuda", 75): _TURING,
    ("cuda", 80): _AMPERE,
    ("cuda", 86): _AMPERE_99KB,
    ("cuda", 87): _AMPERE,
    ("cuda", 89): ArchFacts("ada", 99 * KB, 255, 32, MMA_SYNC, fp8_kinds=OCP_FP8),
    ("cuda", 90): _HOPPER,
    ("cuda", 100): _BLACKWELL,
    ("cuda", 103): _BLACKWELL,
    ("cuda", 120): _BLACKWELL_CONSUMER,
    ("cuda", 121): _BLACKWELL_CONSUMER,
    ("hip", "gfx90a"): ArchFacts("cdna2", 64 * KB, 512, 64, MFMA),
    ("hip", "gfx942"): ArchFacts("cdna3", 64 * KB, 512, 64, MFMA, fp8_kinds=FNUZ_FP8),
    ("hip", "gfx950"): ArchFacts("cdna4", 160 * KB, 512, 64, MFMA, fp8_kinds=OCP_FP8),
    ("hip", "gfx1100"): _RDNA3,
    ("hip", "gfx1201"): _RDNA4,
    ("hip", "gfx1200"): _RDNA4,
}

# An AMD architecture not listed takes its generation's facts: gfx9 is CDNA, gfx11 RDNA3,
# gfx12 RDNA4 (the other gfx1 generations, RDNA1/2, have no matrix unit: RDNA3's is the
# nearest guess).
_HIP_GENERATIONS = {"gfx9": "gfx942", "gfx11": "gfx1100", "gfx12": "gfx1201", "gfx1": "gfx1100"}


def known_architecture(backend: str, arch: int | str) -> tuple[str, int | str]:
    """The listed architecture whose facts `arch` takes: itself if listed; for NVIDIA the
    newest listed capability at or below it (the oldest if none is); for AMD its generation's."""
    if (backend, arch) in ARCHITECTURES:
        return backend, arch
    if backend == "cuda":
        listed = sorted(cap for kind, cap in ARCHITECTURES if kind == "cuda")
        return backend, max([cap for cap in listed if cap <= int(arch)] or listed[:1])
    generation = next((prefix for prefix in _HIP_GENERATIONS if str(arch).startswith(prefix)), "gfx9")
    return backend, _HIP_GENERATIONS[generation]


def arch_facts(backend: str, arch: int | str) -> ArchFacts:
    """The facts of an architecture (a listed one's, see known_architecture)."""
    return ARCHITECTURES[known_architecture(backend, arch)]


def architecture_name(backend: str, arch: int | str) -> str:
    """sm_90, gfx942: how the compile-only tier and the profiles name an architecture."""
    return f"sm_{arch}" if backend == "cuda" else str(arch)
