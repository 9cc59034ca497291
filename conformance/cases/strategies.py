"""Hypothesis strategies over the case space, for property-based search.

    from conformance.cases import strategies
    @strategies.profile_settings()
    @hypothesis.given(strategies.cases(max_seq=96), strategies.distributions())
    def test_...(case, distribution): ...

* `shapes` -- (batch, heads, kv_heads dividing heads, seq_q, seq_k)
* `cases` -- valid `catalog.Case` objects: op, direction, dtype, head dim from the
  kernels' supported set, causal, lse/total, dropout p, layout, piecewise distance
* `masked_row_cases` -- causal with Sq > Sk: the first Sq - Sk query rows see no key
* `variant_cases` -- FlashAttention-2's variants: windows (either side unbounded or not),
  softcaps, ALiBi slopes per head or per (sequence, head), on dense and packed batches
  (flash_attention_varlen with equal, paired or mixed lengths)
* `kv_cache_cases` -- kv_cache_attention cases: contiguous or paged caches (page sizes 1 to
  64, shuffled or shared tables), forced or heuristic splits, appended tokens, cache lengths
* `distributions` -- `conformance.cases.distributions.Distribution` or None (plain N(0, 1)):
  scaled inputs, large logits up to what the dtype (inputs) and fp32 (scores)
  hold, outliers, near-constant scores; parameters are powers of two, so they are
  exact and shrink to short specs
* `reproducer` -- the text a failing example prints: case id, distribution,
  verdict and the one command that re-runs it

Profiles (hypothesis settings, chosen by FA_HYPOTHESIS_PROFILE, default "ci"):
"ci" is derandomized (the same examples on every run) and small; "nightly" draws
many more, larger examples and keeps a failure database.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from conformance.backends.profile import HEAD_DIMS  # what the bundled kernels support
from conformance.backends.profile import HIGH_PRECISION as DTYPES  # fp8 is forward-only: not drawn
from conformance.cases.catalog import LAYOUTS, Case
from conformance.cases.distributions import Distribution

DROPOUT_PS = (0.1, 0.5)

PROFILE_ENV = "FA_HYPOTHESIS_PROFILE"
_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("ci", derandomize=True, database=None, deadline=None, max_examples=10,
                          suppress_health_check=_SLOW_OK, print_blob=False)
settings.register_profile("nightly", deadline=None, max_examples=300, suppress_health_check=_SLOW_OK,
                          print_blob=True)
# Size limits per profile: sequence lengths, batch, heads (the interpreter runs CI).
SIZES = {"ci": dict(max_seq=96, max_batch=2, max_heads=4, head_dims=(16, 32, 64)),
         "nightly": dict(max_seq=300, max_batch=3, max_heads=8, head_dims=HEAD_DIMS)}


def profile_name() -> str:
    name = os.environ.get(PROFILE_ENV, "ci")
    if name not in SIZES:
        raise ValueError(f"{PROFILE_ENV}={name!r}: expected one of {', '.join(SIZES)}")
    return name


def profile_settings() -> settings:
    """The hypothesis settings of the selected profile (usable as a decorator)."""
    return settings.get_profile(profile_name())


def profile_sizes() -> dict:
    """The size limits of the selected profile (keyword arguments of `cases`)."""
    return dict(SIZES[profile_name()])


@st.composite
def shapes(draw, max_batch: int = 2, max_heads: int = 4, max_seq: int = 128) -> dict:
    """batch, heads, kv_heads (a divisor of heads: MHA, GQA or MQA), seq_q, seq_k."""
    heads = draw(st.integers(1, max_heads))
    kv_heads = draw(st.sampled_from([d for d in range(1, heads + 1) if heads % d == 0]))
    return dict(batch=draw(st.integers(1, max_batch)), heads=heads, kv_heads=kv_heads,
                seq_q=draw(st.integers(1, max_seq)), seq_k=draw(st.integers(1, max_seq)))


@st.composite
def cases(draw, ops=("flash_attention", "piecewise_attention"), directions=("fwd", "bwd"), dtypes=DTYPES,
          head_dims=HEAD_DIMS, max_seq: int = 128, max_batch: int = 2, max_heads: int = 4,
          causal=None, extras: bool = True) -> Case:
    """A valid case of the bundled operators; features only where the op has them
    (none with `extras=False`: no lse, total or dropout, contiguous inputs)."""
    op = draw(st.sampled_from(ops))
    direction = draw(st.sampled_from(directions))
    shape = draw(shapes(max_batch, max_heads, max_seq))
    fields = dict(op=op, direction=direction, dtype=draw(st.sampled_from(dtypes)),
                  head_dim=draw(st.sampled_from(head_dims)),
                  causal=draw(st.booleans()) if causal is None else causal,
                  seed=draw(st.integers(0, 2**16)), **shape)
    if op == "piecewise_attention":
        fields["dist"] = draw(st.integers(0, max(shape["seq_q"], shape["seq_k"])))
    if not extras:
        return Case(**fields)
    fields["layout"] = draw(st.sampled_from(LAYOUTS))
    if op == "flash_attention":
        fields["dropout"] = draw(st.sampled_from((0.0, *DROPOUT_PS)))
        if direction == "fwd":
            fields.update(lse=draw(st.booleans()), total=draw(st.booleans()))
    return Case(**fields)


@st.composite
def masked_row_cases(draw, **limits) -> Case:
    """Causal cases with Sq > Sk: the first Sq - Sk rows see no key (output 0, lse -inf)."""
    case = draw(cases(causal=True, **limits))
    if case.seq_q <= case.seq_k:
        case = Case(**{**case.fields(), "seq_q": case.seq_k + 1, "seq_k": case.seq_q})
    return case


SOFTCAPS = (5.0, 20.0, 30.0)


@st.composite
def windows(draw, max_seq: int):
    """None, or (left, right) with -1 (unbounded) or 0 .. max_seq on each side, not both -1."""
    side = st.one_of(st.just(-1), st.integers(0, max_seq))
    window = draw(st.one_of(st.none(), st.tuples(side, side)))
    return None if window == (-1, -1) else window


@st.composite
def variant_cases(draw, directions=("fwd", "bwd"), dtypes=DTYPES, head_dims=HEAD_DIMS, max_seq: int = 128,
                  max_batch: int = 2, max_heads: int = 4) -> Case:
    """flash_attention or flash_attention_varlen with a window, a softcap and ALiBi slopes, each
    drawn on or off (a packed batch of up to 4 * max_batch sequences, lengths from the case)."""
    varlen = draw(st.booleans())
    case = draw(cases(ops=("flash_attention",), directions=directions, dtypes=dtypes, head_dims=head_dims,
                      max_seq=max_seq, max_batch=max_batch * (4 if varlen else 1), max_heads=max_heads,
                      extras=False))
    fields = dict(case.fields(), window=draw(windows(max(case.seq_q, case.seq_k))),
                  softcap=draw(st.sampled_from((0.0, *SOFTCAPS))), alibi=draw(st.sampled_from((None, "h", "bh"))))
    if case.direction == "fwd":
        fields["lse"] = draw(st.booleans())
    if varlen:
        patterns = ("equal", "mixed", *(("paired",) if case.seq_q == case.seq_k else ()))
        fields.update(op="flash_attention_varlen", lens=draw(st.sampled_from(patterns)))
    return Case(**fields)


KV_PAGE_SIZES = (None, 1, 2, 3, 16, 64)


@st.composite
def kv_cache_cases(draw, dtypes=DTYPES, head_dims=HEAD_DIMS, max_seq: int = 128, max_batch: int = 3,
                   max_heads: int = 4) -> Case:
    """A valid kv_cache_attention case: 1 to 8 new tokens, a cache of up to max_seq keys."""
    shape = draw(shapes(max_batch, max_heads, max_seq))
    seq_q = draw(st.integers(1, min(8, shape["seq_k"])))
    page = draw(st.sampled_from(KV_PAGE_SIZES))
    fields = dict(op="kv_cache_attention", direction="fwd", dtype=draw(st.sampled_from(dtypes)),
                  head_dim=draw(st.sampled_from(head_dims)), causal=draw(st.booleans()),
                  seed=draw(st.integers(0, 2**16)), **{**shape, "seq_q": seq_q},
                  lens=draw(st.sampled_from(("equal", "mixed"))), lse=draw(st.booleans()), page=page,
                  splits=draw(st.integers(0, 5)), append=draw(st.booleans()),
                  table=None if page is None else draw(st.sampled_from((None, "shuffled", "shared"))))
    return Case(**fields)


# kind -> (smallest, largest) power-of-two exponent of the parameter, per input dtype.
# Bounds keep every tensor finite where the reference is: fp16 inputs stop at its
# range (65504), and gradients (about M^3 for outliers M in q, k, v and dO) must fit it;
# bf16/fp32 logits stop where fp32 scores (sqrt(L)^2 * sqrt(D) * a few) still fit.
PARAMETER_EXPONENTS = {
    "scaled": {"fp16": (-8, 4), "bf16": (-8, 8), "fp32": (-8, 8)},
    "logits": {"fp16": (0, 20), "bf16": (0, 60), "fp32": (0, 60)},
    "outliers": {"fp16": (3, 5), "bf16": (3, 12), "fp32": (3, 12)},
    "nearconst": {"fp16": (-12, -2), "bf16": (-12, -2), "fp32": (-12, -2)},
}


# The input scales peers' suites draw q, k, v (and dO) with: FlagAttention uses standard
# deviations 1 to 4, and 10 for decode shapes.
PEER_SCALES = (1.0, 2.0, 3.0, 4.0, 10.0)


def distributions(dtype: str = "fp16"):
    """None (plain N(0, 1)), a peer's input scale, or a Distribution whose parameter suits `dtype`."""
    shaped = st.sampled_from(sorted(PARAMETER_EXPONENTS)).flatmap(
        lambda kind: st.integers(*PARAMETER_EXPONENTS[kind][dtype]).map(
            lambda exponent: Distribution(kind, 2.0**exponent)))
    peer_scales = st.sampled_from([Distribution("scaled", scale) for scale in PEER_SCALES])
    return st.one_of(st.none(), peer_scales, shaped)


@st.composite
def cases_with_distributions(draw, **limits) -> tuple[Case, Distribution | None]:
    """A case and a value distribution fitted to its dtype."""
    case = draw(cases(**limits))
    return case, draw(distributions(case.dtype))


def reproducer(line: dict) -> str:
    """What a failing example prints: the case, its distribution, verdict and command."""
    return "\n".join([f"case: {line['case']}", f"distribution: {line.get('distribution', 'normal')}",
                      f"verdict: {line['verdict']}: {line.get('reason', '')}",
                      f"reproduce: {line['reproduce']}"])
