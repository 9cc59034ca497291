"""The shapes of the kernels' launch tables: one configuration (`LaunchConfig`), a table
of them by head dim (`LaunchTable`), and a set of tables for every kernel role with
what a target must offer to take it (`TableSet`).

The sets themselves are in kernels.tables_nvidia and kernels.tables_amd; kernels.tuning
picks one per target by its architecture's facts (kernels.architectures).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .architectures import ArchFacts

# Compiler options only some Triton backends take: a launch passes one only where
# its table sets it (triton rejects options its backend does not know).
BACKEND_KNOBS = ("waves_per_eu", "matrix_instr_nonkdim", "kpack")


@dataclass(frozen=True)
class LaunchConfig:
    """Tile shape and scheduling knobs of one kernel launch.

    waves_per_eu, matrix_instr_nonkdim, kpack: options of Triton's AMD backend
    (occupancy hint, MFMA instruction shape, operand packing); None = not passed.
    descriptors: stream the loop's tiles through tensor descriptors (the TMA unit on
    Hopper) where the target and the tensors allow it (kernels.launch), else pointers.
    head_chunk: keep no [rows, D] operand through the loop and take the products over the
    head dim this many columns at a time (kernels.head_slices); None = whole tiles kept
    in registers.  Only where it is below the padded head dim does a launch pass it.
    """

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 1
    waves_per_eu: int | None = None
    matrix_instr_nonkdim: int | None = None
    kpack: int | None = None
    descriptors: bool = False
    head_chunk: int | None = None

    def __post_init__(self):
        chunk = self.head_chunk
        if chunk is not None and (chunk < 16 or chunk & (chunk - 1)):
            raise ValueError(f"LaunchConfig: head_chunk must be a power of two >= 16 (a tl.dot's "
                             f"smallest K), got {chunk}")
        if chunk is not None and self.descriptors:
            raise ValueError("LaunchConfig: head_chunk reads its slices through pointers; "
                             "it cannot be combined with descriptors")

    def options(self) -> dict:
        """The compiler options a launch passes: warps, stages and every knob that is set."""
        knobs = {name: getattr(self, name) for name in BACKEND_KNOBS if getattr(self, name) is not None}
        return {"num_warps": self.num_warps, "num_stages": self.num_stages, **knobs}

    def as_dict(self) -> dict:
        """Tile sizes and options, unset knobs left out."""
        return {"block_m": self.block_m, "block_n": self.block_n, **self.options(),
                **({"descriptors": True} if self.descriptors else {}),
                **({"head_chunk": self.head_chunk} if self.head_chunk is not None else {})}


@dataclass(frozen=True)
class LaunchTable:
    """Launch configs of one kernel, chosen by head dim: the first row whose
    `max_head_dim` is >= the (padded) head dim wins.

    widest_band: set on a table for banded problems (a sliding window's "window" variant):
    the most keys a row (left + right + 1) whose band it serves.  Its rows were measured
    faster than the kernel's own only for bands that narrow, on the hardware its set was
    tuned on; a wider band, or a problem with no band, passes it by (kernels.tuning.launch_config)."""

    rows: tuple[tuple[int, LaunchConfig], ...]
    widest_band: int | None = None

    def pick(self, head_dim: int) -> LaunchConfig:
        for max_head_dim, config in self.rows:
            if head_dim <= max_head_dim:
                return config
        raise ValueError(f"no launch config for head_dim={head_dim}")

    def replaced(self, bound: int, config: LaunchConfig) -> LaunchTable:
        """This table with the row of `bound` holding `config` instead."""
        return replace(self, rows=tuple((row, config if row == bound else old) for row, old in self.rows))

    def serves_band(self, band_keys: int | None) -> bool:
        """Whether a problem whose band holds `band_keys` keys a row (None: no band) takes
        this table: always, unless the table is for bands of at most `widest_band` keys."""
        return self.widest_band is None or (band_keys is not None and band_keys <= self.widest_band)


def table(*rows: tuple[int, LaunchConfig], widest_band: int | None = None) -> LaunchTable:
    return LaunchTable(tuple(rows), widest_band)


def map_tables(tables: dict[str, LaunchTable], change) -> dict[str, LaunchTable]:
    """Every config of every table passed through `change(config) -> config`."""
    return {name: replace(tab, rows=tuple((bound, change(config)) for bound, config in tab.rows))
            for name, tab in tables.items()}


def with_warps(tables: dict[str, LaunchTable], num_warps: int) -> dict[str, LaunchTable]:
    """Every config of `tables` with `num_warps` warps (and no AMD occupancy hint)."""
    return map_tables(tables, lambda config: replace(config, num_warps=num_warps, waves_per_eu=None))


@dataclass(frozen=True)
class TableSet:
    """Launch tables for every kernel role, and what a target must offer to take them.

    tables: kernel role -> LaunchTable (`fwd`, `fwd.fp32`, `fwd.dropout`, ..., see
    kernels.tuning.launch_config); matrix_units: the matrix units the tiles were chosen for
    (kernels.architectures); warp_size: the wave size whose thread counts they assume;
    shared_memory_bytes: the most shared memory any of its configurations takes (measured
    by the compile-only tier, said where the set is defined); registers_per_thread: the
    register budget its tiles were chosen within; origin: how the tiles were chosen (one
    sentence, for a profile's notes).  descriptors: some configuration streams through
    tensor descriptors, so the target needs a TMA unit.
    """

    name: str
    tables: dict[str, LaunchTable]
    matrix_units: tuple[str, ...]
    warp_size: int
    shared_memory_bytes: int
    registers_per_thread: int
    origin: str = ""

    @property
    def descriptors(self) -> bool:
        return any(config.descriptors for tab in self.tables.values() for _, config in tab.rows)

    def misfit(self, facts: ArchFacts) -> str | None:
        """Why a target with `facts` cannot take this set (one line), or None if it can."""
        if facts.matrix_unit not in self.matrix_units:
            return f"its tiles are for {'/'.join(self.matrix_units)}, not {facts.matrix_unit}"
        if facts.warp_size != self.warp_size:
            return f"its tiles are for {self.warp_size}-wide waves, not {facts.warp_size}"
        if facts.shared_memory_bytes < self.shared_memory_bytes:
            return (f"it takes up to {self.shared_memory_bytes:,} B of shared memory per block, "
                    f"the target allows {facts.shared_memory_bytes:,}")
        if facts.registers_per_thread < self.registers_per_thread:
            return (f"its tiles need {self.registers_per_thread} registers per thread, "
                    f"the target has {facts.registers_per_thread}")
        if self.descriptors and not facts.tensor_memory_accelerator:
            return "it streams tiles through tensor descriptors and the target has no TMA unit"
        return None
