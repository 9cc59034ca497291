"""`--target` of the compile-only tier: which profiles to compile for."""

from __future__ import annotations

from conformance.backends import known_keys, profile_by_key
from conformance.backends.profile import BackendProfile

# What CI checks: two NVIDIA and two AMD generations.
DEFAULT_TARGETS = "sm_80,sm_90,gfx90a,gfx942"


def _key(target: str) -> str:
    """sm_XY -> cuda:sm_XY, gfxNNN -> hip:gfxNNN; a full backend key stays as it is."""
    if ":" in target:
        return target
    return {"sm_": f"cuda:{target}", "gfx": f"hip:{target}"}.get(target[:3], target)


def target_profile(target: str) -> BackendProfile:
    """The profile a target names; ValueError naming --target for anything else."""
    try:
        profile = profile_by_key(_key(target.strip()))
    except ValueError:
        compilable = [key for key in known_keys() if profile_by_key(key).compile_target]
        raise ValueError(f"--target: unknown target {target.strip()!r}; expected sm_XY, gfxNNN or one of "
                         f"{', '.join(compilable)}") from None
    if profile.compile_target is None:
        raise ValueError(f"--target: {profile.key} cannot be compiled for without its device's own triton "
                         "build; compile-only targets are cuda:sm_XY and hip:gfxNNN")
    return profile


def parse_targets(text: str) -> list[BackendProfile]:
    """Comma-separated targets, in order, each once."""
    names = [name for name in (part.strip() for part in text.split(",")) if name]
    if not names:
        raise ValueError("--target: expected a comma-separated list such as sm_80,gfx942")
    profiles = {}
    for name in names:
        profile = target_profile(name)
        profiles.setdefault(profile.key, profile)
    return list(profiles.values())
