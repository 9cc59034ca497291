"""Triton building blocks shared by every bundled attention kernel.

Each block is one idea: load a masked tile, multiply two tiles with fp32
accumulation, decide which (query, key) pairs are visible, turn scores into
probabilities.  The forward and backward kernels (and their variants) are
written from these, so a fix or a backend quirk is handled in one place.  The
variants' own blocks sit beside them: kernels.bands (the sliding window's mask and
tile bounds), kernels.scores (softcap, ALiBi, and the probabilities the backward
rebuilds), kernels.sequences (where a packed sequence lies), kernels.dropout (the keep
mask).

Conventions: tiles are 2-D, rows first; a "row" offset vector indexes the
sequence axis and a "col" offset vector the head-dim axis.  Scores are kept in
base 2 (`qk_scale = sm_scale * log2(e)`) so the softmax uses `exp2`, which maps
to a single hardware instruction; the log-normalizer is stored in natural log.
"""

import triton
import triton.language as tl

from .targets import interpreting

LOG2_E = tl.constexpr(1.4426950408889634)

# Tensor descriptors arrived in triton 3.4.  A kernel that names tl.make_tensor_descriptor
# does not compile at all on 3.2 / 3.3, even where a constexpr branch never takes it (triton
# resolves every name a kernel uses when it hashes the kernel's dependencies: the matrix
# caught this).  There the name stands for a stub that is never called: targets report no
# descriptor support (kernels.targets), so no launch sets DESCRIPTORS.  Under the
# interpreter the builtin is looked up when called: it patches tl's builtins as it runs.
if not hasattr(tl, "make_tensor_descriptor"):
    @triton.jit
    def make_tensor_descriptor(base, shape, strides, block_shape):
        tl.static_assert(False, "tensor descriptors need triton >= 3.4")
elif interpreting():
    def make_tensor_descriptor(*args, **kwargs):
        return tl.make_tensor_descriptor(*args, **kwargs)
else:
    make_tensor_descriptor = tl.make_tensor_descriptor
# K extent of one fp8 MMA instruction (mma.sync and wgmma alike).
FP8_MMA_K = tl.constexpr(32)


@triton.jit
def head_offset(batch, head, stride_batch, stride_head):
    """Element offset of one (batch, head) slice; int64 so huge tensors do not wrap."""
    return batch.to(tl.int64) * stride_batch + head.to(tl.int64) * stride_head


@triton.jit
def program_coordinates(num_heads, group_size, first_batch_head=0, LAST_BLOCK_FIRST: tl.constexpr = False,
                        TILES=None):
    """Where a (block, batch x head) program works: (block, batch_head, batch, head,
    kv_head).  With GQA/MQA, group_size query heads share one kv head.

    CUDA limits grid axis 1 to 65,535, so a launch covers at most that many
    batch x head slices; `first_batch_head` is where this launch's slices start
    (see kernels.launch).

    LAST_BLOCK_FIRST numbers the blocks of each slice from the last: a GPU starts programs
    in grid order (axis 0 fastest), and a causal query tile's work grows with its index, so
    the heaviest tiles then start first and the grid ends on the lightest (a shorter tail;
    the dense causal forward +0-6 % TFLOP/s on an H100,
    reports/h100-sm90/variants/tuning/block-order/).  Which program takes which tile is all
    it changes: every result is the same.

    TILES (a packed batch's tile list, kernels.packed_tiles) gives each program of axis 0 its
    sequence (the batch) and tile, in the list's order; axis 1 is then the heads alone."""
    if TILES is None:
        block = tl.program_id(0)
        if LAST_BLOCK_FIRST:
            block = tl.num_programs(0) - 1 - block
        batch_head = first_batch_head + tl.program_id(1)
        batch = batch_head // num_heads
        head = batch_head % num_heads
    else:
        work = tl.program_id(0)
        batch = tl.load(TILES + work)
        block = tl.load(TILES + tl.num_programs(0) + work)
        head = first_batch_head + tl.program_id(1)
        batch_head = batch * num_heads + head
    return block, batch_head, batch, head, head // group_size


@triton.jit
def load_head_tile(base, batch, head, stride_batch, stride_head,
                   rows, cols, stride_row, stride_col, n_rows, n_cols):
    """load_tile of one (batch, head) slice of a 4-D tensor."""
    return load_tile(base + head_offset(batch, head, stride_batch, stride_head),
                     rows, cols, stride_row, stride_col, n_rows, n_cols)


