"""Which profile this process runs under: detection from torch/triton attributes, or a key.

Detection must not import the kernels (TRITON_INTERPRET has to be settled before any
@triton.jit function is defined), and on a machine without a GPU it must not touch
triton's driver (there is none to create).
"""

from __future__ import annotations

import importlib.util
import os
import re

from conformance.backends.cuda import CUDA_ARCHS, cuda_profile
from conformance.backends.hip import HIP_ARCHS, hip_profile
from conformance.backends.iluvatar import ILUVATAR_ARCHS, iluvatar_arch, iluvatar_profile
from conformance.backends.interpreter import INTERPRETER
from conformance.backends.profile import BackendProfile


def interpreter_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _triton_target():
    """triton's GPUTarget for the current device, or None if triton cannot say."""
    try:
        from triton.runtime import driver

        return driver.active.get_current_target()
    except Exception:  # no driver, a vendor fork without the API, ...: no answer
        return None


def iluvatar_markers(torch) -> list[str]:
    """The signs of an Iluvatar CoreX software stack that are present (see iluvatar.py)."""
    markers = []
    if getattr(torch, "corex", False) is True:
        markers.append("torch.corex")
    if importlib.util.find_spec("triton") and importlib.util.find_spec("triton.backends.iluvatar"):
        markers.append("triton.backends.iluvatar")
    if not markers:
        target = _triton_target()
        if target is not None and target.backend == "cuda" and target.warp_size == 64:
            markers.append("triton target cuda with 64-wide warps")
    return markers


def _hip_arch(torch) -> str:
    name = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "") or ""
    arch = name.split(":")[0]
    if arch:
        return arch
    target = _triton_target()
    return str(target.arch) if target is not None else "gfx-unknown"


def detect() -> BackendProfile:
    """Profile of the device this process would run on (no kernels imported)."""
    if interpreter_requested():
        return INTERPRETER
    import torch

    if not torch.cuda.is_available():
        return INTERPRETER
    return _present_gpu(torch)


def _present_gpu(torch) -> BackendProfile:
    """The profile of the GPU torch sees (there is one)."""
    if getattr(torch.version, "hip", None) is not None:
        return hip_profile(_hip_arch(torch))
    capability = tuple(torch.cuda.get_device_capability())
    if iluvatar_markers(torch):
        return iluvatar_profile(iluvatar_arch(capability))
    return cuda_profile(capability)


def absence(profile: BackendProfile) -> str | None:
    """Why this machine cannot run as `profile` -- it names a device that is not here --
    in one line; None when it can (the interpreter always can).

    A user's --backend overrides detection, but only among what is present: a profile's
    facts (dtypes, head dims, shared memory) decide verdicts, so a GPU on a machine
    without one, another vendor's, or another architecture than the card in it would
    judge the kernels against a card that is not running them.  An Iluvatar key is
    accepted on any CUDA-like GPU: such cards look like NVIDIA ones to torch, and the
    markers detection relies on may be missing from a software stack (the override's
    reason to exist); so is any key where the card's architecture cannot be read.
    """
    if profile.interpreted:
        return None
    import torch

    if not torch.cuda.is_available():
        return (f"{profile.key} names a GPU, but torch sees none on this machine "
                f"(use --backend interpreter, or leave --backend out)")
    present = _present_gpu(torch)
    if profile.name == "iluvatar" and present.name in ("cuda", "iluvatar"):
        return None
    if profile.name != present.name or present.arch not in (profile.arch, "gfx-unknown"):
        return f"{profile.key} is not this machine's GPU, which is {present.key} (leave --backend out to use it)"
    return None


def known_keys() -> list[str]:
    """Every key profile_by_key knows by name (cuda:sm_XY takes any capability)."""
    return ["interpreter",
            *(f"cuda:sm_{major}{minor}" for major, minor in CUDA_ARCHS),
            *(f"hip:{arch}" for arch in HIP_ARCHS),
            *(f"iluvatar:{arch}" for arch in ILUVATAR_ARCHS.values())]


def _unknown(key: str, expected: str) -> ValueError:
    return ValueError(f"--backend: {expected}, got {key!r}; known: {', '.join(known_keys())}")


def _cuda(key: str, arch: str) -> BackendProfile:
    digits = (arch or "sm_80").removeprefix("sm_")
    if not digits.isdigit() or len(digits) < 2:
        raise _unknown(key, "expected cuda:sm_XY (e.g. cuda:sm_90)")
    return cuda_profile((int(digits[:-1]), int(digits[-1])))


def _hip(key: str, arch: str) -> BackendProfile:
    if not re.fullmatch(r"gfx[0-9a-f]{3,4}", arch):
        raise _unknown(key, "expected hip:gfxNNN (e.g. hip:gfx942)")
    return hip_profile(arch)


def _iluvatar(key: str, arch: str) -> BackendProfile:
    if arch not in ILUVATAR_ARCHS.values():
        raise _unknown(key, "expected iluvatar:ivcoreNN (e.g. iluvatar:ivcore11)")
    return iluvatar_profile(arch)


_FAMILIES = {"cuda": _cuda, "hip": _hip, "iluvatar": _iluvatar}


def profile_by_key(key: str) -> BackendProfile:
    """Look a profile up by `name[:arch]`, e.g. `cuda:sm_90`, `hip:gfx942`,
    `iluvatar:ivcore11` or `interpreter`; ValueError (naming --backend and the
    known keys) for anything else."""
    name, _, arch = key.strip().partition(":")
    if name == "interpreter" and arch in ("", INTERPRETER.arch):
        return INTERPRETER
    if name in _FAMILIES:
        return _FAMILIES[name](key, arch)
    raise _unknown(key, "unknown backend")
