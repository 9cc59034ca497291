"""Value distributions: how a case's input values are shaped beyond N(0, 1).

Catalog cases draw every input (and dO) from N(0, 1) (`conformance.cases.inputs`). A
`Distribution` reshapes those fp32 draws, before the cast to the case dtype, to
push the numerics to their edges. Its spec string names it on the command line
(`--distribution`), in results lines and in reproducers:

    normal        the draws unchanged (the catalog's default)
    scaled:S      every input and dO times S
    logits:L      q and k times sqrt(L): softmax inputs (s * scale) of standard deviation L
    outliers:M    about 1 in 64 elements of every tensor (at least one) set to +-M
    nearconst:E   every key row = key row 0 + E * N(0, 1): near-constant scores along a query row
    negative:L    q and k moved apart along the last head-dim axis so that every softmax
                  input (s * scale) is about -L: a kernel whose running max does not start
                  at -inf (or that exponentiates before subtracting it) underflows whole rows

Tensors are told apart by their role (`input_role`): the first letter of the
operator's input name, q, k or v (piecewise_attention's q1, k1, q2, k2 are queries
and keys, so both of its score products are shaped alike), or `do`. An input
name without one of those roles is refused, never silently left N(0, 1). Any extra
randomness comes from a generator of its own, so the base draws of a case are the
same under every distribution.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DEFAULT = "normal"
_OUTLIER_DENSITY = 1 / 64
# What a transform is told a tensor is: a query, key or value input, or the output gradient.
INPUT_ROLES = ("q", "k", "v")
GRADIENT_ROLE = "do"


def input_role(name: str) -> str:
    """The role of an operator input named `name` (its first letter: q, k or v);
    ValueError for a name that has none, so no operator's input escapes a distribution."""
    if name[:1] not in INPUT_ROLES:
        raise ValueError(f"input {name!r} has no distribution role: an input's name must start "
                         f"with one of {', '.join(INPUT_ROLES)} (query, key, value)")
    return name[0]


def _scaled(role: str, values: torch.Tensor, scale: float, generator) -> torch.Tensor:
    return values * scale


def _logits(role: str, values: torch.Tensor, std: float, generator) -> torch.Tensor:
    # s = q.k of N(0, 1) rows has standard deviation sqrt(D), and the default softmax
    # scale 1/sqrt(D) brings it to 1: scaling q and k by sqrt(L) gives logits of std L.
    return values * math.sqrt(std) if role in ("q", "k") else values


def _outliers(role: str, values: torch.Tensor, magnitude: float, generator) -> torch.Tensor:
    if values.numel() == 0:
        return values
    chosen = torch.rand(values.shape, generator=generator) < _OUTLIER_DENSITY
    chosen.view(-1)[int(torch.randint(values.numel(), (1,), generator=generator))] = True
    return torch.where(chosen, torch.where(values < 0, -magnitude, magnitude), values)


def _near_constant(role: str, values: torch.Tensor, spread: float, generator) -> torch.Tensor:
    if role != "k" or values.shape[-2] == 0:
        return values
    return values[..., :1, :] + spread * values  # the draws themselves serve as the noise


def _negative(role: str, values: torch.Tensor, level: float, generator) -> torch.Tensor:
    # q_last += c and k_last -= c add -c^2 to every q.k; the default scale 1/sqrt(D)
    # makes that -L for c^2 = L sqrt(D).  The draws' own q.k (and c * (k_last - q_last),
    # std ~ c / sqrt(D) after the scale) stay, so rows are not constant.  The last axis,
    # not the first: a bad-input case plants its NaN/Inf at head-dim element 0, whose
    # products with the keys must keep mixed signs to reach the outputs as non-finite
    # (inf times keys that are all negative there would only mask the row).
    if role not in ("q", "k") or values.shape[-1] == 0:
        return values
    offset = math.sqrt(level * math.sqrt(values.shape[-1]))
    shifted = values.clone()
    shifted[..., -1] += offset if role == "q" else -offset
    return shifted


# kind -> (transform, parameter needed?)
_KINDS = {
    "normal": (None, False),
    "scaled": (_scaled, True),
    "logits": (_logits, True),
    "outliers": (_outliers, True),
    "nearconst": (_near_constant, True),
    "negative": (_negative, True),
}
KINDS = tuple(_KINDS)


@dataclass(frozen=True)
class Distribution:
    """One value distribution: a kind (see the module doc) and its parameter."""

    kind: str = DEFAULT
    parameter: float | None = None

    def __post_init__(self):
        if self.kind not in _KINDS:
            raise ValueError(f"unknown distribution {self.kind!r} (known: {', '.join(KINDS)})")
        needs_parameter = _KINDS[self.kind][1]
        if needs_parameter != (self.parameter is not None):
            raise ValueError(f"distribution {self.kind!r} {'needs' if needs_parameter else 'takes no'} parameter")
        if self.parameter is not None and not (math.isfinite(self.parameter) and self.parameter > 0):
            raise ValueError(f"distribution {self.kind!r}: parameter must be positive and finite")

    @property
    def spec(self) -> str:
        """`kind` or `kind:parameter`, as `parse` reads it."""
        return self.kind if self.parameter is None else f"{self.kind}:{self.parameter:g}"

    @property
    def is_default(self) -> bool:
        return self.kind == DEFAULT

    @classmethod
    def parse(cls, spec: str) -> "Distribution":
        """`normal`, `scaled:0.01`, `logits:1e4`, ...; ValueError (one line, naming
        --distribution) if malformed."""
        kind, separator, parameter = spec.strip().partition(":")
        try:
            value = float(parameter) if separator else None
        except ValueError:
            raise ValueError(f"--distribution: {spec!r}: parameter {parameter!r} is not a number") from None
        try:
            return cls(kind, value)
        except ValueError as exc:
            raise ValueError(f"--distribution: {spec!r}: {exc}") from None

    def apply(self, values: dict, do: torch.Tensor | None, seed: int) -> tuple[dict, torch.Tensor | None]:
        """Reshape fp32 draws (input name -> tensor, and dO) of a case whose generator seed is `seed`."""
        transform = _KINDS[self.kind][0]
        if transform is None:
            return values, do
        generator = torch.Generator(device="cpu")
        generator.manual_seed(seed ^ 0x5DEECE66D)  # not the base draws' stream
        shaped = {name: transform(input_role(name), t, self.parameter, generator) for name, t in values.items()}
        return shaped, None if do is None else transform(GRADIENT_ROLE, do, self.parameter, generator)


def parse_optional(spec: str | None) -> Distribution | None:
    """None for no spec or the default; the parsed distribution otherwise."""
    if spec is None:
        return None
    distribution = Distribution.parse(spec)
    return None if distribution.is_default else distribution
