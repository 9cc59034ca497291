"""AMD GPUs under ROCm (torch.version.hip set), one profile per gfx architecture.

The limits are the kernels' own facts (kernels.architectures, which cites triton's AMD
TargetInfo and the ROCm GPU specifications): wavefront size (64 on CDNA, 32 on RDNA), LDS per
workgroup (64 KiB, 160 KiB on CDNA4), VGPRs per work-item (512 on CDNA2 and newer, 256 on
RDNA), the matrix unit (MFMA, WMMA) and the fp8 formats it multiplies: gfx942 only the FNUZ
variants (HIP's fp8 reference:
https://rocm.docs.amd.com/projects/HIP/en/latest/reference/fp8_numbers.html), not torch's
float8_e4m3fn / float8_e5m2; gfx950 and RDNA4 the OCP ones.  This module adds the
products, the VGPR file a CDNA workgroup shares (512 KiB per compute unit, ROCm GPU
specifications: https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html), the
numerical quirks and detection.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.backends.profile import HEAD_DIMS, KIB, BackendProfile, launch_notes
from conformance.bundled.kernels.architectures import arch_facts, known_architecture
from conformance.bundled.kernels.targets import Target

MI200_DENORMALS = (
    "gfx90a (MI200): the fp16 and bf16 MFMA instructions flush subnormal inputs and outputs "
    "to zero (AMD: https://rocm.docs.amd.com/projects/MIOpen/en/latest/MI200AlternateImplementation.html; "
    "PyTorch: https://pytorch.org/docs/stable/notes/numerical_accuracy.html#reduced-precision-fp16-and-"
    "bf16-gemms-and-convolutions-on-amd-instinct-mi200-devices). In these kernels it drops probabilities "
    "below 2^-14 (fp16) of their row's maximum from P.V and dS.K/dS.Q while the fp32 row sum keeps them. "
    "The harness does not loosen the bound for it: the catalog's N(0, 1) inputs rarely produce such "
    "probabilities, the `logits:L` distributions do on purpose; a gfx90a-only fp16/bf16 failure whose "
    "error is of that size is most likely this quirk (triton's own attention tutorial relaxes its "
    "gfx90a backward check for the same reason)."
)


@dataclass(frozen=True)
class HipArch:
    products: str
    vgpr_file_kib: int | None = None  # shared by a workgroup's waves
    notes: tuple[str, ...] = ()


# The VGPR file a workgroup's waves share: a CDNA compute unit's 512 KiB (ROCm GPU
# specifications); on RDNA3/4 the 4 SIMDs of a work-group processor (triton compiles in WGP
# mode), 192 KiB each: 1,536 wave32 VGPRs (AMD's RDNA3 material: Navi 31's VGPR file 50 %
# larger than RDNA2's 128 KiB; measured on gfx1201 and gfx1100 alike: LLVM caps a 32-wave
# workgroup at 192 VGPRs per work-item, 4 x 1,536 / 32).
CDNA_VGPR_FILE_KIB, RDNA_VGPR_FILE_KIB = 512, 4 * 192


# gfx name -> products and quirks (the keys --backend knows as hip:gfxNNN; the kernels'
# kernels.architectures lists the same architectures).
HIP_ARCHS = {
    "gfx90a": HipArch("CDNA2 (MI210, MI250, MI250X)", CDNA_VGPR_FILE_KIB, notes=(MI200_DENORMALS,)),
    "gfx942": HipArch("CDNA3 (MI300A, MI300X, MI325X)", CDNA_VGPR_FILE_KIB),
    "gfx950": HipArch("CDNA4 (MI350X, MI355X)", CDNA_VGPR_FILE_KIB),
    "gfx1100": HipArch("RDNA3 (RX 7900, PRO W7900)", RDNA_VGPR_FILE_KIB),
    "gfx1201": HipArch("RDNA4 (RX 9070, AI PRO R9700)", RDNA_VGPR_FILE_KIB),
    "gfx1200": HipArch("RDNA4 (RX 9060)", RDNA_VGPR_FILE_KIB),
}

DETECTION = ("torch.cuda.is_available() with torch.version.hip set; arch from "
             "torch.cuda.get_device_properties(0).gcnArchName (e.g. 'gfx90a:sramecc+:xnack-')")


def _arch(arch: str) -> tuple[HipArch, tuple[str, ...]]:
    """The table row of `arch`, or of its generation's listed architecture (said in a note)."""
    if arch in HIP_ARCHS:
        return HIP_ARCHS[arch], ()
    _, known = known_architecture("hip", arch)
    return HipArch("unknown", HIP_ARCHS[known].vgpr_file_kib), (
        f"{arch} is not in the harness's table of AMD architectures: the limits of {known} are assumed.",)


def hip_profile(arch: str) -> BackendProfile:
    """The profile of an AMD GPU by gfx name (a gcnArchName's part before ':')."""
    row, assumed = _arch(arch)
    facts = arch_facts("hip", arch)
    target = Target("hip", arch, facts.warp_size)
    return BackendProfile(
        name="hip",
        arch=arch,
        device="cuda",  # ROCm builds of torch use the "cuda" device type
        dtypes=target.dtypes,
        head_dims=HEAD_DIMS,
        default_tier="standard",
        target=target,
        tf32_dot=arch == "gfx942",
        warp_size=facts.warp_size,
        shared_memory_bytes=facts.shared_memory_bytes,
        registers_per_thread=facts.registers_per_thread,
        register_file_per_block=None if row.vgpr_file_kib is None else row.vgpr_file_kib * KIB // 4,
        compile_target=("hip", arch, facts.warp_size),
        detection=DETECTION,
        notes=(
            f"{row.products}: wavefront {facts.warp_size}, {facts.shared_memory_bytes // KIB} KiB LDS per "
            f"workgroup, {facts.registers_per_thread} VGPRs per work-item, tl.dot on {facts.matrix_unit} "
            "(triton's AMD TargetInfo; https://rocm.docs.amd.com/en/latest/reference/gpu-specs.html; "
            "kernels/architectures.py).",
            *launch_notes(target),
            *row.notes,
            *assumed,
        ),
    )
