"""One entry point for the runner: the error spread of every judged tensor, and the `where`
object (localization + fault pattern) of every failing one.

Diagnosis never changes a verdict: if it breaks, the tensor's `where` says why and the case
keeps the verdict the rule gave it.
"""

from __future__ import annotations

import math

from conformance.cases.catalog import Case
from conformance.cases.variants import modifies_scores
from conformance.diagnosing import error_spread, fault_patterns, key_attribution, localization, nonfinite_regions
from conformance.diagnosing.geometry import bundled_tiles, geometry, pattern_grid


def failing(tensor: dict) -> bool:
    """Whether the rule held this tensor against its case (over the bound, NaN/Inf, unpropagated);
    tolerates records of older runs without the newer fields."""
    return not tensor.get("passed", True) or bool(tensor.get("nonfinite")) or bool(tensor.get("unpropagated"))


def spread(tensor: dict, kernel, torch_paths, ref, dtype_name: str) -> None:
    """Add `ulps` (kernel and torch error in ulps: median, p99) to a tensor's record."""
    first_path = torch_paths if not isinstance(torch_paths, (tuple, list)) else torch_paths[0]
    tensor["ulps"] = error_spread.spread(kernel, first_path, ref, dtype_name)


def where(case: Case, tensor: dict, kernel, ref, inputs: dict, do, exclude=None, tiles=None) -> dict:
    """The `where` object of a failing tensor: localization.record + pattern + evidence; with
    NaN/Inf present, the pattern names the region they fill (nonfinite_regions)."""
    allowance = max(tensor["torch_err"], tensor["floor"])
    if not math.isfinite(allowance):
        return {"pattern": "unclassified", "evidence": "the torch path itself is not finite: nothing to measure against"}
    shape = geometry(case, tensor["name"], tiles)
    found = localization.profiles(kernel, ref, allowance, exclude)
    # Key attribution rebuilds the plain causal/noncausal softmax: not the weights of a window,
    # softcap or ALiBi case (conformance.cases.variants), whose atoms it would get wrong.
    plain_scores = case.window is None and not modifies_scores(case)
    if plain_scores and key_attribution.attributable(shape, bool(case.dropout), case.bad_input is not None):
        grid = key_attribution.grid_for(shape, pattern_grid(max(case.seq_q, case.seq_k)))
        attributed, found.padding_keys = key_attribution.attribution_map(shape, inputs, do, kernel, ref,
                                                                         found.row_excess, grid)
        found.map, found.map_grid = (attributed / max(found.total, 1e-300)).cpu(), grid
    nonfinite = nonfinite_regions.footprint(kernel, ref, exclude)
    if nonfinite is not None:
        pattern, evidence = nonfinite_regions.name(nonfinite, shape)
    else:
        pattern, evidence = fault_patterns.name(found, shape)
    return {"pattern": pattern, "evidence": evidence, **localization.record(found, shape)}


def diagnosed(case: Case, tensor: dict, kernel, ref, inputs: dict, do, exclude=None, bundled: bool = False) -> dict:
    """`where`, or {"pattern": "unclassified", "evidence": "diagnosis failed: ..."} if it raised.
    bundled: the implementation is the bundled kernels, whose tiles are known."""
    try:
        tiles = bundled_tiles(case, tensor["name"]) if bundled else None
        return where(case, tensor, kernel, ref, inputs, do, exclude, tiles)
    except Exception as exc:  # a diagnosis must never cost the case its verdict
        return {"pattern": "unclassified", "evidence": f"diagnosis failed: {type(exc).__name__}: {exc}"[:300]}


def case_pattern(tensors: list[dict]) -> str | None:
    """'tensor: pattern' of a case's most specific diagnosed tensor (fault_patterns.specificity),
    None when no tensor was diagnosed."""
    diagnosed_tensors = [t for t in tensors if t.get("where")]
    if not diagnosed_tensors:
        return None
    best = min(diagnosed_tensors, key=lambda t: fault_patterns.specificity(t["where"]["pattern"]))
    return f"{best['name']}: {best['where']['pattern']}"
