"""Bundled Triton attention kernels: `flash_attention` (and its packed-batch form
`flash_attention_varlen`) and `piecewise_attention`.

They stand alone (torch and triton only): their launch tables per target live in
kernels.tuning, what each target supports in kernels.targets.  To run them on
Triton's CPU interpreter, set TRITON_INTERPRET=1 before the operators are first
used (triton reads it when a kernel is defined).  The operators are imported on
first access, so `kernels.targets` and `kernels.tuning` can be read before that
choice is made.

The package is imported as `conformance.bundled.kernels` (conformance/bundled says
why), and its modules import each other -- and the reference's argument checks --
relatively, so they never depend on the name it is imported under: a mutant's
copy of the package (mutants/transform.py) runs under a name of its own.
"""

import importlib

# Module of each public name, relative to this package (a renamed copy of the package,
# such as a mutant's, then finds its own modules).
_HOMES = {
    "flash_attention": "flash",
    "flash_attention_varlen": "flash_varlen",
    "piecewise_attention": "piecewise",
    "kv_cache_attention": "kv_cache",
    "dropout_keep_mask": "dropout",
    "poisoned_outputs": "allocation",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
