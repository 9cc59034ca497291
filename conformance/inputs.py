"""Seeded input generation: the same case gets the same tensors on every machine.

Values are drawn on the CPU with a dedicated `torch.Generator` (CPU draws are
reproducible across machines and torch versions, device draws are not), in fp32,
then cast to the case dtype and moved to the backend's device. The generator is
seeded from the case's seed *and* a CRC32 of its id without the seed, so different
shapes, dtypes and masks never reuse one stream of numbers.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch

from conformance.catalog import Case

TORCH_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
DTYPE_NAMES = {dtype: name for name, dtype in TORCH_DTYPES.items()}


@dataclass
class Inputs:
    """Tensors of one case. `do` (the output gradient) only for backward cases,
    where q, k and v are leaves that require grad."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    do: torch.Tensor | None = None


def generator_seed(case: Case) -> int:
    """The 63-bit seed of `case`'s generator (exposed for tests and debugging)."""
    shape_hash = zlib.crc32(case.data_key.encode("utf-8"))
    return (shape_hash << 31 | case.seed) & (2**63 - 1)


def make_inputs(case: Case, device: str | torch.device) -> Inputs:
    """q (B,H,Sq,D), k and v (B,Hkv,Sk,D), and do (B,H,Sq,D) for backward cases."""
    generator = torch.Generator(device="cpu")
    generator.manual_seed(generator_seed(case))
    dtype = TORCH_DTYPES[case.dtype]
    needs_grad = case.direction == "bwd"

    def draw(*shape: int, requires_grad: bool) -> torch.Tensor:
        values = torch.randn(shape, generator=generator, dtype=torch.float32)
        return values.to(dtype).to(device).requires_grad_(requires_grad)

    q_shape = (case.batch, case.heads, case.seq_q, case.head_dim)
    kv_shape = (case.batch, case.kv_heads, case.seq_k, case.head_dim)
    q = draw(*q_shape, requires_grad=needs_grad)
    k = draw(*kv_shape, requires_grad=needs_grad)
    v = draw(*kv_shape, requires_grad=needs_grad)
    do = draw(*q_shape, requires_grad=False) if needs_grad else None
    return Inputs(q, k, v, do)
