"""The attention-variants benchmark: its grid, the arithmetic of visible pairs and FLOPs,
and the implementations it times.

Cells are the flash benchmark's problems (grid.Problem.sized: batch = 32k tokens / S,
heads = 2048 / D), all causal.  In each cell, forward and backward, these are timed
together (run.measure_calls):

* `bundled causal`: the dense causal kernel, the baseline of every comparison;
* `bundled window L` (L in WINDOWS) and `flex window L`: a sliding window (L, 0) with
  causal; Flex gets the equivalent mask_mod (bottom-right aligned: key j visible to
  query i iff j <= i + Sk - Sq and i + Sk - Sq - j <= L) as a block mask;
* `bundled varlen`: `flash_attention_varlen` on a packed batch of mixed lengths
  (`varlen_lengths`) holding the cell's B·S tokens, causal per sequence;
* `bundled softcap 30` / `flex softcap 30` (Gemma 2's cap: s = c·tanh(s/c) on the scaled
  score) and `bundled alibi` / `flex alibi` (slopes 2^(-8(h+1)/H), bias
  -slope·|i + Sk - Sq - j|): Flex with the equivalent score_mod and the causal block mask;
* `bundled softcap_large 30` / `flex softcap_large 30`: the same functions on the same
  tensors but q times LARGE_LOGITS, so the scaled scores have a standard deviation of 8
  instead of 1.  A cap is for large logits: with scores of std 1 every |s| stays below
  0.55·c, where a tanh keeps to its polynomial, so an implementation whose cost depends
  on the values (a branch on them, a library tanh's ranges) is timed at its best there
  (reports/h100-sm90/variants/softcap-tile-branch/: 14-53 % apart).

FLOPs count the visible (query, key) pairs only: 4·D·H per pair forward (Q·Kᵀ and P·V, 2
FLOPs per multiply-add, grid.attention_flops), the backward 2.5x.  The dense causal cell
counts S(S+1)/2 pairs per sequence (the diagonal included), where the flash benchmark
counts S²/2: the two differ by 1/S.  A window counts its band, varlen the causal pairs of
each sequence.  Every implementation of a cell is therefore credited with the work it has
to do, not with the work of the dense matrix.
"""

from __future__ import annotations

import functools
import importlib
import itertools
import random
from dataclasses import asdict, dataclass

from conformance.bundled.benchmarks import grid, implementations
from conformance.cases.variants import standard_alibi_slopes, visible_keys
from conformance.peers import flex as flex_peer
from conformance.peers import masks

WINDOWS = (1024, 4096)
KERNELS_PACKAGE = "conformance.bundled.kernels"
SOFTCAP = 30.0
# q's factor in the softcap_large entries: scaled scores of std 8 (|s| > 0.55 x 30 in 4 % of pairs).
LARGE_LOGITS = 8.0
BASELINE = "causal"
VARIANTS = ("window", "varlen", "softcap", "softcap_large", "alibi")  # what --variants chooses from
FLEX_VARIANTS = ("window", "softcap", "softcap_large", "alibi")  # those with a FlexAttention peer
# Variants that call another variant's function on other inputs: variant -> (that variant,
# the factor on the cell's q).  Entry.function_variant and Entry.q_factor read it.
ON_OTHER_INPUTS = {"softcap_large": ("softcap", LARGE_LOGITS)}
BUNDLED, FLEX = implementations.BUNDLED, implementations.FLEX


def function_and_factor(variant: str) -> tuple[str, float]:
    """(the variant whose function `variant` calls, the factor on the cell's q): ON_OTHER_INPUTS'
    entry, or (variant, 1.0) for a variant that calls its own function on the cell's tensors."""
    return ON_OTHER_INPUTS.get(variant, (variant, 1.0))


def function_variant(variant: str) -> str:
    """The variant whose function `variant` calls (softcap_large: softcap)."""
    return function_and_factor(variant)[0]

# The default grid is the issue's grid in bf16 only (see ESTIMATE and --help): the issue's
# fp16 half doubles the compilations and does not fit the ~4 minutes of one GPU run.
FULL = dict(seq_lens=(8192, 16384), head_dims=(64, 128), dtypes=("bf16",))
ISSUE = dict(FULL, dtypes=("fp16", "bf16"))
QUICK = dict(seq_lens=(8192,), head_dims=(128,), dtypes=("bf16",))


