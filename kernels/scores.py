"""The score of a (query, key) pair as the softmax sees it, in one place for the forward,
both backward kernels and the total attention: plain, soft-capped, ALiBi-biased.

Plain attention keeps the scores unscaled (raw = q . k) and hands the softmax the scale
apart (blocks.online_softmax_weights, blocks.normalised: the running max and the
exponent are formed before scaling, which keeps lse as accurate as torch's).  A soft
cap or an ALiBi bias acts on the *scaled* score, FlashAttention-2's order:

    s = softcap * tanh(raw * sm_scale / softcap)      (SOFTCAP)
    s = s - slope_h * |i + Sk - Sq - j|              (ALIBI, after the cap)

The softmax takes each form in its own units (`softmax_scale`): with the cap, the tanh
scaled by the cap; with the bias alone, raw - (slope_h / sm_scale) * distance scaled by
sm_scale, as plain scores are; with both, the scaled score itself.  Without both flags
every helper here returns its input untouched and the plain kernels compile as before
the variants existed.
"""

import triton
import triton.language as tl

from .bands import visible_pairs
from .blocks import LOG2_E, normalised

# |x| below which tanh is the polynomial, above which it is built from exp (`tanh_and_slope`).
TANH_POLYNOMIAL_BOUND = tl.constexpr(0.55)
# exp(-2|x|) as exp2(-2 log2(e) |x|) (tanh_and_slope).
MINUS_TWO_LOG2_E = tl.constexpr(-2.0 * LOG2_E.value)
# fp32's sign bit as an int32 (with_sign_of).
SIGN_BIT = tl.constexpr(-2147483648)


