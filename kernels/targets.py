"""Which device the kernels run on, and what they can do there.

The kernels tell their target from what triton reports (its active driver's
GPUTarget: backend, arch, warp size) or, under Triton's CPU interpreter, from the
environment (TRITON_INTERPRET, which triton itself reads when a kernel is defined).
Nothing here imports a test harness: a harness may read these facts, not the
other way round.
"""

from __future__ import annotations

import os
from typing import NamedTuple

HIGH_PRECISION = ("fp16", "bf16", "fp32")
FP8 = ("fp8e4m3", "fp8e5m2")
# Head dims the kernels take: padded to a power of two >= 16 (kernels.launch), tiles up to 256.
HEAD_DIMS = (16, 32, 64, 96, 128, 192, 256)

# AMD architectures whose matrix cores multiply torch's OCP fp8 types (float8_e4m3fn,
# float8_e5m2).  gfx942 multiplies only the FNUZ variants (HIP's fp8 reference:
# https://rocm.docs.amd.com/projects/HIP/en/latest/reference/fp8_numbers.html).
HIP_OCP_FP8_ARCHS = ("gfx950",)

# The workarounds the kernels apply under Triton's CPU interpreter (kernels.blocks):
# name -> what it avoids.  A harness's probes name them when a primitive fails.
INTERPRETER_WORKAROUNDS = {
    "interpreter_bf16_dot": "bf16 tl.dot operands are upcast to fp32 (the interpreter's bf16 dot is wrong)",
    "interpreter_bf16_cast": "fp32 -> bf16 casts round to nearest even in integer arithmetic "
                             "(the interpreter's cast truncates)",
    "interpreter_fp32_dot": "fp32 dots sum exact products in fp64 and round once "
                            "(the interpreter's numpy matmul rounds by operand shape)",
}


class Target(NamedTuple):
    """backend: triton's ("cuda", "hip") or "interpreter"; arch: compute capability as
    an int (90) for cuda, gfx name for hip; warp_size: threads per warp/wavefront.
    Iluvatar CoreX reports ("cuda", capability, 64)."""

    backend: str
    arch: int | str
    warp_size: int

    @property
    def interpreted(self) -> bool:
        return self.backend == "interpreter"

    @property
    def corex(self) -> bool:
        return self.backend == "cuda" and self.warp_size == 64

    @property
    def device(self) -> str:
        """The torch device type tensors live on (ROCm and CoreX torch use "cuda" too)."""
        return "cpu" if self.interpreted else "cuda"

    @property
    def name(self) -> str:
        if self.interpreted:
            return "interpreter"
        if self.backend == "cuda":
            return f"{'corex' if self.corex else 'cuda'}:sm_{self.arch}"
        return f"{self.backend}:{self.arch}"

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Input dtypes the kernels support here; fp8 (forward only) where matrix units
        multiply it: NVIDIA from sm_89 (triton adds fp8e4nv from capability 89), AMD
        per HIP_OCP_FP8_ARCHS; bf16 MMA needs sm_80.  CoreX: bf16 from the hardware's
        announced bf16 throughput; its fp8 is software-only, so not listed."""
        if self.interpreted or self.corex:
            return HIGH_PRECISION
        if self.backend == "hip":
            return HIGH_PRECISION + (FP8 if self.arch in HIP_OCP_FP8_ARCHS else ())
        bf16 = ("bf16",) if self.arch >= 80 else ()
        return ("fp16", *bf16, "fp32") + (FP8 if self.arch >= 89 else ())

    @property
    def tensor_descriptors(self) -> bool:
        """Loads through device-side tensor descriptors can be compiled here: NVIDIA sm_90+
        (the TMA unit; not CoreX) or the interpreter, with a triton that has
        tl.make_tensor_descriptor (3.4 and newer; 3.2 has none).  Whether a kernel uses
        them is its launch table's choice (kernels.tuning)."""
        if not (self.interpreted or (self.backend == "cuda" and not self.corex and self.arch >= 90)):
            return False
        import triton.language as tl

        return hasattr(tl, "make_tensor_descriptor")

    @property
    def workarounds(self) -> tuple[str, ...]:
        return tuple(INTERPRETER_WORKAROUNDS) if self.interpreted else ()


INTERPRETER = Target("interpreter", "cpu", 1)


def interpreting() -> bool:
    """Triton's CPU interpreter is on: triton reads the same variable when a kernel is defined."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def current_target() -> Target:
    """The target launches go to: the interpreter, or triton's active driver's target
    (whatever driver is active: a compile-only driver names a GPU that is not there)."""
    if interpreting():
        return INTERPRETER
    from triton.runtime import driver

    target = driver.active.get_current_target()
    return Target(target.backend, target.arch, target.warp_size)
