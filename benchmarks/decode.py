"""KV-cache decoding speed: the bytes of K and V a kernel reads per second, beside the
device's own copy bandwidth measured in the same run.

Decoding is memory-bound: each new token reads its sequence's whole cache once, so the
limit is HBM bandwidth, not matrix throughput. A cell is one problem (`Cell`): B sequences,
each with Sq new tokens against a full cache of `context` keys, H = 32 query heads over
Hkv = 8, D = 128, in pages of `page_size` keys addressed through a shuffled block table.
Every implementation gets the same cache contents in its own layout:

    bundled        kernels.kv_cache_attention on the paged cache (its num_splits heuristic),
                   as called by default: the values of cache_seqlens and the block table
                   checked first (one read back to the host per call)
    bundled_unchecked  the same with check_values=False (no read back: what a serving loop
                   that builds its own tables calls)
    bundled_contiguous  the same unchecked call on a contiguous (B, context, Hkv, D) cache, no
                   block table: the case the dense peers below are judged on
    flag_paged     FlagAttention's paged_attention (head-major pages, one token per sequence)
    flag_split_kv  FlagAttention's flash_attention_split_kv on the dense (B, Hkv, S, D) cache
    flex           torch's FlexAttention, compiled, on the dense cache (a causal block mask
                   built once per cell, outside the timed calls)

Two timings (`TIMINGS`, one per run): "eager" times each Python call between CUDA events, host
work included where the GPU outruns it (small cells); "graph" captures the calls in a CUDA graph
and times its replay, as a serving loop runs its decode steps: the kernels' own time. A cell
whose cache is under ROTATION_BYTES is measured over several copies of it, each call reading
the next: calls that read one small cache again and again read it from L2 (50 MB on an H100),
while a serving loop's consecutive calls read different layers' caches from HBM.

Bandwidth = cache bytes (2 · B · context · Hkv · D · element size) / median time. The copy
bandwidth is a device-to-device copy of COPY_BYTES, counting bytes read and written (a copy
moves each byte across HBM twice, a decode kernel once), timed before and after the grid.
Cells whose cache (and its dense copy for the dense peers) would not fit are skipped with
the reason. FlagAttention is imported as `flag_attn` (a clone on PYTHONPATH, e.g. `--flag-attention DIR/src`).
"""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from dataclasses import asdict, dataclass

import torch

from conformance.bundled.benchmarks import timing

# The kernel under test: as called by default, unchecked, and unchecked on a contiguous cache.
BUNDLED = ("bundled", "bundled_unchecked", "bundled_contiguous")
PEERS = ("flag_paged", "flag_split_kv", "flex")
IMPLEMENTATIONS = BUNDLED + PEERS
# Decode calls take microseconds to milliseconds: fewer, shorter rounds than the training
# benchmarks' keep the 160-cell grid within a device session (medians still of >= 10 calls).
POLICY = timing.RepetitionPolicy(target_ms=100.0, warmup_ms=50.0, rounds=2)
# Peers that read a dense (B, Hkv, S, D) copy of the cache: the page size means nothing to them,
# so they are measured at the grid's first page size only and compared with every page size.
DENSE_PEERS = ("flag_split_kv", "flex")
# Implementations that read a contiguous cache, each its own layout, made from the paged one:
# measured where the dense peers are, compared with every page size's paged call.
CONTIGUOUS = ("bundled_contiguous", *DENSE_PEERS)
# The peers each bundled variant is held to (issue 34: >= 1.0x each on the same cases): the
# paged calls against every peer (a paged cache against a dense one is the harder side), the
# contiguous call against the dense peers, which read contiguous caches too.
COMPARED = {"bundled": PEERS, "bundled_unchecked": PEERS, "bundled_contiguous": DENSE_PEERS}
FULL = dict(dtypes=("fp16", "bf16"), page_sizes=(16, 64), seq_qs=(1, 4), batches=(1, 8, 32, 128),
            contexts=(1024, 4096, 16384, 32768, 131072))
