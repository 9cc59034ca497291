"""`--target` of the compile-only tier: which profiles to compile for.

The default is every architecture family the kernels support (one with facts in
kernels.architectures and a launch table set that fits it, kernels.tuning.table_set), by
its first listed architecture: the others of a family share its facts and its tables
(sm_87 sm_80's, sm_103 sm_100's, sm_121 sm_120's, gfx1200 gfx1201's) or another family's
tables (sm_86 takes the 99 KB set that sm_89 and sm_120 compile); `--target` names them.  A
default target the installed triton cannot compile comes out `unsupported` with the
compiler's reason (tier.py asks each target's compiler first), not as errors.
"""

from __future__ import annotations

from conformance.backends import known_keys, profile_by_key
from conformance.backends.profile import BackendProfile
from conformance.bundled.kernels.architectures import ARCHITECTURES, architecture_name
from conformance.bundled.kernels.targets import Target
from conformance.bundled.kernels.tuning import table_set


def _supported() -> list[tuple[str, str]]:
    """(family, sm_XY / gfxNNN) of every listed architecture a launch table set fits, in listed order."""
    return [(facts.family, architecture_name(backend, arch)) for (backend, arch), facts in ARCHITECTURES.items()
            if table_set(Target(backend, arch, facts.warp_size))[1] is None]


def supported_architectures() -> list[str]:
    """sm_XY / gfxNNN of every architecture the kernels support, in listed order."""
    return [name for _, name in _supported()]


def family_representatives() -> list[str]:
    """The first supported architecture of each family, in listed order."""
    first = {}
    for family, name in _supported():
        first.setdefault(family, name)
    return list(first.values())


DEFAULT_TARGETS = ",".join(family_representatives())


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
