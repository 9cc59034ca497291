"""Launch configurations of the bundled kernels, per target: the kernels' own tuning.

One table set per target family (kernels.tables_nvidia, kernels.tables_amd), picked by
what the target's architecture offers (kernels.architectures: shared memory per block,
registers, wave size, matrix unit, TMA): the first set, richest first, whose needs the
target meets.  A set holds tile shapes, warps, stages and backend knobs for every kernel
role, by head dim and (where fp32 tiles need smaller blocks) by dtype.  A test harness may
read these tables (e.g. to compile every configuration for a target without its GPU); it
does not own them.
"""

from __future__ import annotations

import functools

from contextlib import contextmanager
from dataclasses import replace

from .launch_tables import BACKEND_KNOBS, LaunchConfig, LaunchTable, TableSet, map_tables, table
from .tables_amd import AMD_SETS, CDNA, HIP_LAUNCH, RDNA3, RDNA3_LAUNCH, RDNA4, RDNA4_LAUNCH
from .tables_nvidia import AMPERE, AMPERE_99KB, CUDA_LAUNCH, HOPPER, HOPPER_LAUNCH, NVIDIA_SETS
from .targets import Target, current_target

# The table sets and their tables are defined in tables_nvidia / tables_amd; named here too,
# where the kernels' readers (profiles, tests, benchmarks/tune_launch.py) look for them.
__all__ = ["AMPERE", "AMPERE_99KB", "BACKEND_KNOBS", "BORROWED", "CDNA", "CUDA_LAUNCH", "HIP_LAUNCH", "HOPPER",
           "HOPPER_LAUNCH", "ILUVATAR_LAUNCH", "INTERPRETER_LAUNCH", "KERNELS", "OVERRIDES", "RDNA3", "RDNA3_LAUNCH",
           "RDNA4", "RDNA4_LAUNCH", "LaunchConfig", "LaunchTable", "TableSet", "launch_config", "launch_tables",
           "map_tables", "record_launch", "recorded_launches", "table", "table_set"]

# The kernels a launch table set covers (the piecewise kernels have tables of their own).
KERNELS = ("fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq", "total")

# Roles a table set may leave out, and the role whose tables (its dtype tables too) they
# then take.  kv_cache_attention's split kernel streams key tiles against a query tile as
# the forward does, with at most its rows (kernels.decode_plan.row_tile), one gathered address
# per key more, and no descriptors: the forward's tiles, fitted to each family's shared
# memory and registers, fit it too.  Its merge reads [rows, D] fp32 tiles and sums them, as
# the delta pre-pass does.  Hopper's set has split tables of its own (kernels.tables_nvidia:
# a bandwidth-bound stream wants fewer warps than the forward, and at D 64 and 256 longer key tiles).
BORROWED = {"decode_split": "fwd", "decode_merge": "bwd_preprocess"}

