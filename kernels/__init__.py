"""Bundled Triton attention kernels.

Import after `conformance.backends.activate()` when running on Triton's CPU
interpreter: TRITON_INTERPRET=1 must be set before the kernels are defined.
"""

from kernels.allocation import poisoned_outputs
from kernels.dropout import dropout_keep_mask
from kernels.flash import flash_attention
from kernels.piecewise import piecewise_attention

# The harness replays a dropout mask through this attribute of the operator
# (implementations judged with --kernel provide their own).
flash_attention.dropout_keep_mask = dropout_keep_mask

__all__ = ["dropout_keep_mask", "flash_attention", "piecewise_attention", "poisoned_outputs"]
