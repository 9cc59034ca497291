"""The operators the harness judges, described declaratively (in the spirit of
PyTorch's OpInfo): their inputs, how to call an implementation, how to name its
forward outputs, and how the reference paths compute the same tensors.

The runner is generic over these descriptions: adding an operator means adding
an `Operator` here and grids to the catalog, not new branches in the runner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from conformance.cases.catalog import Case
from conformance.cases.inputs import dropout_seed
from conformance.judging import kv_cache, kv_cache_calls, returns, varlen
from conformance.judging.variant_options import alibi_reach, kernel_options, reference_options
from conformance.judging.conventions import DEFAULT as DEFAULT_CONVENTIONS, Conventions
from conformance.judging.returns import Returned

# Reference paths of one case: (case, detached inputs, do or None, precision, dropout replay,
# conventions) -> tensors; conventions: the implementation's declared ones (conformance.judging.conventions)
TorchPath = Callable[[Case, dict, "torch.Tensor | None", object, object, Conventions], dict]


@dataclass(frozen=True)
class Operator:
    """How to exercise one operator.

    inputs:   input name -> "q" (batch, heads, seq_q, head_dim) or "kv" (batch, kv_heads, seq_k, head_dim)
    call:     (implementation, case, inputs by name, seed_offset) -> whatever it returns;
              seed_offset: ask for the dropout RNG state (conformance.judging.dropout's seed/offset protocol)
    outputs:  (case, that return value, seed_offset) -> conformance.judging.returns.Returned (tensors by
              name, the return convention seen, the RNG state)
    torch_path: the reference / same-precision tensors of a case (forward outputs or gradients),
              under the implementation's declared conventions (its causal alignment)
    term_sizes: (case, detached inputs) -> {tensor name: size of the terms it is computed
              from}, for tensors whose fp32 rounding is set by terms larger than the result
              itself (see `conformance.judging.rule.floor`); tensors not named use their own size
    delta_noise: (case, detached inputs, do, dropout replay, conventions) -> reference.GradientNoise: per
              gradient name, the size of the noise that rounding the stored output O, and
              the fp32 accumulator's rounding of dP and delta, put on it through dS, for
              backward cases (`reference.delta_noise`; see `conformance.judging.rule.floor`)
    padding_rows: (case, device) -> bool mask broadcasting to lse, of the query rows that are
              padding rather than rows of the problem (flash_attention_varlen), or None: a
              declared lse of empty rows applies to real rows only
    adapt:    (implementation, its declared Capabilities or None) -> a callable taking `call`'s
              arguments: where an operator has several calling conventions in use
              (kv_cache_attention: conformance.judging.kv_cache_calls), the declared one
    """

    name: str
    inputs: dict
    call: Callable
    outputs: Callable
    torch_path: TorchPath
    term_sizes: Callable[[Case, dict], dict] = lambda case, inputs: {}
    # The causal alignments its reference computes (conformance.judging.conventions): a kernel
    # declaring another has its causal Sq != Sk cases unsupported.
    causal_alignments: tuple = ("bottom_right",)
    delta_noise: Callable = lambda case, inputs, do, dropout, conventions=DEFAULT_CONVENTIONS: None
    padding_rows: Callable = lambda case, device: None
    adapt: Callable = lambda function, declaration: function

    def gradient_names(self) -> list[str]:
        return [f"d{name}" for name in self.inputs]


# --------------------------------------------------------------------------- flash_attention

def _flash_extras(case: Case, seed_offset: bool, device) -> dict:
    """Keyword arguments beyond (q, k, v, causal) that a case needs; omitted when
    unused so implementations without those features still run the other cases.
    Dropout: a seed the kernel's mask replays from, or (seed_offset) a request for the
    RNG state the kernel drew (conformance.judging.dropout). FlashAttention-2's variants:
    window_size, softcap, alibi_slopes (conformance.judging.variant_options)."""
    extras = kernel_options(case, device)
    if case.lse:
        extras["return_log_normalizer"] = True
    if case.total:
        extras["return_total_attention"] = True
    if case.dropout and seed_offset:
        extras.update(dropout_p=case.dropout, return_seed_offset=True)
    elif case.dropout:
        extras.update(dropout_p=case.dropout, dropout_seed=dropout_seed(case))
    return extras


def _flash_call(function, case: Case, inputs: dict, seed_offset: bool = False):
    q = inputs["q"]
    return function(q, inputs["k"], inputs["v"], causal=case.causal, **_flash_extras(case, seed_offset, q.device))


def _flash_output_names(case: Case) -> list[str]:
    return ["out"] + [name for name, wanted in (("lse", case.lse), ("total", case.total)) if wanted]


def _flash_outputs(case: Case, result, seed_offset: bool = False) -> Returned:
    """`out` alone, or a tuple of the requested extras in either convention (conformance.judging.returns)."""
    return returns.parse(result, _flash_output_names(case), seed_offset=bool(seed_offset and case.dropout))


def _causal(case: Case, conventions: Conventions):
    """The reference's causal argument: False, True (bottom-right) or "top_left" (declared)."""
    return "top_left" if case.causal and conventions.top_left else case.causal


def _flash_torch_path(case: Case, inputs: dict, do, precision, dropout,
                      conventions: Conventions = DEFAULT_CONVENTIONS) -> dict:
    from conformance.bundled.reference import attention_backward, attention_forward

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    options = dict(causal=_causal(case, conventions), precision=precision, **reference_options(case, q.device))
    if dropout is not None:
        options["dropout"] = dropout
    if case.direction == "fwd":
        total_option = {"return_total": True} if case.total else {}
        out, lse, *total = attention_forward(q, k, v, **options, **total_option)
        tensors = {"out": out, "lse": lse, "total": total[0] if total else None}
        return {name: tensors[name] for name in _flash_output_names(case)}
    out, lse = attention_forward(q, k, v, **options)
    dq, dk, dv = attention_backward(q, k, v, out, do, lse, **options)
    return {"dq": dq, "dk": dk, "dv": dv}


def score_size(q: torch.Tensor, k: torch.Tensor) -> float:
    """scale * max_i |q_i| * max_j |k_j| (2-norms over the head dim, scale = D^-1/2): by
    Cauchy-Schwarz at least every |scaled score| and every scaled sum of |q_d * k_d|,
    i.e. the size at which fp32 rounds the score dot products. Non-finite rows are
    ignored (NaN/Inf cases measure the clean stand-ins anyway)."""
    def largest_norm(x: torch.Tensor) -> float:
        norms = x.detach().to(torch.float64).norm(dim=-1)
        norms = norms[torch.isfinite(norms)]
        return float(norms.max()) if norms.numel() else 0.0
    return q.shape[-1] ** -0.5 * largest_norm(q) * largest_norm(k)


def _flash_term_sizes(case: Case, inputs: dict) -> dict:
    """lse and total are built from exp(scaled score): they carry the scores' rounding.

    The variants: a window or per-sequence lengths only choose which terms there are (the
    bound holds for every pair); softcap changes nothing either: c * tanh(s / c) is smaller
    than s, its derivative is at most 1 (the dot product's rounding is not amplified), and
    an fp32 tanh rounds relative to its result, so the capped terms are rounded at most at
    the scores' size. ALiBi moves the terms by its bias, up to `alibi_reach` at the keys a
    row sees, where fp32 rounds them (conformance.judging.variant_options.alibi_reach).
    Padding of a varlen case is not measured: its rows are nothing the implementation saw."""
    q, k = inputs["q"], inputs["k"]
    if case is None:  # the plain operator's sizes (tests/kernel_checks.py asks without a case)
        return {"lse": score_size(q, k), "total": score_size(q, k)}
    if case.lens is not None:
        q, k = varlen.real_positions(q, case, "q"), varlen.real_positions(k, case, "kv")
    scores = score_size(q, k) + alibi_reach(case)
    return {"lse": scores, "total": scores}


def _flash_delta_noise(case: Case, inputs: dict, do, dropout, conventions: Conventions = DEFAULT_CONVENTIONS):
    from conformance.bundled.reference import REFERENCE, attention_delta_noise, attention_forward

    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    variants = reference_options(case, q.device)
    options = {"dropout": dropout} if dropout is not None else {}
    causal = _causal(case, conventions)
    out, lse = attention_forward(q, k, v, causal=causal, precision=REFERENCE, **options, **variants)
    keep_scale = dropout.keep_scale if dropout is not None else 1.0
    return attention_delta_noise(q, k, v, out, do, lse, causal=causal, keep_scale=keep_scale, **variants)


FLASH_ATTENTION = Operator(
    name="flash_attention",
    inputs={"q": "q", "k": "kv", "v": "kv"},
    call=_flash_call,
    outputs=_flash_outputs,
    torch_path=_flash_torch_path,
    term_sizes=_flash_term_sizes,
    delta_noise=_flash_delta_noise,
    causal_alignments=("bottom_right", "top_left"),
)


# --------------------------------------------------------------------------- piecewise_attention

def _piecewise_call(function, case: Case, inputs: dict, seed_offset: bool = False):
    return function(inputs["q1"], inputs["k1"], inputs["q2"], inputs["k2"], inputs["v"], case.dist,
                    causal=case.causal)


def _piecewise_torch_path(case: Case, inputs: dict, do, precision, dropout,
                          conventions: Conventions = DEFAULT_CONVENTIONS) -> dict:
    """piecewise_attention is bottom-right only (a top-left declaration leaves its causal
    Sq != Sk cases unsupported: conformance.running.capabilities)."""
    from conformance.bundled.reference import piecewise_backward, piecewise_forward

    args = [inputs[name] for name in ("q1", "k1", "q2", "k2", "v")]
    options = dict(causal=case.causal, precision=precision)
    out, lse = piecewise_forward(*args, case.dist, **options)
    if case.direction == "fwd":
        return {"out": out}
    grads = piecewise_backward(*args, out, do, lse, case.dist, **options)
    return dict(zip(("dq1", "dk1", "dq2", "dk2", "dv"), grads))


def _piecewise_delta_noise(case: Case, inputs: dict, do, dropout, conventions: Conventions = DEFAULT_CONVENTIONS):
    from conformance.bundled.reference import REFERENCE, piecewise_delta_noise, piecewise_forward

    args = [inputs[name] for name in ("q1", "k1", "q2", "k2", "v")]
    out, lse = piecewise_forward(*args, case.dist, causal=case.causal, precision=REFERENCE)
    return piecewise_delta_noise(*args, out, do, lse, case.dist, causal=case.causal)


PIECEWISE_ATTENTION = Operator(
    name="piecewise_attention",
    inputs={"q1": "q", "k1": "kv", "q2": "q", "k2": "kv", "v": "kv"},
    call=_piecewise_call,
    outputs=lambda case, result, seed_offset=False: returns.parse(result, ["out"]),
    torch_path=_piecewise_torch_path,
    delta_noise=_piecewise_delta_noise,
)

# --------------------------------------------------------------------------- flash_attention_varlen

def _varlen_call(function, case: Case, inputs: dict, seed_offset: bool = False):
    """The padded inputs packed (conformance.judging.varlen), with cu_seqlens and max lengths."""
    q = inputs["q"]
    where = varlen.packing(case, q.device)
    packed = [varlen.pack(inputs[name], where.query_index if name == "q" else where.key_index)
              for name in ("q", "k", "v")]
    return function(*packed, where.cu_seqlens_q, where.cu_seqlens_k, case.seq_q, case.seq_k,
                    causal=case.causal, **_flash_extras(case, seed_offset, q.device))


def _varlen_outputs(case: Case, result, seed_offset: bool = False) -> Returned:
    """As flash_attention's, then out (total_q, H, D) and lse (H, total_q) unpacked to the padded
    (B, H, Smax, ...) the reference computes (padding: its values, 0 and -inf)."""
    returned = _flash_outputs(case, result, seed_offset)
    out = returned.tensors["out"]
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"expected the output tensor, got {type(out).__name__}")
    where = varlen.packing(case, out.device)
    tensors = {"out": varlen.unpack_rows(out, where.query_index, case, case.heads, "out")}
    if case.lse:
        tensors["lse"] = varlen.unpack_lse(returned.tensors["lse"], where.query_index, case)
    returned.tensors = tensors
    return returned