# Iluvatar CoreX (64-wide warps, limits unpublished): untuned, Ampere's tiles with half the
# warps, so that a block keeps the thread count those tiles were measured with.
ILUVATAR_LAUNCH = map_tables(CUDA_LAUNCH, lambda config: replace(config, num_warps=max(1, config.num_warps // 2)))

# Under the interpreter every program instance is a numpy evaluation: large tiles
# mean fewer, more vectorised instances, which is what makes the smoke tier fast.
INTERPRETER_LAUNCH = {
    "fwd": table((256, LaunchConfig(64, 64))),
    "bwd_preprocess": table((256, LaunchConfig(64, 64))),
    "bwd_dkdv": table((256, LaunchConfig(64, 64))),
    "bwd_dq": table((256, LaunchConfig(64, 64))),
    "total": table((256, LaunchConfig(64, 64))),
    # 16-key tiles: the few dozen keys of an interpreter-sized cache still span several
    # tiles and splits.
    "decode_split": table((256, LaunchConfig(16, 16))),
}


_SETS = {"cuda": NVIDIA_SETS, "hip": AMD_SETS}


@functools.lru_cache(maxsize=None)
def table_set(target: Target) -> tuple[TableSet, str | None]:
    """The table set a GPU target takes, and why it is not a better one: the first of its
    vendor's sets (richest first) whose needs its architecture meets; if none fits, the
    least demanding of them, with why it does not fit (a target the kernels do not support,
    such as sm_75's 64 KB: its launches may fail).  Worked out once per target (its facts
    and the sets are constants): every launch asks, and the sets' checks took ~7 us."""
    facts, sets = target.facts, _SETS[target.backend]
    for candidate in sets:
        if candidate.misfit(facts) is None:
            return candidate, None
    same_unit = [candidate for candidate in sets if facts.matrix_unit in candidate.matrix_units
                 and facts.warp_size == candidate.warp_size]
    fallback = min(same_unit or sets, key=lambda candidate: candidate.shared_memory_bytes)
    return fallback, f"no launch table set fits {target.name}; {fallback.name}'s does not: {fallback.misfit(facts)}"


def launch_tables(target: Target) -> dict[str, LaunchTable]:
    """The tables of a target: its table set's (table_set), Iluvatar CoreX's (CUDA-
    compatible, 64-wide warps, limits unpublished) or the interpreter's."""
    if target.interpreted:
        return INTERPRETER_LAUNCH
    if target.corex:
        return ILUVATAR_LAUNCH
    return table_set(target)[0].tables


# kernel -> the configuration every launch of it uses instead of its tables' (set by
# kernels.tuning_space.configured: a sweep or a tuning script judging one configuration).
# A plain dict, not a context variable: autograd runs the backward's launches on a thread
# of its own.
OVERRIDES: dict[str, LaunchConfig] = {}


def launch_config(kernel: str, head_dim: int, dtype: str = "fp16", target: Target | None = None,
                  variants: str | tuple[str, ...] = (), band_keys: int | None = None) -> LaunchConfig:
    """Launch config of `kernel` for a (padded) head dim and input dtype name on `target`
    (default: the current one).  A table keyed `"{kernel}.{dtype}"` (e.g. `fwd.fp32`, whose
    tiles take twice the shared memory) overrides the kernel's general table, and so, for
    the other dtypes, does `"{kernel}.{variant}"` for the first of the problem's `variants`
    (a name or names, first preferred) the tables hold: e.g. `fwd.dropout`, whose
    random-number tiles need shared memory of their own, or `fwd.window` then `fwd.varlen`
    for a windowed packed batch.  A table for narrow bands (LaunchTable.widest_band) is
    passed by unless the problem's band, `band_keys` keys a row, is that narrow.  A role the
    tables lack takes the tables of the role it borrows (BORROWED).  An override
    (OVERRIDES) wins over every table."""
    if kernel in OVERRIDES:
        return OVERRIDES[kernel]
    tables = launch_tables(target or current_target())
    variants = (variants,) if isinstance(variants, str) else variants
    roles = (kernel, *((BORROWED[kernel],) if kernel in BORROWED else ()))
    for role in roles:  # a borrowed role's tables, not its override: a sweep of fwd leaves decode alone
        keys = (f"{role}.{dtype}", *(f"{role}.{variant}" for variant in variants), role)
        for key in keys:
            if key in tables and tables[key].serves_band(band_keys):
                return tables[key].pick(head_dim)
    raise KeyError(f"no launch table for kernel {kernel!r}")


# The records of the open `recorded_launches()`, outermost first; kernels.launch records
# every launch in each.  A plain list, as OVERRIDES is a plain dict.
_open_records: list[dict[str, LaunchConfig]] = []


@contextmanager
def recorded_launches():
    """Yields a dict that fills, as the kernels launch inside, with kernel -> the configuration
    it launched with (its table's or an override), `descriptors` as the launch really took
    them: what a harness reads to confirm that a configuration it set was the one used.
    Records nest: a launch inside two open ones is in both (a runner's record and the one a
    KV-cache call keeps for its replay)."""
    record: dict[str, LaunchConfig] = {}
    _open_records.append(record)
    try:
        yield record
    finally:
        _open_records[:] = [open_record for open_record in _open_records if open_record is not record]


def record_launch(kernel: str, config: LaunchConfig) -> None:
    """Note `config` as `kernel`'s launch in every open `recorded_launches()`."""
    for record in _open_records:
        record[kernel] = config