@triton.jit
def tanh_and_slope(x):
    """(tanh(x), 1 - tanh(x)^2) of fp32 x, each within 2 ulps of the exact value, the
    same formula on every backend and Triton 3.2-3.9.

    Why not a library tanh: tl.math has none in those versions, and libdevice's (CUDA's
    tanhf, AMD's ocml) differs per backend and is reached differently on the interpreter.
    Why not 1 - 2 / (exp(2x) + 1) alone: near 0 it cancels, an absolute error of an ulp
    of 1 on a value of size |x| (c * tanh(x / c) then carries an error of c * 6e-8 where
    torch's fp32 tanh has |x| * 6e-8: 10x worse at a cap of 30 and scores near 3).  So,
    as CUDA's own tanhf does, two formulas:

    * |x| < 0.55: x + x^3 P(x^2), P of degree 4 fitted to tanh on [0, 0.55] (weighted
      least squares; 0.78 ulp at most in fp32 Horner form with a final FMA, measured
      over 2M points);
    * |x| >= 0.55: tanh|x| = 1 - u, u = 2e / (1 + e), e = exp(-2|x|).  tanh >= 0.5
      there, so the subtraction is benign: 1.8 ulps at most (6M points up to |x| = 45),
      with exp exact or as exp2 of a rounded product (what GPUs run).  exp(-2|x|) only
      underflows (to 0: tanh = +-1 exactly, as in fp32 libraries), never overflows, so
      no inf / inf arises; a NaN stays NaN.

    Speed: a score then takes one more special-function (MUFU) operation, the exp, next
    to the softmax's exp2, and the special-function unit is what the forward waits on
    at head dim 128 (an H100 has 1/256 of its matrix throughput there).  So 1 / (1 + e),
    1 + e in [1, 4/3] where it is used, is no division (a second MUFU operation, and
    div.full's range checks) but a cubic fit (relative error 5e-5) and one Newton step
    (3e-9, below fp32's half ulp), five FMAs.  Every other FP32 instruction counts as
    well: with the cap the forward's FP32 pipe, not the matrix units, sets its pace (sm_90
    SASS of the bf16 D 128 forward's key loop: 28 FP32 instructions a score with tl.exp, a
    where on the sign and 1 + e negated apart; 22 with a quadratic fit, two Newton steps
    and the cap multiplied per score; 20 as below, the cap folded into the softmax's own
    scale by softmax_scale; 4 without the cap).  Hence
    exp2 of one FMA, a * -2 log2(e) + 1, which gives 2e directly (tl.exp costs a multiply
    by log2(e) and a subnormal-range fix-up of four instructions; 2e below 2^-126, |x| >
    44, flushes to 0 where tanh is 1 either way); -(1 + e) formed once for the fit and
    the Newton steps; and the odd function's sign put back with one bitwise operation
    (integer pipe) instead of a compare and a second FMA.  Both formulas still run for
    every score: a branch skipping the exp where a whole tile lies below the bound (a
    tile-wide max) made the forward 6-24 % faster on small scores but 14-53 % slower on
    large ones, the inputs a cap is for (reports/h100-sm90/variants/softcap-tile-branch/).

    Why fp16 and bf16 inputs take it too, though it makes their softcap +64..+133 % slower
    than plain (H100, S = 8k and 16k, causal: reports/h100-sm90/variants/benchmark-s11/;
    +103..+200 % before the forms above: softcap-sass/, softcap-cubic/): lse is fp32
    whatever the inputs, and the matched torch path's lse of 16-bit inputs is fp32-accurate,
    so a tanh with an absolute error of an ulp of 1 fails the rule there.  Measured on the
    H100 in one call each (reports/h100-sm90/variants/softcap-tanh/) and refused:
    1 - 2 / (1 + exp(2x)) (+38..+83 %; lse up to 2.37x torch's error over 16 seeds of the
    causal lse cases, mutant softcap_16bit_tanh), the same with rsqrt(d^2) for the division
    (no faster, 3.09x) and NVIDIA's tanh.approx.f32 (+4..+33 %; 3.63x / 5.33x, mutant
    softcap_hardware_tanh).

    The slope is the softcap's derivative for the backward: 1 - t^2 below the bound,
    u * (2 - u) above, which unlike 1 - t^2 keeps its relative accuracy (4e-6) where
    tanh rounds to 1."""
    a = tl.abs(x)
    twice_e = tl.math.exp2(tl.math.fma(a, MINUS_TWO_LOG2_E, 1.0))  # 2 exp(-2|x|)
    minus_denominator = tl.math.fma(twice_e, -0.5, -1.0)  # -(1 + e), exact but for one rounding
    # A cubic fit of 1 / d on [1, 4/3], d = 1 + e, relative error 5e-5, written in -d
    # (-0.55098628 d^3 + 2.57126978 d^2 - 4.48442371 d + 3.46408694), and one Newton step.
    reciprocal = ((0.55098628 * minus_denominator + 2.57126978) * minus_denominator + 4.48442371) \
        * minus_denominator + 3.46408694
    reciprocal = tl.math.fma(reciprocal, tl.math.fma(minus_denominator, reciprocal, 1.0), reciprocal)
    u = twice_e * reciprocal
    square = a * a
    poly = -6.2824637e-3 * square + 2.1077750e-2
    poly = poly * square - 5.3853855e-2
    poly = poly * square + 1.3332602e-1
    poly = poly * square - 3.3333319e-1
    near_zero = tl.math.fma(poly * square, a, a)
    small = a < TANH_POLYNOMIAL_BOUND
    magnitude = tl.where(small, near_zero, 1.0 - u)
    return with_sign_of(magnitude, x), tl.where(small, 1.0 - near_zero * near_zero, u * (2.0 - u))