QUICK = dict(dtypes=("bf16",), page_sizes=(16,), seq_qs=(1,), batches=(8,), contexts=(4096, 32768))
COPY_BYTES = 2 << 30
# The goals of issue 34: >= 80 % of the copy bandwidth once a cell reads more than 256 MB.
LARGE_READ_BYTES = 256 << 20
COPY_SHARE_GOAL = 0.8
_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TIMINGS = ("eager", "graph")
ROTATION_BYTES = 256 << 20  # >= 5x an H100's L2: copies of a small cache read in turn come from HBM
MAX_COPIES = 64


@dataclass(frozen=True)
class Cell:
    dtype: str
    page_size: int
    seq_q: int
    batch: int
    context: int
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128

    @property
    def cache_bytes(self) -> int:
        """K and V of every sequence's context: what one call must read."""
        return 2 * self.batch * self.context * self.kv_heads * self.head_dim * _DTYPES[self.dtype].itemsize

    @property
    def label(self) -> str:
        return f"{self.dtype} page{self.page_size} Sq{self.seq_q} B{self.batch} ctx{self.context}"


def copies_for(cell: Cell) -> int:
    """How many copies of the cell's cache its calls read in turn (see ROTATION_BYTES)."""
    return max(1, min(MAX_COPIES, math.ceil(ROTATION_BYTES / cell.cache_bytes)))


def cells(dtypes, page_sizes, seq_qs, batches, contexts) -> list[Cell]:
    return [Cell(*values) for values in itertools.product(dtypes, page_sizes, seq_qs, batches, contexts)]


def measured_on(cell: Cell, names, first_page_size: int) -> list[str]:
    """The implementations measured on `cell`: those that read a contiguous copy (CONTIGUOUS) at
    the first page size only."""
    return [name for name in names if name not in CONTIGUOUS or cell.page_size == first_page_size]


def comparison_key(line: dict) -> tuple:
    """What makes two results lines the same problem: a contiguous copy's line (CONTIGUOUS) stands
    for every page size."""
    key = (line["dtype"], line["seq_q"], line["batch"], line["context"])
    return key if line["impl"] in CONTIGUOUS else (*key, line["page_size"])


RESERVE_BYTES = 1 << 30  # kept free for outputs, scratch and workspaces
# The dense copy gathers K, then V, through the table: 1.5 caches at its peak, 1.6 with a margin
# (found on the H100: 1.1 ran a 16 GiB cell out of memory).
DENSE_COPY_PEAK = 1.6


def skip_reason(cell: Cell, name: str, free_bytes: int, has_copy: bool = False, timing_mode: str = "eager") -> str | None:
    """Why `name` is not measured on `cell`, or None, with `free_bytes` free right before its
    inputs are built: "cache" is the paged cache itself (all its rotating copies), which every
    implementation reads; each peer needs a copy of it in its own layout (head-major pages, or
    the dense copy the dense peers share, or the contiguous one: `has_copy` once made)."""
    if name == "flag_paged" and cell.seq_q != 1:
        return "paged_attention takes one token per sequence"
    if name == "bundled" and timing_mode == "graph":
        return ("its value checks read cache_seqlens and the block table back to the host, which CUDA graph "
                "capture refuses: bundled_unchecked is the call a graph holds")
    copies = 0 if name in ("bundled", "bundled_unchecked") or has_copy else 1
    growth = DENSE_COPY_PEAK if name in CONTIGUOUS else 1.1
    needed = cell.cache_bytes * copies_for(cell) * copies * growth + RESERVE_BYTES
    if needed > free_bytes:
        what = "the paged cache" if name == "cache" else "a copy of the cache" if copies else "outputs"
        return f"{what} needs {needed / 2**30:.1f} GiB of {free_bytes / 2**30:.1f} GiB free"
    return None


