"""Values the tiers' grids share (conformance.cases.tiers, conformance.cases.kv_cache_tiers),
written once so that the training and the decoding grids stress the same edges."""

BOTH_DIRECTIONS = ("fwd", "bwd")
HALF_DTYPES = ("fp16", "bf16")
CAUSAL_BOTH = (False, True)
# Input distributions of the cases that stress one numerical edge (conformance.cases.distributions).
NEGATIVE = "negative:1000"
DOMINANT = "logits:64"  # logits of std 64: the top key of a row outweighs the rest
SOFTCAP = 30.0  # Gemma-2's attention softcap
