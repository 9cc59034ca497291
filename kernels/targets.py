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

from .architectures import ArchFacts, arch_facts

HIGH_PRECISION = ("fp16", "bf16", "fp32")
FP8 = ("fp8e4m3", "fp8e5m2")
# Head dims the kernels take: padded to a power of two >= 16 (kernels.launch), tiles up to 256.
HEAD_DIMS = (16, 32, 64, 96, 128, 192, 256)

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
    def facts(self) -> ArchFacts | None:
        """What the architecture offers (kernels.architectures); None under the interpreter
        and on CoreX, whose limits are not published."""
        return None if self.interpreted or self.corex else arch_facts(self.backend, self.arch)

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Input dtypes the kernels support here: bf16 where the matrix unit multiplies it
        (NVIDIA from sm_80), fp8 (forward only) where it multiplies torch's OCP formats
        (NVIDIA from sm_89, AMD gfx950 and gfx12; gfx942's are FNUZ).  CoreX: bf16 from the
        hardware's announced bf16 throughput; its fp8 is software-only, so not listed."""
        facts = self.facts
        if facts is None:
            return HIGH_PRECISION
        return ("fp16", *(("bf16",) if facts.bf16 else ()), "fp32") + (FP8 if facts.ocp_fp8 else ())

    @property
    def tensor_descriptors(self) -> bool:
        """Loads through device-side tensor descriptors can be compiled here: a TMA unit
        (NVIDIA sm_90 and newer, consumer Blackwell included; not CoreX) or the interpreter,
        with a triton that has tl.make_tensor_descriptor (3.4 and newer; 3.2 has none).
        Whether a kernel uses them is its launch table's choice (kernels.tuning)."""
        facts = self.facts
        if not (self.interpreted or (facts is not None and facts.tensor_memory_accelerator)):
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


# Targets by (active driver, its current device): a driver's report of one device never
# changes, and asking it again (CUDA: the device's capability through torch) cost ~11 us on
# the H100 machines, a tenth of a decode step's host time (reports/h100-sm90/kv-cache/host-time/).
_TARGETS: dict[tuple, Target] = {}


def launch_place() -> tuple | None:
    """What the target of a launch is a function of: None on the interpreter, else triton's
    active driver and its current device (a key: cheaper to read than the target itself)."""
    if interpreting():
        return None
    from triton.runtime import driver

    active = driver.active
    return active, active.get_current_device()


def current_target() -> Target:
    """The target launches go to: the interpreter, or triton's active driver's target
    (whatever driver is active: a compile-only driver names a GPU that is not there)."""
    place = launch_place()
    if place is None:
        return INTERPRETER
    target = _TARGETS.get(place)
    if target is None:
        reported = place[0].get_current_target()
        target = _TARGETS[place] = Target(reported.backend, reported.arch, reported.warp_size)
    return target