@dataclass(frozen=True)
class Entry:
    """One timed implementation of a cell: kernel "bundled" or "flex", variant "causal",
    "window" (param: left), "varlen", "softcap" (param: the cap) or "alibi"."""

    kernel: str
    variant: str
    param: float | int | None = None

    @property
    def function_variant(self) -> str:
        """The variant whose function this entry calls (softcap_large: softcap's)."""
        return function_variant(self.variant)

    @property
    def q_factor(self) -> float:
        """What the cell's q is multiplied by for this entry (LARGE_LOGITS for softcap_large)."""
        return function_and_factor(self.variant)[1]

    @property
    def name(self) -> str:
        """The implementation's name in the results ("bundled window 1024", "flex softcap 30")."""
        return " ".join([self.kernel, self.variant, *([] if self.param is None else [f"{self.param:g}"])])


# ----------------------------------------------------------------------------- visible pairs

@functools.lru_cache(maxsize=None)
def visible_pairs(seq_q: int, seq_k: int, causal: bool = False, window: tuple[int, int] | None = None) -> int:
    """(i, j) pairs one sequence's queries see, per head: FlashAttention-2's bottom-right
    aligned window (left, right) -- query i sees key j iff i + Sk - Sq - left <= j <=
    i + Sk - Sq + right, -1 unbounded -- with causal meaning right = 0: the catalog's rule
    (conformance.cases.variants.visible_keys), row by row."""
    spans = (visible_keys(row, seq_q, seq_k, causal, window) for row in range(seq_q))
    return sum(max(0, last - first + 1) for first, last in spans)


def band_fraction(seq_len: int, left: int) -> float:
    """Pairs a causal window (left, 0) lets through, over those plain causal does (Sq = Sk)."""
    return visible_pairs(seq_len, seq_len, True, (left, 0)) / visible_pairs(seq_len, seq_len, True)


def pair_flops(pairs: int, heads: int, head_dim: int, direction: str) -> float:
    """Matmul FLOPs of `pairs` visible pairs in each of `heads` heads: grid.attention_flops of a
    one-key 'matrix' of `pairs` rows (4·D per pair forward, the backward 2.5x)."""
    return grid.attention_flops(1, heads, pairs, 1, head_dim, False, direction)


def varlen_lengths(seq_len: int, tokens: int = grid.TOKENS, seed: int = 0) -> list[int]:
    """Mixed sequence lengths holding exactly `tokens` tokens, none longer than seq_len: n =
    4·tokens/S sequences of length S·u³ at u = (k + 1/2)/n (E[u³] = 1/4: mean S/4, most
    sequences short, the longest ~0.8·S), scaled to the total, the rounding put on the
    longest, in an order shuffled by random.Random(seed).  Deterministic."""
    count = max(1, round(4 * tokens / seq_len))
    raw = [seq_len * ((index + 0.5) / count) ** 3 for index in range(count)]
    lengths = [max(1, round(value * tokens / sum(raw))) for value in raw]
    lengths[-1] += tokens - sum(lengths)
    if not 1 <= lengths[-1] <= seq_len:
        raise ValueError(f"varlen_lengths: {tokens} tokens cannot be cut into sequences of at most {seq_len}")
    random.Random(seed).shuffle(lengths)
    return lengths


def varlen_offsets(lengths: list[int], device):
    """cu_seqlens of a packed batch of `lengths`: (0, l0, l0 + l1, ..., total) int32 on `device`."""
    import torch

    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def alibi_slopes(heads: int) -> list[float]:
    """The standard ALiBi slopes 2^(-8(h+1)/H), h = 0 ... H-1: the catalog's own."""
    return standard_alibi_slopes(heads)


def entry_pairs(entry: Entry, problem: grid.Problem, lengths: list[int] | None = None) -> int:
    """Visible pairs per head of one entry on its cell, summed over the batch (or the packed sequences)."""
    if entry.variant == "varlen":
        return sum(visible_pairs(length, length, True) for length in lengths)
    window = (int(entry.param), 0) if entry.variant == "window" else None
    return problem.batch * visible_pairs(problem.seq_len, problem.seq_len, True, window)


