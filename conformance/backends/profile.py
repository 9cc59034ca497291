"""The data a backend profile holds.

A profile is a frozen dataclass; the modules next to this one build one per
architecture (cuda.py, hip.py, iluvatar.py, interpreter.py) from tables of
public facts, and detection.py picks one for the running process.  The launch
tables and the dtypes the bundled kernels support are the kernels' own
(kernels.tuning, kernels.targets): a profile reads them, for the compile-only
tier and to know which cases can run.
"""

from __future__ import annotations

from dataclasses import dataclass

from conformance.bundled.kernels.targets import FP8, HEAD_DIMS, HIGH_PRECISION, Target
from conformance.bundled.kernels.tuning import (KERNELS, LaunchConfig, LaunchTable, launch_config, launch_tables,
                                                table_set)

__all__ = ["FP8", "HARDWARE_RUNS", "HEAD_DIMS", "HIGH_PRECISION", "KERNELS", "KIB", "BackendProfile", "LaunchConfig",
           "LaunchTable", "launch_notes"]

# The GPU profiles whose kernels have run on a card for this project, and where those runs are.
# Every other GPU profile is known from the compile-only tier alone (python -m conformance
# compile): its kernels compiled for it, within its limits, but never ran.
HARDWARE_RUNS = {"cuda:sm_90": "an H100 and H200s (reports/h100-sm90/, reports/h200-sm90/, reports/h200-sm90-x2/)"}


def launch_notes(target: Target) -> tuple[str, ...]:
    """What a GPU profile says about its launch tables and its evidence: the table set its
    architecture takes (kernels.tuning.table_set), how that set was chosen, why no richer
    one fits, and whether the kernels ran on such a card or were only compiled for it."""
    chosen, misfit = table_set(target)
    key = target.name
    evidence = (f"Run on hardware: {HARDWARE_RUNS[key]}." if key in HARDWARE_RUNS else
                f"Not run on hardware here: compile-only (python -m conformance compile --target {key}); "
                "its verdicts are the first on such a card.")
    return (f"Launch tables: the {chosen.name} set, {chosen.origin}.", *((misfit + ".",) if misfit else ()), evidence)

@dataclass(frozen=True)
class BackendProfile:
    """Everything the harness and the kernels need to know about one backend.

    name:        backend family ("cuda", "hip", "iluvatar", "interpreter")
    arch:        architecture within the family ("sm_90", "gfx942", "cpu", ...)
    device:      the torch device type tensors live on ("cuda" or "cpu")
    dtypes:      input dtypes the bundled kernels support here; fp8 names
                 ("fp8e4m3", "fp8e5m2") mean forward-only fp8 support
    head_dims:   head dims the bundled kernels support here
    default_tier: the catalog tier `run --tier auto` picks
    target:      the kernels' Target of this backend (kernels.targets): their launch
                 tables and workarounds here
    tf32_dot:    triton takes tl.dot(input_precision="tf32") here (triton's backend
                 options: every NVIDIA target, AMD only gfx942; the interpreter accepts
                 it and computes fp32)
    warp_size:   threads per warp / wavefront
    shared_memory_bytes:  shared memory (LDS) one block may use; None = not known
    registers_per_thread: most 32-bit registers one thread can address
    register_file_per_block: 32-bit registers all threads of one block may share
    compile_target: (backend, arch, warp size) of triton's GPUTarget for the
                 compile-only tier; None where the installed triton cannot target it
    detection:   how detect() recognises this backend
    notes:       numerical quirks, sources of the facts above, and how the
                 harness accounts for them
    """

    name: str
    arch: str
    device: str
    dtypes: tuple[str, ...]
    head_dims: tuple[int, ...]
    default_tier: str
    target: Target
    tf32_dot: bool = False
    warp_size: int = 32
    shared_memory_bytes: int | None = None
    registers_per_thread: int | None = None
    register_file_per_block: int | None = None
    compile_target: tuple | None = None
    detection: str = ""
    notes: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.name}:{self.arch}"

    @property
    def interpreted(self) -> bool:
        return self.name == "interpreter"

    @property
    def hardware_runs(self) -> str | None:
        """Where runs of the kernels on such a card are (HARDWARE_RUNS); None: compile-only."""
        return HARDWARE_RUNS.get(self.key)

    @property
    def launch(self) -> dict[str, LaunchTable]:
        """The kernels' launch tables on this backend (kernels.tuning)."""
        return launch_tables(self.target)

    def launch_config(self, kernel: str, head_dim: int, dtype: str = "fp16") -> LaunchConfig:
        """Launch config of `kernel` for a (padded) head dim and input dtype name."""
        return launch_config(kernel, head_dim, dtype, self.target)

    def register_budget(self, num_warps: int) -> int | None:
        """Registers per thread a block of `num_warps` warps can have and still launch:
        the per-thread maximum, or the block's share of the register file if smaller."""
        limits = [self.registers_per_thread]
        if self.register_file_per_block is not None:
            limits.append(self.register_file_per_block // (self.warp_size * num_warps))
        limits = [limit for limit in limits if limit is not None]
        return min(limits) if limits else None

    def dtype_unsupported_reason(self, dtype: str) -> str | None:
        """Why this backend cannot take `dtype` inputs, or None if it can."""
        if dtype not in self.dtypes:
            return f"dtype {dtype} not supported on {self.key} (supported: {', '.join(self.dtypes)})"
        return None

    def unsupported_reason(self, dtype: str, head_dim: int) -> str | None:
        """Why this backend cannot run a case, or None if it can."""
        dtype_reason = self.dtype_unsupported_reason(dtype)
        if dtype_reason:
            return dtype_reason
        if head_dim not in self.head_dims:
            dims = ", ".join(str(d) for d in self.head_dims)
            return f"head_dim {head_dim} not supported on {self.key} (supported: {dims})"
        return None


KIB = 1024