@triton.jit
def below(offsets, bound):
    """offsets < bound; a bound of None bounds nothing (all True).

    None is how a launch says "no mask needed" (kernels.launch.head_dim_bound: a head dim
    that fills its tile) and a loop says "every row of this tile exists" (the unmasked
    off-band loops).  It is a compile-time constant, so the comparison is never emitted
    and the all-True mask folds away: triton does not prove `arange(0, 64) < 64` itself,
    and a masked load costs an integer comparison per element and a predicated copy."""
    if bound is None:
        inside = tl.full(offsets.shape, 1, tl.int1)
    else:
        inside = offsets < bound
    return inside


@triton.jit
def load_tile(base, rows, cols, stride_row, stride_col, n_rows, n_cols):
    """Load base[rows, cols] honouring both strides; out-of-range elements read 0
    (a bound of None: see `below`)."""
    ptrs = base + rows[:, None] * stride_row + cols[None, :] * stride_col
    in_range = below(rows, n_rows)[:, None] & below(cols, n_cols)[None, :]
    return tl.load(ptrs, mask=in_range, other=0.0)


@triton.jit
def tile_source(base, n_rows, n_cols, stride_row, BLOCK_ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
                DESCRIPTORS: tl.constexpr):
    """What a loop streams [BLOCK_ROWS, BLOCK_D] tiles of a [n_rows, n_cols] slice from:
    its base pointer, or (DESCRIPTORS) a tensor descriptor, whose loads go through
    Hopper's tensor memory accelerator and read 0 outside the slice, as load_tile's
    masked loads do.  The head-dim stride must be 1 (kernels.launch checks it); n_cols
    None is a head dim of BLOCK_D."""
    if n_cols is None:
        n_cols = BLOCK_D
    if DESCRIPTORS:  # one return, as in load_rows
        source = make_tensor_descriptor(base, shape=[n_rows, n_cols], strides=[stride_row, 1],
                                        block_shape=[BLOCK_ROWS, BLOCK_D])
    else:
        source = base
    return source


@triton.jit
def load_rows(source, first_row, rows, cols, stride_row, stride_col, n_rows, n_cols,
              DESCRIPTORS: tl.constexpr):
    """The tile of rows `rows` (= first_row + arange) of a tile_source; with pointers,
    load_tile's bounds (n_rows, n_cols), with a descriptor the slice's own."""
    # One return: triton compiles the statements after a constexpr `if` that returned.
    if DESCRIPTORS:
        tile = source.load([first_row, 0])
    else:
        tile = load_tile(source, rows, cols, stride_row, stride_col, n_rows, n_cols)
    return tile


@triton.jit
def store_tile(base, tile, rows, cols, stride_row, stride_col, n_rows, n_cols,
               INTERPRETED: tl.constexpr):
    """Store tile to base[rows, cols], rounded to the destination dtype, skipping padding."""
    ptrs = base + rows[:, None] * stride_row + cols[None, :] * stride_col
    in_range = below(rows, n_rows)[:, None] & below(cols, n_cols)[None, :]
    tl.store(ptrs, narrow(tile, base.dtype.element_ty, INTERPRETED), mask=in_range)


@triton.jit
def load_row_stat(base, rows, n_rows, missing):
    """Load a per-query-row fp32 statistic (log-normalizer, delta)."""
    return tl.load(base + rows, mask=below(rows, n_rows), other=missing)


