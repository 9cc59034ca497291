"""The fp32 reference and the same-precision torch path for attention.

``attention_forward`` / ``attention_backward`` run one chunked, memory-bounded algorithm at a
declared :class:`Precision`: ``REFERENCE`` (float64 throughout) or ``MATCHED`` (what a fused
FlashAttention kernel does: input-dtype matmul operands, fp32 accumulation and softmax).
They take FlashAttention-2's variants as keyword arguments (``reference.variants``): ``window``,
``softcap``, ``alibi_slopes`` and the ``seq_lens`` of a padded variable-length batch.
"""

from .attention import attention_backward, attention_forward
from .delta_noise import GradientNoise, attention_delta_noise, piecewise_delta_noise
from .dropout import Dropout
from .piecewise import piecewise_backward, piecewise_forward
from .precision import MATCHED, MATCHED_TF32, REFERENCE, Precision

__all__ = ["Dropout", "Precision", "REFERENCE", "MATCHED", "MATCHED_TF32", "attention_forward", "attention_backward",
           "piecewise_forward", "piecewise_backward", "attention_delta_noise", "piecewise_delta_noise",
           "GradientNoise"]
