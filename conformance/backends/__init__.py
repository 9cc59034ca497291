"""Backend profiles: what the harness knows about a backend, and which one is active.

A profile is data (a frozen dataclass, `profile.py`) plus a detector
(`detection.py`); it reads the kernels' own launch tables and supported dtypes
(kernels.tuning, kernels.targets) and imports nothing else of the repository.
One module per backend family holds its facts:
`cuda.py` (NVIDIA, per compute capability), `hip.py` (AMD ROCm, per gfx arch),
`iluvatar.py` (Iluvatar CoreX), `interpreter.py` (Triton's CPU interpreter).
The harness and tests ask the *active* profile instead of branching on the platform:

    profile = active_profile()
    profile.dtypes, profile.unsupported_reason("fp8e4m3", 64), profile.launch_config("fwd", 64)

The active profile is detected once per process (`detect()`), or chosen explicitly
with `activate("cuda:sm_90")` / the command line's `--backend` -- which the commands
first check names a device this machine has (`absence()`; tests activate profiles of
absent devices on purpose, so `activate()` itself does not).

Detection must not define the kernels (kernels.targets and kernels.tuning define
none): under Triton's CPU interpreter the environment variable TRITON_INTERPRET=1
has to be set *before* any `@triton.jit` function is defined, and `activate()` is
where that happens.
"""

from __future__ import annotations

import os

from conformance.backends.cuda import CUDA_ARCHS, cuda_profile
from conformance.backends.detection import absence, detect, interpreter_requested, known_keys, profile_by_key
from conformance.backends.hip import HIP_ARCHS, hip_profile
from conformance.backends.iluvatar import ILUVATAR_ARCHS, iluvatar_profile
from conformance.backends.interpreter import INTERPRETER
from conformance.backends.profile import KERNELS, BackendProfile, LaunchConfig, LaunchTable

__all__ = ["CUDA_ARCHS", "HIP_ARCHS", "ILUVATAR_ARCHS", "INTERPRETER", "KERNELS", "BackendProfile",
           "LaunchConfig", "LaunchTable", "absence", "activate", "active_profile", "cuda_profile", "detect",
           "hip_profile", "iluvatar_profile", "interpreter_requested", "known_keys", "profile_by_key"]

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