def result_line(entry: Entry, problem: grid.Problem, direction: str, lengths: list[int] | None = None) -> dict:
    """The results line of one entry before it is measured: the flash benchmark's line
    (run.result_line) plus the variant, its visible pairs, the cell's causal pairs (the
    band fraction's denominator) and FLOPs over the visible pairs; varlen lines carry the
    lengths and count the sequences as their batch."""
    from conformance.bundled.benchmarks import run

    pairs = entry_pairs(entry, problem, lengths)
    causal_pairs = problem.batch * visible_pairs(problem.seq_len, problem.seq_len, True)
    line = {**run.result_line(entry.name, problem, direction), "kernel": entry.kernel, "variant": entry.variant,
            "param": entry.param, "tokens": problem.batch * problem.seq_len, "pairs": pairs,
            "causal_pairs": causal_pairs, "flops": pair_flops(pairs, problem.heads, problem.head_dim, direction)}
    if entry.variant == "window":
        line["band_fraction"] = pairs / causal_pairs
    if entry.variant == "varlen":
        line.update(batch=len(lengths), lengths=list(lengths))
    return line


# ----------------------------------------------------------------------------- the plan

# Seconds, for the estimates --help states (an H100, caches cold).  Measured where a source
# is named; the bundled compile cost is a guess.
ESTIMATE = dict(
    startup_s=15.0,  # imports, CUDA context, fingerprint
    bundled_compile_s=4.0,  # per bundled kernel kind x (dtype, D): forward, delta, dK/dV and dQ kernels (a guess)
    flex_first_s=15.0,  # per Flex variant, first cell: no_grad forward and forward+backward graphs (~10 s each, the
    #                     issue's figure, less what reports/h100-sm90/benchmark/run.log shows a new mask costing)
    flex_reshape_s=6.0,  # per Flex variant and further cell (run.log: a new static shape, ~2 s fwd + ~4 s bwd)
    timed_s=0.4,  # per entry x direction x cell, full repetitions (run.log: four timed in ~1.5 s)
    timed_quick_s=0.1,  # the same with the quick repetitions
)


