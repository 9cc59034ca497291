"""Numerical conventions an implementation declares: what it computes where kernels
legitimately differ, so that it is judged against its declared meaning instead of
failing or being skipped.

    causal_alignment  "bottom_right" (the operator's: key j visible to query i iff
                      j <= i + Sk - Sq) or "top_left" (torch SDPA's `is_causal`: j <= i).
                      The reference and the torch paths take the declared mask.
    lse_empty_rows    "-inf" (the bundled kernels, FlagAttention) or "+inf"
                      (FlashAttention-2's CUDA kernels, so that exp(-lse) is 0): the
                      log-sum-exp of a row that sees no key. The reference's empty rows
                      take the declared value; anything else there fails -- a finite
                      value (0, say) is never a convention: it corrupts any merge of
                      partial results by lse.
    fp32_matmul       "ieee" or "tf32": fp32 products computed at TF32 by design (Triton's
                      `tl.dot` default on NVIDIA). The same-precision torch path then
                      rounds its fp32 matmul operands to TF32 too (reference.MATCHED_TF32);
                      the fp32 reference stays what it is. An undeclared kernel computing at
                      TF32 keeps failing.

Declared through the implementation's capabilities (conformance.running.capabilities);
the defaults are the operator's own definition. A results line names the conventions
that changed its judging (`conventions`), and the report counts them.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from conformance.cases.catalog import Case
from conformance.cases.variants import has_empty_rows, has_unequal_lengths

CHOICES = {"causal_alignment": ("bottom_right", "top_left"), "lse_empty_rows": ("-inf", "+inf"),
           "fp32_matmul": ("ieee", "tf32")}


@dataclass(frozen=True)
class Conventions:
    causal_alignment: str = "bottom_right"
    lse_empty_rows: str = "-inf"
    fp32_matmul: str = "ieee"

    def applied(self, case: Case) -> dict:
        """The non-default conventions that change how `case` is judged (for its results line)."""
        changes = {
            "causal_alignment": case.causal and has_unequal_lengths(case),
            "lse_empty_rows": case.lse and has_empty_rows(case, top_left=self.top_left),
            "fp32_matmul": case.dtype == "fp32",
        }
        return {name: getattr(self, name) for name, changes_case in changes.items()
                if changes_case and getattr(self, name) != DEFAULT_VALUES[name]}

    @property
    def top_left(self) -> bool:
        return self.causal_alignment == "top_left"

    @property
    def tf32(self) -> bool:
        return self.fp32_matmul == "tf32"


DEFAULT = Conventions()
DEFAULT_VALUES = {item.name: item.default for item in fields(Conventions)}

# How the report says what a convention changed.
DESCRIPTIONS = {
    ("causal_alignment", "top_left"): "causal mask judged top-left (declared: key j visible to query i iff j <= i)",
    ("lse_empty_rows", "+inf"): "lse of rows that see no key judged as +inf (declared)",
    ("fp32_matmul", "tf32"): "fp32 judged as TF32 (declared): the torch path rounds its fp32 matmul operands to TF32",
}