@triton.jit
def with_sign_of(magnitude, x):
    """magnitude (>= 0, or NaN) carrying x's sign bit: copysign, one bitwise operation."""
    sign = x.to(tl.int32, bitcast=True) & SIGN_BIT
    return (magnitude.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def softmax_scale(sm_scale, softcap, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
    """The scale the softmax applies to `softmax_scores`' scores: sm_scale to raw q . k
    (plain, or biased in raw units), the cap to a capped score's tanh (the cap's multiply
    folded into the softmax's own, as sm_scale is for plain scores: one FP32 instruction
    a score less), 1 to capped and biased scores, which are already scaled."""
    if SOFTCAP and ALIBI:
        scale = 1.0
    elif SOFTCAP:
        scale = softcap
    else:
        scale = sm_scale
    return scale


@triton.jit
def head_slope(SLOPES, stride_batch, batch, head, ALIBI: tl.constexpr):
    """The ALiBi slope of one (batch, head) (fp32; stride_batch 0 for slopes of shape (H,));
    0 without ALIBI, where it is never read."""
    slope = 0.0
    if ALIBI:
        slope = tl.load(SLOPES + batch * stride_batch + head)
    return slope


@triton.jit
def softmax_scores(raw, rows, cols, seq_q, seq_k, sm_scale, softcap, alibi_slope,
                   CAUSAL: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
    """(scores, cap_slope) of a tile of raw fp32 scores q . k, rows and cols its positions
    within the sequences: scores for the softmax at `softmax_scale`, and d scores / d
    (raw * sm_scale) for the backward (the softcap's 1 - tanh^2; with no cap, 1 implied:
    the value returned is then never read, and compiled away).  Plain: raw itself."""
    scores = raw
    cap_slope = raw
    if SOFTCAP:
        # One product with sm_scale / softcap (a loop invariant): the tanh argument takes
        # two roundings, as torch's raw * scale / cap does.
        tanh, cap_slope = tanh_and_slope(raw * (sm_scale / softcap))
        if ALIBI:
            scores = tl.math.fma(tanh, softcap, -alibi_slope * alibi_distance(rows, cols, seq_q, seq_k, CAUSAL))
        else:
            scores = tanh  # softmax_scale is the cap
    elif ALIBI:
        # The bias in raw units, one FMA a score: raw - (slope / sm_scale) * distance,
        # which the softmax scales by sm_scale as it does plain scores.  The scaled form,
        # raw * sm_scale - slope * distance at softmax scale 1, ran the ALiBi forward
        # 4-7 % slower (H200, bf16 / fp16, S = 8k / 16k; reports/h200-sm90/variants/
        # alibi-raw-units/).  slope / sm_scale rounds once per program; the distance is exact.
        scores = tl.math.fma(alibi_distance(rows, cols, seq_q, seq_k, CAUSAL), -(alibi_slope / sm_scale), raw)
    return scores, cap_slope


@triton.jit
def alibi_distance(rows, cols, seq_q, seq_k, CAUSAL: tl.constexpr):
    """|i + Sk - Sq - j| of a tile in fp32, exact (< 2^24).  Causal pairs that are
    visible have j <= i + Sk - Sq, so there the difference is taken without the |.|: the
    others are masked whatever their bias.  An fp32 distance (positions converted once
    per row and column, one FADD per score) was tried and measured slower: ALiBi's D = 64
    forward +48 % over plain against +21 % for this integer one (H100, bf16, S = 8192;
    reports/h100-sm90/variants/alibi-ab/); so was the integer made fp32 by bit tricks
    instead of a conversion (alibi-exact-float/)."""
    distance = rows[:, None] + (seq_k - seq_q) - cols[None, :]
    if not CAUSAL:
        distance = tl.abs(distance)
    return distance.to(tl.float32)


@triton.jit
def probabilities(raw, lse, rows, cols, seq_q, seq_k, sm_scale, window_left, window_right,
                  softcap, alibi_slope, CAUSAL: tl.constexpr, WINDOW: tl.constexpr,
                  SOFTCAP: tl.constexpr, ALIBI: tl.constexpr, MASKED: tl.constexpr):
    """(P, cap_slope): the [M, N] tile of normalised probabilities of the unscaled fp32
    scores `raw` (blocks.raw_scores or head_slices.sliced_products), rebuilt from the
    stored log-normalizer, and `softmax_scores`' cap_slope.

    MASKED=False skips the visibility mask: for tiles wholly inside the keys and the
    causal window or band.  Query rows past seq_q need no mask either way: their lse reads
    -inf."""
    scores, cap_slope = softmax_scores(raw, rows, cols, seq_q, seq_k, sm_scale, softcap, alibi_slope,
                                       CAUSAL, SOFTCAP, ALIBI)
    p = normalised(scores, lse[:, None], softmax_scale(sm_scale, softcap, SOFTCAP, ALIBI))
    if MASKED:
        p = tl.where(visible_pairs(rows, cols, seq_q, seq_k, window_left, window_right, CAUSAL, WINDOW),
                     p, 0.0)
    return p, cap_slope


@triton.jit
def through_softcap(ds, cap_slope, SOFTCAP: tl.constexpr):
    """dS with respect to raw * sm_scale, from dS with respect to the softmax's scores."""
    if SOFTCAP:
        ds = ds * cap_slope
    return ds