@dataclass(frozen=True)
class Plan:
    """What one run measures: cells (dtype x D x S, all causal), the variants, the windows,
    the S at which FlexAttention runs, and the shape rule's tokens and model width."""

    seq_lens: tuple[int, ...]
    head_dims: tuple[int, ...]
    dtypes: tuple[str, ...]
    variants: tuple[str, ...] = VARIANTS
    windows: tuple[int, ...] = WINDOWS
    flex_seq_lens: tuple[int, ...] | None = None  # None: every S of the grid
    tokens: int = grid.TOKENS
    width: int = grid.MODEL_WIDTH
    mutant: str | None = None  # time a mutant's kernels (mutants.definitions) as "bundled"

    @property
    def kernels_package(self) -> str:
        """The package the bundled entries call: the kernels, or the mutant's copy of them."""
        if self.mutant is None:
            return KERNELS_PACKAGE
        from conformance.bundled.mutants.definitions import BY_NAME
        from conformance.bundled.mutants.transform import load
        return load(BY_NAME[self.mutant]).__name__

    def cells(self) -> list[grid.Problem]:
        """The cells, dtype by head dim, S ascending (grid.problems' order), each causal."""
        return [grid.Problem(dtype, head_dim, True, seq_len, max(1, self.tokens // seq_len), self.width // head_dim)
                for dtype, head_dim, seq_len in itertools.product(self.dtypes, self.head_dims, sorted(self.seq_lens))]

    def flex_at(self, seq_len: int) -> bool:
        return self.flex_seq_lens is None or seq_len in self.flex_seq_lens

    def entries(self, problem: grid.Problem) -> list[Entry]:
        """The cell's entries, baseline first, each bundled variant followed by its Flex peer."""
        flex = self.flex_at(problem.seq_len)
        out = [Entry(BUNDLED, BASELINE)]
        for variant in VARIANTS:
            if variant not in self.variants:
                continue
            function = function_variant(variant)
            params = self.windows if function == "window" else [SOFTCAP] if function == "softcap" else [None]
            for param in params:
                out.append(Entry(BUNDLED, variant, param))
                if flex and variant in FLEX_VARIANTS:
                    out.append(Entry(FLEX, variant, param))
        return out

    def estimate_s(self, quick: bool = False) -> float:
        """Seconds one run of this plan takes on an H100 with cold caches, by ESTIMATE's figures."""
        cells = self.cells()
        # The window kernels are one kind, whatever the windows; softcap_large compiles nothing new.
        kinds = 1 + len({function_variant(variant) for variant in self.variants})
        flex_entries = [{(entry.function_variant, entry.param) for entry in self.entries(cell) if entry.kernel == FLEX}
                        for cell in cells]  # Flex compiles once per function (a window per left)
        first = max((len(entries) for entries in flex_entries), default=0)
        timed = 2 * sum(len(self.entries(cell)) for cell in cells)
        return (ESTIMATE["startup_s"] + ESTIMATE["bundled_compile_s"] * kinds * len(self.dtypes) * len(self.head_dims)
                + ESTIMATE["flex_first_s"] * first + ESTIMATE["flex_reshape_s"] * (sum(map(len, flex_entries)) - first)
                + ESTIMATE["timed_quick_s" if quick else "timed_s"] * timed)

    def fields(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- implementations

def window_mask_mod(seq_q: int, seq_k: int, left: int):
    """FlexAttention's mask_mod of a causal sliding window (left, 0), bottom-right aligned: the
    FlexAttention peer's own (conformance.peers.flex), so the benchmark times what the harness judges."""
    return flex_peer.dense_mask_mod(seq_q, seq_k, True, (left, 0))


def softcap_score_mod(cap: float):
    """FlexAttention's score_mod of a soft cap on the scaled score, c·tanh(s/c): the peer's."""
    return flex_peer.dense_score_mod(0, 0, cap, None)


def alibi_score_mod(slopes, seq_q: int, seq_k: int):
    """FlexAttention's score_mod of ALiBi with per-head slopes (H,), s - slope_h·|i + Sk - Sq - j|,
    on the peers' ALiBi bias (conformance.peers.masks)."""
    offset = seq_k - seq_q

    def alibi(score, batch, head, q_idx, kv_idx):
        return score + masks.alibi_bias(slopes[head], q_idx + offset, kv_idx)
    return alibi


def bundled_function(entry: Entry, slopes=None, cu_seqlens=None, max_seqlen: int | None = None,
                     package: str = None):
    """`fn(q, k, v, causal)` of a bundled entry; varlen takes packed (tokens, H, D) tensors.
    `package`: where the kernels come from (Plan.kernels_package; default the bundled ones)."""
    kernels = importlib.import_module(package or KERNELS_PACKAGE)

    if entry.variant == "varlen":
        def varlen(q, k, v, causal):
            return kernels.flash_attention_varlen(q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
                                                  causal=causal)
        return varlen
    options = {"causal": {}, "window": {"window_size": (int(entry.param or 0), 0)},
               "softcap": {"softcap": float(entry.param or 0)},
               "alibi": {"alibi_slopes": slopes}}[entry.function_variant]

    def dense(q, k, v, causal):
        return kernels.flash_attention(q, k, v, causal=causal, **options)
    return dense


def flex_function(entry: Entry, seq_len: int, device, slopes=None, attention=None):
    """`fn(q, k, v, causal)` of a Flex entry on a cell of sequence length seq_len: the
    compiled flex_attention (implementations.compiled_flex; `attention` replaces it, e.g.
    the eager one in tests) with its block mask, made here once, and its score_mod.  The
    mask is always causal (the cell's); `causal` is ignored."""
    from torch.nn.attention.flex_attention import create_block_mask

    attention = attention or implementations.compiled_flex()
    if entry.variant == "window":
        mask_mod, score_mod = window_mask_mod(seq_len, seq_len, int(entry.param)), None
    else:
        mask_mod = flex_peer.bottom_right_causal(seq_len, seq_len)
        score_mod = (softcap_score_mod(float(entry.param)) if entry.function_variant == "softcap"
                     else alibi_score_mod(slopes, seq_len, seq_len))
    block_mask = create_block_mask(mask_mod, None, None, seq_len, seq_len, device=device)

    def run(q, k, v, causal):
        return attention(q, k, v, score_mod=score_mod, block_mask=block_mask)
    return run