FLASH_ATTENTION_VARLEN = Operator(
    name="flash_attention_varlen",
    inputs={"q": "q", "k": "kv", "v": "kv"},
    call=_varlen_call,
    outputs=_varlen_outputs,
    torch_path=_flash_torch_path,  # on the padded tensors, with the case's lengths
    term_sizes=_flash_term_sizes,
    delta_noise=_flash_delta_noise,
    causal_alignments=("bottom_right", "top_left"),
    padding_rows=varlen.padding_rows,
)

# --------------------------------------------------------------------------- kv_cache_attention

def _kv_cache_call(function, case: Case, inputs: dict, seed_offset: bool = False):
    """The case's cache built and handed over (conformance.judging.kv_cache); forced splits and
    the variants only when the case uses them."""
    options = dict(causal=case.causal, **kernel_options(case, inputs["q"].device))
    if case.splits:
        options["num_splits"] = case.splits
    if case.lse:
        options["return_log_normalizer"] = True
    return kv_cache.call(function, case, inputs, options)


def _kv_cache_torch_path(case: Case, inputs: dict, do, precision, dropout,
                         conventions: Conventions = DEFAULT_CONVENTIONS) -> dict:
    """The varlen reference over the effective keys (a shared prefix is its owner's), with each
    sequence's Sq queries against its context length; the cache: nothing may differ."""
    from conformance.bundled.reference import attention_forward

    q = inputs["q"]
    k, v = (kv_cache.effective(case, inputs[name]) for name in ("k", "v"))
    out, lse = attention_forward(q, k, v, causal=case.causal, precision=precision,
                                 **reference_options(case, q.device))
    tensors = {"out": out, "lse": lse, "cache": kv_cache.untouched_cache(case, q.device)}
    return {name: tensors[name] for name in kv_cache.output_names(case)}


KV_CACHE_ATTENTION = Operator(
    name="kv_cache_attention",
    inputs={"q": "q", "k": "kv", "v": "kv"},
    call=_kv_cache_call,
    outputs=kv_cache.outputs,
    torch_path=_kv_cache_torch_path,
    term_sizes=_flash_term_sizes,
    adapt=kv_cache_calls.in_kvcache_form,
)

OPERATORS = {op.name: op for op in (FLASH_ATTENTION, PIECEWISE_ATTENTION, FLASH_ATTENTION_VARLEN,
                                    KV_CACHE_ATTENTION)}
