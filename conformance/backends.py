"""Backend profiles: what a backend can run and how the bundled kernels launch on it.

A profile is data (a frozen dataclass) plus a detector.  Kernels and tests ask the
*active* profile instead of branching on the platform themselves:

    profile = active_profile()
    cfg = profile.launch_config("fwd", head_dim=64)

The active profile is detected once per process (`detect()`), or chosen explicitly
with `activate("cuda:sm_90")` / the command line's `--backend`.

Detection must not import the kernels: under Triton's CPU interpreter the
environment variable TRITON_INTERPRET=1 has to be set *before* any `@triton.jit`
function is defined, and `activate()` is where that happens.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

KERNELS = ("fwd", "bwd_preprocess", "bwd_dkdv", "bwd_dq", "total")


@dataclass(frozen=True)
class LaunchConfig:
    """Tile shape and scheduling knobs of one kernel launch."""

    block_m: int
    block_n: int
    num_warps: int = 4
    num_stages: int = 1

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


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


@dataclass(frozen=True)
class BackendProfile:
    """Everything the harness and the kernels need to know about one backend.

    name:        backend family ("cuda", "hip", "iluvatar", "interpreter")
    arch:        architecture within the family ("sm_90", "gfx942", "cpu", ...)
    device:      the torch device type tensors live on ("cuda" or "cpu")
    dtypes:      input dtypes the bundled kernels support here
    head_dims:   head dims the bundled kernels support here
    default_tier: the catalog tier `run --tier auto` picks
    emulate_bf16: this backend's bf16 arithmetic is faulty; the kernels emulate it
                 faithfully in fp32 (see INTERPRETER)
    launch:      kernel name -> LaunchTable
    notes:       numerical quirks and how the harness accounts for them
    """

    name: str
    arch: str
    device: str
    dtypes: tuple[str, ...]
    head_dims: tuple[int, ...]
    default_tier: str
    launch: dict[str, LaunchTable] = field(hash=False, compare=False)
    emulate_bf16: bool = False
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

    def unsupported_reason(self, dtype: str, head_dim: int) -> str | None:
        """Why this backend cannot run a case, or None if it can."""
        if dtype not in self.dtypes:
            return f"dtype {dtype} not supported on {self.key} (supported: {', '.join(self.dtypes)})"
        if head_dim not in self.head_dims:
            dims = ", ".join(str(d) for d in self.head_dims)
            return f"head_dim {head_dim} not supported on {self.key} (supported: {dims})"
        return None


def _table(*rows: tuple[int, LaunchConfig]) -> LaunchTable:
    return LaunchTable(tuple(rows))


# Under the interpreter every program instance is a numpy evaluation: large tiles
# mean fewer, more vectorised instances, which is what makes the smoke tier fast.
_INTERPRETER_LAUNCH = {
    "fwd": _table((256, LaunchConfig(64, 64))),
    "bwd_preprocess": _table((256, LaunchConfig(64, 64))),
    "bwd_dkdv": _table((256, LaunchConfig(64, 64))),
    "bwd_dq": _table((256, LaunchConfig(64, 64))),
    "total": _table((256, LaunchConfig(64, 64))),
}

INTERPRETER = BackendProfile(
    name="interpreter",
    arch="cpu",
    device="cpu",
    dtypes=("fp16", "bf16", "fp32"),
    head_dims=(16, 32, 64, 96, 128, 192, 256),
    default_tier="smoke",
    launch=_INTERPRETER_LAUNCH,
    emulate_bf16=True,
    notes=(
        "Triton's interpreter returns garbage from tl.dot on bf16 operands (measured "
        "in triton 3.2, 3.6 and 3.9). The kernels upcast bf16 dot operands to fp32 "
        "here: a bf16 x bf16 product is exact in fp32 and the accumulation is fp32 "
        "anyway, so the result is what bf16 tensor cores compute.",
        "Triton's interpreter casts fp32 to bf16 by truncation, not round-to-nearest-even "
        "(measured in triton 3.9: half of uniform [0, 1) values differ from torch's cast, "
        "mean signed error -1.3e-3). Rounding probabilities always down biases dV by up "
        "to 2.7x the torch path's error. The kernels round to nearest even in integer "
        "arithmetic before every bf16 cast here, so the cast is exact.",
    ),
)

# Ampere and newer NVIDIA GPUs. Tiles follow the Triton fused-attention tutorial's
# proven shapes; D=128 needs 8 warps to keep the fp32 accumulators in registers.
# D=256 (and 192, padded to 256) halves the key tile so K/V stages fit the 99 KB of
# shared memory a block gets on sm_86/sm_89 (sm_80: 163 KB, sm_90: 227 KB).
_CUDA_LAUNCH = {
    "fwd": _table(
        (64, LaunchConfig(128, 64, num_warps=4, num_stages=3)),
        (128, LaunchConfig(128, 64, num_warps=8, num_stages=3)),
        (256, LaunchConfig(64, 32, num_warps=8, num_stages=2)),
    ),
    # delta = rowsum(dO * O) holds two [BLOCK_M, D] fp32 tiles: fewer rows as D grows
    # keep them in registers (128 rows at D = 256 spilled 2.7-6.7 KB, triton 3.2-3.9).
    "bwd_preprocess": _table(
        (64, LaunchConfig(128, 64, num_warps=4, num_stages=1)),
        (128, LaunchConfig(64, 64, num_warps=4, num_stages=1)),
        (256, LaunchConfig(32, 64, num_warps=4, num_stages=1)),
    ),
    "bwd_dkdv": _table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=8, num_stages=2)),
        (256, LaunchConfig(32, 32, num_warps=8, num_stages=1)),
    ),
    "bwd_dq": _table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=8, num_stages=2)),
        (256, LaunchConfig(32, 32, num_warps=8, num_stages=1)),
    ),
    "total": _table(
        (64, LaunchConfig(64, 64, num_warps=4, num_stages=2)),
        (128, LaunchConfig(64, 64, num_warps=8, num_stages=2)),
        (256, LaunchConfig(32, 64, num_warps=8, num_stages=1)),
    ),
    # fp32 tiles are twice as large: smaller blocks keep them within the 99 KB of
    # shared memory that sm_86/sm_89 offer a block (sm_80/sm_90 have more).  fp32
    # ("ieee") dots run on FMA units, not tensor cores; with 4 warps the forward
    # spilled 0.8-1.1 KB at D = 64 and the kernels 1.6-54 KB at D = 128 (ptxas,
    # sm_80/sm_90, triton 3.9); 8 warps and 16-row or 16-key tiles keep them in registers.
    "fwd.fp32": _table(
        (64, LaunchConfig(64, 32, num_warps=8, num_stages=2)),
        (256, LaunchConfig(16, 32, num_warps=8, num_stages=1)),
    ),
    "bwd_dkdv.fp32": _table(
        (64, LaunchConfig(32, 32, num_warps=4, num_stages=1)),
        (128, LaunchConfig(32, 16, num_warps=8, num_stages=1)),
        (256, LaunchConfig(16, 32, num_warps=8, num_stages=1)),
    ),
    "bwd_dq.fp32": _table(
        (64, LaunchConfig(32, 32, num_warps=4, num_stages=1)),
        (128, LaunchConfig(32, 32, num_warps=8, num_stages=1)),
        (256, LaunchConfig(32, 16, num_warps=8, num_stages=1)),
    ),
    "total.fp32": _table(
        (128, LaunchConfig(32, 32, num_warps=4, num_stages=1)),
        (256, LaunchConfig(16, 32, num_warps=8, num_stages=1)),
    ),
    # piecewise kernels hold two score tiles (near and far) per block: tiles chosen
    # for zero register spills on sm_90 (compile probe, triton 3.9), all within the
    # ~99 KB of shared memory sm_86/sm_89 allow.
    "piecewise_fwd": _table((64, LaunchConfig(128, 64, 8, 3)), (128, LaunchConfig(64, 32, 8, 2)),
                            (256, LaunchConfig(32, 32, 8, 2))),
    "piecewise_bwd_dkdv": _table((64, LaunchConfig(32, 32, 4, 2)), (128, LaunchConfig(32, 64, 8, 2)),
                                 (256, LaunchConfig(16, 32, 8, 1))),
    "piecewise_bwd_dq": _table((64, LaunchConfig(64, 32, 4, 2)), (128, LaunchConfig(32, 64, 8, 2)),
                               (256, LaunchConfig(32, 16, 8, 1))),
    "piecewise_fwd.fp32": _table((64, LaunchConfig(64, 32, 8, 2)), (128, LaunchConfig(32, 32, 8, 2)),
                                 (256, LaunchConfig(16, 16, 4, 1))),
    "piecewise_bwd_dkdv.fp32": _table((64, LaunchConfig(16, 32, 4, 1)), (128, LaunchConfig(16, 32, 4, 1)),
                                      (256, LaunchConfig(16, 16, 8, 1))),
    "piecewise_bwd_dq.fp32": _table((64, LaunchConfig(32, 32, 8, 1)), (128, LaunchConfig(32, 16, 4, 1)),
                                    (256, LaunchConfig(16, 16, 8, 1))),
}


def cuda_profile(capability: tuple[int, int]) -> BackendProfile:
    major, minor = capability
    bf16 = major >= 8
    return BackendProfile(
        name="cuda",
        arch=f"sm_{major}{minor}",
        device="cuda",
        dtypes=("fp16", "bf16", "fp32") if bf16 else ("fp16", "fp32"),
        head_dims=(16, 32, 64, 96, 128, 192, 256),
        default_tier="standard",
        launch=_CUDA_LAUNCH,
    )


def interpreter_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def detect() -> BackendProfile:
    """Profile of the device this process would run on (no kernels imported)."""
    if interpreter_requested():
        return INTERPRETER
    import torch

    if torch.cuda.is_available() and getattr(torch.version, "hip", None) is None:
        return cuda_profile(torch.cuda.get_device_capability())
    return INTERPRETER


def profile_by_key(key: str) -> BackendProfile:
    """Look a profile up by `name[:arch]`, e.g. `cuda:sm_90` or `interpreter`."""
    name, _, arch = key.partition(":")
    if name == "interpreter":
        return INTERPRETER
    if name == "cuda":
        arch = arch or "sm_80"
        digits = arch.removeprefix("sm_")
        if not digits.isdigit() or len(digits) < 2:
            raise ValueError(f"--backend: expected cuda:sm_XY (e.g. cuda:sm_90), got {key!r}")
        return cuda_profile((int(digits[:-1]), int(digits[-1])))
    raise ValueError(f"--backend: unknown backend {key!r}; known: interpreter, cuda:sm_XY")


_active: BackendProfile | None = None


def activate(profile: BackendProfile | str | None = None) -> BackendProfile:
    """Make `profile` (or the detected one) the process's active profile.

    For the interpreter this sets TRITON_INTERPRET=1, which only takes effect if the
    kernels have not been imported yet; call it first thing.
    """
    global _active
    if isinstance(profile, str):
        profile = profile_by_key(profile)
    _active = profile or detect()
    if _active.interpreted:
        os.environ["TRITON_INTERPRET"] = "1"
    return _active


def active_profile() -> BackendProfile:
    return _active if _active is not None else activate()