@dataclass
class Problem:
    """One cell's tensors: q (B, Sq, H, D), the paged cache and its shuffled block table."""

    q: torch.Tensor
    k_pages: torch.Tensor
    v_pages: torch.Tensor
    block_table: torch.Tensor
    cache_seqlens: torch.Tensor

    dense_copy: tuple | None = None
    contiguous_copy: tuple | None = None

    def dense(self, context: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, Hkv, context, D) keys and values gathered from the pages (the dense peers' layout),
        made once per cell and shared by the dense peers."""
        if self.dense_copy is None:
            gathered = self.contiguous_copy or self._gathered(context)
            self.dense_copy = tuple(pages.transpose(1, 2).contiguous() for pages in gathered)
        return self.dense_copy

    def contiguous(self, context: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, context, Hkv, D) keys and values gathered from the pages: kv_cache_attention's
        contiguous cache (FlashAttention-2's layout)."""
        if self.contiguous_copy is None:
            self.contiguous_copy = self._gathered(context)
        return self.contiguous_copy

    def _gathered(self, context: int) -> tuple[torch.Tensor, torch.Tensor]:
        return tuple(pages[self.block_table.long()].flatten(1, 2)[:, :context].contiguous()
                     for pages in (self.k_pages, self.v_pages))

    def has_copy(self, name: str) -> bool:
        """Whether the copy of the cache `name` reads is made already (skip_reason's has_copy)."""
        made = {"bundled_contiguous": self.contiguous_copy, "flag_split_kv": self.dense_copy, "flex": self.dense_copy}
        return made.get(name) is not None


def problem(cell: Cell, device="cuda", seed: int = 0) -> Problem:
    generator = torch.Generator(device=device).manual_seed(seed)
    dtype = _DTYPES[cell.dtype]
    pages_per_sequence = math.ceil(cell.context / cell.page_size)
    num_pages = cell.batch * pages_per_sequence
    shape = (num_pages, cell.page_size, cell.kv_heads, cell.head_dim)
    k_pages, v_pages = (torch.randn(shape, generator=generator, device=device, dtype=dtype) for _ in range(2))
    order = torch.randperm(num_pages, generator=generator, device=device).to(torch.int32)
    q = torch.randn((cell.batch, cell.seq_q, cell.heads, cell.head_dim), generator=generator, device=device,
                    dtype=dtype)
    lengths = torch.full((cell.batch,), cell.context, dtype=torch.int32, device=device)
    return Problem(q, k_pages, v_pages, order.view(cell.batch, pages_per_sequence), lengths)


def _bundled(cell: Cell, tensors: Problem, check_values: bool = True, num_splits: int = 0):
    from conformance.bundled.kernels import kv_cache_attention

    return lambda: kv_cache_attention(tensors.q, tensors.k_pages, tensors.v_pages, tensors.cache_seqlens,
                                      block_table=tensors.block_table, causal=True, num_splits=num_splits,
                                      check_values=check_values)


def _bundled_unchecked(cell: Cell, tensors: Problem):
    return _bundled(cell, tensors, check_values=False)


def _bundled_contiguous(cell: Cell, tensors: Problem):
    from conformance.bundled.kernels import kv_cache_attention

    keys, values = tensors.contiguous(cell.context)
    return lambda: kv_cache_attention(tensors.q, keys, values, tensors.cache_seqlens, causal=True, check_values=False)


def _flag_paged(cell: Cell, tensors: Problem):
    import flag_attn

    keys, values = (pages.transpose(1, 2).contiguous() for pages in (tensors.k_pages, tensors.v_pages))
    query = tensors.q[:, 0].contiguous()
    scale = cell.head_dim ** -0.5
    return lambda: flag_attn.paged_attention(query, keys, values, tensors.cache_seqlens, tensors.block_table, scale,
                                             cell.context)


def _flag_split_kv(cell: Cell, tensors: Problem):
    import flag_attn

    keys, values = tensors.dense(cell.context)
    query = tensors.q.transpose(1, 2).contiguous()
    return lambda: flag_attn.flash_attention_split_kv(query, keys, values, causal=True)


def _flex(cell: Cell, tensors: Problem):
    from torch.nn.attention.flex_attention import create_block_mask

    from conformance.bundled.benchmarks.implementations import compiled_flex
    from conformance.peers.flex import bottom_right_causal

    keys, values = tensors.dense(cell.context)
    query = tensors.q.transpose(1, 2).contiguous()
    mask = create_block_mask(bottom_right_causal(cell.seq_q, cell.context), None, None, cell.seq_q, cell.context,
                             device=query.device)
    compiled = compiled_flex()
    return lambda: compiled(query, keys, values, block_mask=mask, enable_gqa=True)


_BUILDERS = {"bundled": _bundled, "bundled_unchecked": _bundled_unchecked, "bundled_contiguous": _bundled_contiguous,
             "flag_paged": _flag_paged,
             "flag_split_kv": _flag_split_kv, "flex": _flex}


def copy_bandwidth(policy: timing.RepetitionPolicy, nbytes: int = COPY_BYTES) -> float:
    """Bytes per second of a device-to-device copy, counting bytes read and written."""
    source = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    target = torch.empty_like(source)
    result = timing.interleaved_medians({"copy": lambda: target.copy_(source)}, policy)["copy"]
    return 2 * nbytes / (result[0] / 1e3)


def _timed_callable(calls: list, timing_mode: str):
    """What one timed sample runs: the next copy's call (eager), or one replay of a graph holding
    every copy's call (graph): calls_per_sample of them."""
    if timing_mode == "graph":
        return timing.graph_replay(calls)
    turn = itertools.cycle(calls)
    return lambda: next(turn)()


def calls_per_sample(copies: int, timing_mode: str) -> int:
    """How many calls one timed sample of _timed_callable over `copies` calls holds."""
    return copies if timing_mode == "graph" else 1


def run_script(script, arguments: list[str]) -> subprocess.CompletedProcess:
    """`script` run by this Python in a child process with `arguments`: its stdout passed
    through, its stderr kept (for last_words) and echoed.  The benchmark and the probe measure
    in children because a CUDA error poisons the process it happens in."""
    child = subprocess.run([sys.executable, str(script), *arguments], stderr=subprocess.PIPE, text=True)
    sys.stderr.write(child.stderr)
    return child


def last_words(stderr: str) -> str:
    """What a child process that died said last about it: its first line naming an error, else
    its last line (a CUDA error's own line, not the traceback's last frame)."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["no output"])[0 if errors else -1][:300]


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def timed_fields(cell: Cell, result, per_sample: int) -> dict:
    """A results line's fields from one implementation's timing.interleaved_medians result over
    samples of `per_sample` calls: its error, or its median milliseconds a call, sample count
    and bandwidth."""
    if isinstance(result, BaseException):
        return {"error": _error_text(result)}
    ms = result[0] / per_sample
    return {"ms": ms, "samples": len(result[1]), "bandwidth": cell.cache_bytes / (ms / 1e3)}


def measure_cell(cell: Cell, names, policy: timing.RepetitionPolicy, timing_mode: str = "eager") -> list[dict]:
    """One results line per implementation: its median time per call and bandwidth, or why not."""
    copies = copies_for(cell)
    lines = {name: {"impl": name, **asdict(cell), "cache_bytes": cell.cache_bytes, "timing": timing_mode,
                    "cache_copies": copies} for name in names}
    no_cache = skip_reason(cell, "cache", torch.cuda.mem_get_info()[0])
    if no_cache:
        return [{**line, "skip": no_cache} for line in lines.values()]
    problems = [problem(cell, seed=seed) for seed in range(copies)]
    timed = {}
    for name in names:
        reason = skip_reason(cell, name, torch.cuda.mem_get_info()[0], timing_mode=timing_mode,
                             has_copy=problems[0].has_copy(name))
        if reason:
            lines[name]["skip"] = reason
            continue
        try:
            timed[name] = _timed_callable([_BUILDERS[name](cell, tensors) for tensors in problems], timing_mode)
        except Exception as exc:  # noqa: BLE001 -- a peer that is not installed, refuses or cannot be captured
            lines[name]["error"] = _error_text(exc)
    per_sample = calls_per_sample(copies, timing_mode)
    for name, result in timing.interleaved_medians(timed, policy).items():
        lines[name].update(timed_fields(cell, result, per_sample))
    del problems, timed  # a graph's memory pool is freed with its replay callable
    torch.cuda.empty_cache()
    return list(lines.values())
