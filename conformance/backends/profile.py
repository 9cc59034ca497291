"""The data a backend profile holds: launch configurations and the profile itself.

A profile is a frozen dataclass; the modules next to this one build one per
architecture (cuda.py, hip.py, iluvatar.py, interpreter.py) from tables of
public facts, and detection.py picks one for the running process.
"""

from __future__ import annotations

from dataclasses import dataclass, field

# The kernels a profile's launch tables cover (piecewise kernels fall back to the
# flash table of the same role when a profile has no `piecewise_*` table).
KERNELS = ("fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq", "total")

# Compiler options only some Triton backends take: a launch passes one only where
# the profile sets it (triton rejects options its backend does not know).
BACKEND_KNOBS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")


@dataclass(frozen=True)
class LaunchConfig:
    """Tile shape and scheduling knobs of one kernel launch.

    waves_per_eu, matrix_instr_nonkdim, kpack: options of Triton's AMD backend
    (occupancy hint, MFMA instruction shape, operand packing); None = not passed.
    """

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 1
    waves_per_eu: int | None = None
    matrix_instr_nonkdim: int | None = None
    kpack: int | None = None

    def options(self) -> dict:
        """The compiler options a launch passes: warps, stages and every knob that is set."""
        knobs = {name: getattr(self, name) for name in BACKEND_KNOBS if getattr(self, name) is not None}
        return {"num_warps": self.num_warps, "num_stages": self.num_stages, **knobs}

    def as_dict(self) -> dict:
        """Tile sizes and options, unset knobs left out."""
        return {"block_m": self.block_m, "block_n": self.block_n, **self.options()}


@dataclass(frozen=True)
class LaunchTable:
    """Launch configs of one kernel, chosen by head dim: the first row whose
    `max_head_dim` is >= the (padded) head dim wins."""

    rows: tuple[tuple[int, LaunchConfig], ...]

    def pick(self, head_dim: int) -> LaunchConfig:
        for max_head_dim, config in self.rows:
            if head_dim <= max_head_dim:
                return config
        raise ValueError(f"no launch config for head_dim={head_dim}")


def table(*rows: tuple[int, LaunchConfig]) -> LaunchTable:
    return LaunchTable(tuple(rows))


def map_tables(tables: dict[str, LaunchTable], change) -> dict[str, LaunchTable]:
    """Every config of every table passed through `change(config) -> config`."""
    return {name: LaunchTable(tuple((bound, change(config)) for bound, config in tab.rows))
            for name, tab in tables.items()}


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
    launch:      kernel name -> LaunchTable (a `"{kernel}.{dtype}"` key overrides)
    emulate_bf16: this backend's dot is faulty for bf16 (and inconsistent for fp32);
                 the kernels emulate it faithfully in fp32 (see the interpreter profile)
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
    launch: dict[str, LaunchTable] = field(hash=False, compare=False)
    emulate_bf16: bool = False
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

    def launch_config(self, kernel: str, head_dim: int, dtype: str = "fp16") -> LaunchConfig:
        """Launch config of `kernel` for a (padded) head dim and input dtype name.

        A table keyed `"{kernel}.{dtype}"` (e.g. `fwd.fp32`, whose tiles take twice
        the shared memory) overrides the kernel's general table."""
        for key in (f"{kernel}.{dtype}", kernel):
            if key in self.launch:
                return self.launch[key].pick(head_dim)
        raise KeyError(f"profile {self.key} has no launch table for kernel {kernel!r}")

    def register_budget(self, num_warps: int) -> int | None:
        """Registers per thread a block of `num_warps` warps can have and still launch:
        the per-thread maximum, or the block's share of the register file if smaller."""
        limits = [self.registers_per_thread]
        if self.register_file_per_block is not None:
            limits.append(self.register_file_per_block // (self.warp_size * num_warps))
        limits = [limit for limit in limits if limit is not None]
        return min(limits) if limits else None

    def unsupported_reason(self, dtype: str, head_dim: int) -> str | None:
        """Why this backend cannot run a case, or None if it can."""
        if dtype not in self.dtypes:
            return f"dtype {dtype} not supported on {self.key} (supported: {', '.join(self.dtypes)})"
        if head_dim not in self.head_dims:
            dims = ", ".join(str(d) for d in self.head_dims)
            return f"head_dim {head_dim} not supported on {self.key} (supported: {dims})"
        return None


HEAD_DIMS = (16, 32, 64, 96, 128, 192, 256)
HIGH_PRECISION = ("fp16", "bf16", "fp32")
FP8 = ("fp8e4m3", "fp8e5m2")
KIB = 1024