@triton.jit
def narrow(x, dtype: tl.constexpr, INTERPRETED: tl.constexpr):
    """Round fp32 x to `dtype` to nearest, ties to even (what GPUs' cvt.rn does).

    INTERPRETED works around Triton's CPU interpreter, whose fp32 -> bf16 cast
    truncates (rounds toward zero; measured in triton 3.9): the bias of always
    rounding probabilities down adds up over a row and doubles the error of
    dV.  Rounding in integer arithmetic first makes the value exactly
    representable, so the interpreter's cast no longer changes it.
    """
    if INTERPRETED:
        if dtype == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
            x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def mma(a, b, acc, INTERPRETED: tl.constexpr):
    """acc + a @ b, accumulated in fp32.

    INTERPRETED is set on Triton's CPU interpreter only, and works around two of
    its tl.dot faults.  bf16: the result is wrong; casting bf16 to fp32 first is
    numerically faithful, as a product of two bf16 values (8-bit significands) is
    exact in fp32 and the sum is fp32 either way.  fp32: numpy's matmul rounds the
    same dot product differently for different operand shapes, so the backward's
    recomputed scores disagreed with the forward's and the fp32 backward of small
    problems was up to 3.9x less accurate than torch (reports/flake-cpu/findings.md,
    finding D).  Exact products summed in fp64 and rounded once give every tile
    the same rounding; rounding each product first (as an in-order fp32 sum of
    a * b does) doubled the scores' noise next to an MMA's fused multiply-adds and
    cost fp32 gradients at large logits 2.5x torch's error (finding G).  On GPUs
    fp32 operands use "ieee" so a float32 kernel is really float32, not tf32.
    """
    if INTERPRETED:
        if a.dtype == tl.bfloat16:
            a = a.to(tl.float32)
        if b.dtype == tl.bfloat16:
            b = b.to(tl.float32)
    if INTERPRETED and a.dtype == tl.float32:
        # Products exact and summed in fp64, rounded to fp32 once: an MMA's products
        # are exact too (FMA), and one final rounding is the same for every tile shape.
        products = a.to(tl.float64)[:, :, None] * b.to(tl.float64)[None, :, :]
        acc = (acc.to(tl.float64) + tl.sum(products, 1)).to(tl.float32)
    elif a.dtype == tl.float32:
        acc = tl.dot(a, b, acc, input_precision="ieee")
    elif a.dtype.is_fp8():
        # Hopper's fp8 wgmma sums in a reduced-precision (~14-bit) accumulator, and
        # Triton lets the whole K loop stay there on sm_90 (max_num_imprecise_acc
        # defaults to 2^30): on an H100 lse was 80-470x less accurate than torch's.
        # Promoting into the fp32 accumulator after every 32-wide fp8 instruction
        # cut that 2-3x; the rest is each instruction's own sum (known issue
        # sm90-fp8-mma-accumulation).  Other targets ignore the knob.
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=FP8_MMA_K)
    else:
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def visible(rows, cols, seq_q, seq_k, CAUSAL: tl.constexpr):
    """Mask of (query row, key col) pairs that take part in attention.

    Causal masking is bottom-right aligned, as in FlashAttention-2 >= 2.1: key j is
    visible to query i iff j <= i + (seq_k - seq_q).  With seq_q > seq_k the first
    rows then see no key at all; they produce output 0 and log-normalizer -inf.
    """
    mask = (rows[:, None] < seq_q) & (cols[None, :] < seq_k)
    if CAUSAL:
        mask = mask & (cols[None, :] <= rows[:, None] + (seq_k - seq_q))
    return mask


@triton.jit
def causal_key_end(row_end, seq_q, seq_k, CAUSAL: tl.constexpr):
    """One past the last key any query row < row_end can see."""
    if CAUSAL:
        return tl.minimum(seq_k, tl.maximum(row_end + seq_k - seq_q, 0))
    return seq_k


