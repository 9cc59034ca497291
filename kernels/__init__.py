"""Bundled Triton attention kernels.

Import after `conformance.backends.activate()` when running on Triton's CPU
interpreter: TRITON_INTERPRET=1 must be set before the kernels are defined.
"""

from kernels.allocation import poisoned_outputs
from kernels.flash import flash_attention

__all__ = ["flash_attention", "poisoned_outputs"]
