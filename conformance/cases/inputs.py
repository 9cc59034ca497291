"""Seeded input generation: the same case gets the same tensors on every machine.

Values are drawn on the CPU with a dedicated `torch.Generator` (CPU draws are
reproducible across machines and torch versions, device draws are not), in fp32,
then cast to the case dtype and moved to the backend's device. The generator is
seeded from the case's seed *and* a CRC32 of its id without the seed, so different
shapes, dtypes and masks never reuse one stream of numbers.

Which tensors a case has comes from its operator (`conformance.judging.operators`): each
input is "q-like" (batch, heads, seq_q, head_dim) or "kv-like" (batch, kv_heads,
seq_k, head_dim). The case's layout decides the memory behind those views.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from conformance.cases.catalog import Case
from conformance.cases.distributions import Distribution, parse_optional

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32,
                "fp8e4m3": torch.float8_e4m3fn, "fp8e5m2": torch.float8_e5m2}
DTYPE_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


@dataclass
class Inputs:
    """Tensors of one case, by the operator's input names. `do` (the output
    gradient) only for backward cases, where the inputs are leaves requiring grad."""

    tensors: dict
    do: torch.Tensor | None = None

    def __getattr__(self, name):  # inputs.q, inputs.k1, ...
        try:
            return self.__dict__["tensors"][name]
        except KeyError:
            raise AttributeError(name) from None

    def detached(self) -> dict:
        return {name: t.detach() for name, t in self.tensors.items()}


def generator_seed(case: Case) -> int:
    """The 63-bit seed of `case`'s generator (exposed for tests and debugging)."""
    shape_hash = zlib.crc32(case.data_key.encode("utf-8"))
    return (shape_hash << 31 | case.seed) & (2**63 - 1)


def dropout_seed(case: Case) -> int:
    """The seed handed to the kernel's dropout: a hash of the whole id, so reruns
    agree and every case (and every seed of it) drops a different pattern."""
    return zlib.crc32(case.id.encode("utf-8")) & 0x7FFFFFFF


def logical_shape(case: Case, kind: str) -> tuple[int, int, int, int]:
    if kind == "q":
        return (case.batch, case.heads, case.seq_q, case.head_dim)
    return (case.batch, case.kv_heads, case.seq_k, case.head_dim)


def _place(values: dict, case: Case) -> dict:
    """Put (B, H, S, D) values into the case's memory layout, returning (B, H, S, D) views."""
    if case.layout == "bhsd":
        return values
    if case.layout == "bshd":
        return {name: t.transpose(1, 2).contiguous().transpose(1, 2) for name, t in values.items()}
    # packed: tensors of one sequence length are head-slices of one (B, S, sum H, D) buffer
    placed = {}
    for seqlen in dict.fromkeys(t.shape[2] for t in values.values()):
        names = [name for name, t in values.items() if t.shape[2] == seqlen]
        buffer = torch.cat([values[name].transpose(1, 2) for name in names], dim=2)
        start = 0
        for name in names:
            heads = values[name].shape[1]
            placed[name] = buffer[:, :, start:start + heads].transpose(1, 2)
            start += heads
    return {name: placed[name] for name in values}  # declaration order: gradients are matched by it


BAD_VALUES = {"nan": float("nan"), "inf": float("inf")}


def bad_input_position(case: Case) -> tuple[int, int, int, int]:
    """Where `bad_input` goes in the first query tensor: batch 0, head 0, the middle
    row (so causal rows before it stay clean), head-dim element 0."""
    return (0, 0, case.seq_q // 2, 0)


def _plant_bad_input(case: Case, q: torch.Tensor) -> None:
    q[bad_input_position(case)] = BAD_VALUES[case.bad_input]


def case_distribution(case: Case, run_distribution: Distribution | None) -> Distribution | None:
    """The distribution a case's inputs are drawn under: its own (`case.values`), else the run's."""
    return parse_optional(case.values) if case.values is not None else run_distribution


def make_inputs(case: Case, device: str | torch.device, kinds: dict | None = None,
                distribution: Distribution | None = None) -> Inputs:
    """The operator's inputs (name -> kind "q"/"kv", default q, k, v) and, for
    backward cases, do (B, H, Sq, D). Drawn in declaration order, then do, in fp32;
    `distribution` (conformance.cases.distributions) reshapes those draws before the cast;
    a case with a distribution of its own (`case.values`) takes that one instead."""
    kinds = kinds or {"q": "q", "k": "kv", "v": "kv"}
    generator = torch.Generator(device="cpu")
    generator.manual_seed(generator_seed(case))
    dtype = TORCH_DTYPES[case.dtype]
    needs_grad = case.direction == "bwd"

    def draw(shape) -> torch.Tensor:
        return torch.randn(shape, generator=generator, dtype=torch.float32)

    distribution = case_distribution(case, distribution)
    values = {name: draw(logical_shape(case, kind)) for name, kind in kinds.items()}
    do = draw(logical_shape(case, "q")) if needs_grad else None
    if distribution is not None:
        values, do = distribution.apply(values, do, generator_seed(case))
    if case.bad_input is not None:
        _plant_bad_input(case, values[next(iter(kinds))])
    values = {name: t.to(dtype).to(device) for name, t in values.items()}
    do = do.to(dtype).to(device) if needs_grad else None
    tensors = {name: t.requires_grad_(needs_grad) for name, t in _place(values, case).items()}
    return Inputs(tensors, do)