@triton.jit
def off_band_end(row_start, seq_q, seq_k, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """End of the key tiles [0, end) that every row >= row_start sees whole: inside the
    keys and, if causal, at or left of the first row's diagonal.  A multiple of BLOCK_N."""
    end = seq_k
    if CAUSAL:
        end = tl.minimum(seq_k, tl.maximum(row_start + seq_k - seq_q + 1, 0))
    return (end // BLOCK_N) * BLOCK_N


@triton.jit
def causal_query_start(col_start, seq_q, seq_k, BLOCK_M: tl.constexpr, CAUSAL: tl.constexpr):
    """First query-block start whose rows can see key col_start (0 if not causal)."""
    if CAUSAL:
        first_row = tl.maximum(col_start - (seq_k - seq_q), 0)
        return (first_row // BLOCK_M) * BLOCK_M
    return 0


@triton.jit
def first_unmasked_row(col_start, seq_q, seq_k, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       CAUSAL: tl.constexpr):
    """The dK/dV mirror of off_band_end: the first query-block start (a multiple of
    BLOCK_M) from which every row sees the whole key tile [col_start, col_start + BLOCK_N):
    0 if not causal, past the tile's diagonal if causal, and seq_q (no unmasked rows) for
    the ragged last key tile, whose padding keys only a mask keeps out."""
    if CAUSAL:
        first_row = tl.maximum(col_start + BLOCK_N - 1 - (seq_k - seq_q), 0)
        start = tl.cdiv(first_row, BLOCK_M) * BLOCK_M
    else:
        start = col_start * 0
    return tl.where(col_start + BLOCK_N <= seq_k, start, seq_q)


@triton.jit
def compensated_add(total, error, addend):
    """Kahan summation step: (total, error) + addend -> (new total, new error).

    `error` carries the low-order bits lost by earlier additions, so a long
    sequence of fp32 additions ends about as accurate as a single one."""
    corrected = addend - error
    new_total = total + corrected
    return new_total, (new_total - total) - corrected


@triton.jit
def pairwise_column_sums(x):
    """Sum a [M, N] fp32 tile over its rows (M a power of two) as a pairwise tree.

    tl.sum over axis 0 is a tree on GPUs but a sequential loop over the rows under the
    interpreter (numpy), whose error grows with M: 64-row column sums of P made the
    total attention 2-4x less accurate than torch's (pairwise) sum.  log2(M) halvings
    give the tree on every backend."""
    for _ in tl.static_range(8):  # enough halvings for M <= 512
        if x.shape[0] > 1:
            x = tl.sum(tl.reshape(x, (2, x.shape[0] // 2, x.shape[1])), 0)
    return tl.reshape(x, (x.shape[1],))


@triton.jit
def online_softmax_weights(s, row_max, row_sum, row_sum_error, qk_scale):
    """One key tile of the online softmax, for masked (-inf) unscaled fp32 scores s:
    returns (weights, rescale, new_max, row_sum, row_sum_error).

    weights = exp(scale * (s - new_max)) are un-normalised, in [0, 1]; the caller
    multiplies its accumulator by `rescale` before adding weights @ V.  The running
    max is kept on *unscaled* scores and the scale applied to (s - max): that
    difference is exact or nearly so for the entries that dominate the row, whereas
    scaling first rounds every score relative to its full magnitude (this keeps lse
    as accurate as torch's logsumexp).  The row sum takes one addition per key
    tile: 512 sequential fp32 additions at Sk = 32k, whose rounding (measured on an
    H100: lse error 2.6x torch's) Kahan compensation removes."""
    new_max = tl.maximum(row_max, tl.max(s, 1))
    # A row that has seen only masked keys so far has max -inf; exponentiate
    # against 0 instead so exp2(-inf - -inf) never produces NaN.
    safe_max = tl.where(new_max == float("-inf"), 0.0, new_max)
    weights = tl.math.exp2((s - safe_max[:, None]) * qk_scale)
    rescale = tl.math.exp2((row_max - safe_max) * qk_scale)
    row_sum, row_sum_error = compensated_add(row_sum * rescale, row_sum_error * rescale,
                                             tl.sum(weights, 1))
    return weights, rescale, new_max, row_sum, row_sum_error


@triton.jit
def finished_rows(acc, row_max, row_sum, sm_scale):
    """Normalised output tile and natural-log normalizer from the online-softmax state.

    Rows without a visible key (row sum exactly 0) give output 0 and lse -inf.  The
    test is `!= 0`, not `> 0`: a NaN row sum (a NaN or Inf input in that row) must
    stay NaN in out and lse, not pass for an empty row whose -inf lse would make the
    backward drop the row's gradients silently."""
    has_keys = row_sum != 0.0
    safe_sum = tl.where(has_keys, row_sum, 1.0)
    out = acc / safe_sum[:, None]
    lse = tl.where(has_keys, row_max * sm_scale + tl.math.log(safe_sum), float("-inf"))
    return out, lse


@triton.jit
def times_transposed(a, b, INTERPRETED: tl.constexpr):
    """a @ b^T of a [M, D] and an [N, D] tile, fp32: scores (q, k) and dP (dO, V)."""
    zero = tl.zeros((a.shape[0], b.shape[0]), dtype=tl.float32)
    return mma(a, tl.trans(b), zero, INTERPRETED)


@triton.jit
def raw_scores(q, k, INTERPRETED: tl.constexpr):
    """Unscaled scores q @ k^T of a [M, D] and an [N, D] tile, fp32."""
    return times_transposed(q, k, INTERPRETED)


@triton.jit
def normalised(raw, lse, sm_scale):
    """Attention probabilities exp(raw * sm_scale - lse) of unscaled fp32 scores, rebuilt
    from the stored natural-log normalizer `lse`, broadcast to raw's shape (-inf for rows
    that see no key, which yields 0).

    The exponent s * sm_scale - lse is one fused multiply-add, rounded once, and only
    that small difference is scaled by log2(e).  Scaling first (s * sm_scale * log2(e) -
    lse * log2(e)) rounds both terms at their full magnitude, which cost the fp32
    total attention 2-3x torch's error (measured on the interpreter, Sq = 70..300); and
    rounding s * sm_scale on its own (a scale that is not a power of two) makes P
    disagree with the forward's weights, exp2((s - max) * scale * log2(e)), by an
    ulp of |s * sm_scale|: at softmax inputs near -1000 (`negative:1000`) the fp16 total
    attention was 2.4x torch's error on an H100."""
    finite_lse = tl.where(lse == float("-inf"), float("inf"), lse)
    return tl.math.exp2(tl.math.fma(raw, sm_scale, -finite_lse) * LOG2_E)


@triton.jit
def value_gradient(do, v, INTERPRETED: tl.constexpr):
    """dP = dO @ V^T of a tile, fp32: the gradient of the weights that multiplied V."""
    return times_transposed(do, v, INTERPRETED)


@triton.jit
def softmax_gradient(p, dp, delta):
    """dS = P * (dP - delta), fp32: the softmax backward of one tile, for delta (one value
    per query row) broadcast to the tile's shape."""
    return p * (dp - delta)
