"""Deliberately broken variants of the bundled kernels, and the kill table that
shows the conformance catalog catches each of them (`python -m mutants`)."""

from conformance.bundled.mutants.definitions import BY_NAME, COUNTED, MUTANTS
from conformance.bundled.mutants.transform import Edit, Mutant, PatternError

__all__ = ["BY_NAME", "COUNTED", "MUTANTS", "Edit", "Mutant", "PatternError"]
