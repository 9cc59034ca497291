"""The known-issue registry: `known_issues.toml` read, validated and matched.

An entry scopes a known failure (backend, arch, Triton version range, operator,
direction, dtype, head dim, mask, implementation, case features such as dropout,
layout and shape, where integers take a value or a range like ">=16384"). The
runner asks `match()` for
every case it launched and converts the rule's verdict with `apply_known_issue()`:
failing cases become `xfail`, passing ones `xpass` (which fails the run, so a
stale entry cannot linger). The file format is documented in the file itself.

An entry whose scope names `probe` (primitive probe ids, conformance/probing/probes.py)
covers probe lines instead of cases: `match_probe()`, asked by `run_probe()`,
with only backend, arch and triton narrowing it further. An entry without
`probe` covers cases only.

Validation is strict on purpose: a misspelt scope key silently ignored would
widen the entry to every case and hide real failures.
"""

from __future__ import annotations

import functools
import operator
import re
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from conformance.cases.catalog import FEATURES, SHAPE_FIELDS, Case
from conformance.cases.variants import has_empty_rows
from conformance.judging import verdicts

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

DEFAULT_REGISTRY = Path(__file__).with_name("known_issues.toml")

_ENTRY_KEYS = {"id", "description", "reason", "scope"}
# Scope fields compared against a case's own fields.
_CASE_SCOPE = ("op", "direction", "dtype", "head_dim", "causal", "layout", "bad_input", *SHAPE_FIELDS)
# Scope fields derived from a case (true or false): traits no single field states.
_DERIVED_SCOPE = {
    "empty_rows": has_empty_rows,  # rows that see no key (causal Sq > Sk, a window, a sequence without keys)
    "grouped": lambda case: case.kv_heads < case.heads,  # GQA or MQA
}
# Integer fields also take ranges: ">=16384", ">=1024,<8192".
_INTEGER_SCOPE = frozenset({"head_dim", *SHAPE_FIELDS})
# `feature` admits a case having any of the listed catalog features (lse, total, dropout, layout, dist).
FEATURE_NAMES = tuple(feature.field for feature in FEATURES)
_SCOPE_KEYS = {"backend", "arch", "triton", "implementation", "feature", "probe", *_CASE_SCOPE, *_DERIVED_SCOPE}
# The keys that may narrow a probe entry (one with `probe` in its scope); the rest describe cases.
_PROBE_SCOPE_KEYS = frozenset({"probe", "backend", "arch", "triton"})
_COMPARISON = re.compile(r"\s*(>=|<=|==|!=|>|<)\s*(\d+)\s*")
_OPERATORS = {">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
              ">": operator.gt, "<": operator.lt}


def case_features(case: Case) -> set[str]:
    """The catalog features a case has (those shown in its id)."""
    return {feature.field for feature in FEATURES if getattr(case, feature.field) != feature.default}


def _parse_range(text: str) -> list[tuple]:
    """">=1024,<8192" -> [(operator.ge, 1024), (operator.lt, 8192)]; ValueError if malformed."""
    parts = [_COMPARISON.fullmatch(part) for part in text.split(",")]
    if not all(parts):
        raise ValueError(f"bad integer range {text!r} (expected e.g. \">=16384\" or \">=1024,<8192\")")
    return [(_OPERATORS[part[1]], int(part[2])) for part in parts]


def _admits(allowed, value) -> bool:
    """One allowed scope item against a case's value: equality, or a range string for ints."""
    if isinstance(allowed, str) and isinstance(value, int) and not isinstance(value, bool):
        return all(compare(value, bound) for compare, bound in _parse_range(allowed))
    return allowed == value


@dataclass(frozen=True)
class KnownIssue:
    """One registry entry. `scope` maps a field to its allowed values (a tuple);
    `triton` is a PEP 440 specifier set or None (any version)."""

    id: str
    description: str
    reason: str
    scope: dict
    triton: SpecifierSet | None = None

    @property
    def covers_probes(self) -> bool:
        """True for an entry scoped by `probe`: it matches probe lines, never cases."""
        return "probe" in self.scope

    def _admits_run(self, profile, triton_version: str | None) -> bool:
        """Backend, arch and Triton version: the scope fields of cases and probes alike."""
        if "backend" in self.scope and not ({profile.name, profile.key} & set(self.scope["backend"])):
            return False
        if "arch" in self.scope and profile.arch not in self.scope["arch"]:
            return False
        return self.triton is None or _version_in(triton_version, self.triton)

    def matches(self, case: Case, profile, triton_version: str | None,
                implementation: str | None = None) -> bool:
        """True iff every scope field of this (case) entry admits the given run and case."""
        if self.covers_probes or not self._admits_run(profile, triton_version):
            return False
        if "implementation" in self.scope and implementation not in self.scope["implementation"]:
            return False
        if any(name in self.scope and not any(_admits(allowed, getattr(case, name)) for allowed in self.scope[name])
               for name in _CASE_SCOPE):
            return False
        if any(name in self.scope and derive(case) not in self.scope[name] for name, derive in _DERIVED_SCOPE.items()):
            return False
        return "feature" not in self.scope or bool(case_features(case) & set(self.scope["feature"]))

    def matches_probe(self, probe_id: str, profile, triton_version: str | None) -> bool:
        """True iff this (probe) entry names `probe_id` and admits the given run."""
        return (self.covers_probes and probe_id in self.scope["probe"]
                and self._admits_run(profile, triton_version))

    def record(self) -> dict:
        """The entry as stored in a results line."""
        scope = {name: list(values) for name, values in self.scope.items()}
        if self.triton is not None:
            scope["triton"] = str(self.triton)
        return {"id": self.id, "description": self.description, "reason": self.reason, "scope": scope}


def _version_in(version: str | None, specifiers: SpecifierSet) -> bool:
    if version is None:
        return False
    try:
        return specifiers.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def _entry_from_toml(raw: dict, where: str) -> KnownIssue:
    label = f"{where}: entry {raw.get('id', '?')!r}"
    unknown = set(raw) - _ENTRY_KEYS
    if unknown:
        raise ValueError(f"{label}: unknown keys {sorted(unknown)} (allowed: {sorted(_ENTRY_KEYS)})")
    for key in ("id", "description", "reason"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise ValueError(f"{label}: {key!r} must be a non-empty string")
    raw_scope = dict(raw.get("scope", {}))
    unknown = set(raw_scope) - _SCOPE_KEYS
    if unknown:
        raise ValueError(f"{label}: unknown scope keys {sorted(unknown)} (allowed: {sorted(_SCOPE_KEYS)})")
    triton = None
    if "triton" in raw_scope:
        try:
            triton = SpecifierSet(raw_scope.pop("triton"))
        except (InvalidSpecifier, TypeError) as exc:
            raise ValueError(f"{label}: bad triton version range: {exc}") from None
    scope = {name: tuple(value) if isinstance(value, list) else (value,) for name, value in raw_scope.items()}
    problem = _scope_value_problem(scope)
    if problem:
        raise ValueError(f"{label}: {problem}")
    return KnownIssue(raw["id"], raw["description"], raw["reason"], scope, triton)


def _probe_ids() -> tuple[str, ...]:
    # Imported here, not at the top: conformance.probing.probes imports the runner, which imports
    # this module (and probes bring torch, which reading the registry otherwise does not need).
    from conformance.probing.probes import PROBE_IDS

    return PROBE_IDS


def _scope_value_problem(scope: dict) -> str | None:
    """What is wrong with the values of a scope (unknown feature or probe, bad integer or
    range, case keys next to `probe`), or None."""
    if "probe" in scope:
        case_keys = sorted(set(scope) - _PROBE_SCOPE_KEYS)
        if case_keys:
            return (f"a probe entry is narrowed only by {', '.join(sorted(_PROBE_SCOPE_KEYS - {'probe'}))}; "
                    f"case scope keys {case_keys} cannot go with 'probe'")
        known_probes = _probe_ids()
        unknown = [name for name in scope["probe"] if name not in known_probes]
        if unknown:
            return f"unknown probe {unknown[0]!r} (known: {', '.join(known_probes)})"
    for name in set(_DERIVED_SCOPE) & set(scope):
        if not all(isinstance(item, bool) for item in scope[name]):
            return f"{name} takes true or false, got {list(scope[name])!r}"
    unknown = [name for name in scope.get("feature", ()) if name not in FEATURE_NAMES]
    if unknown:
        return f"unknown feature {unknown[0]!r} (known: {', '.join(FEATURE_NAMES)})"
    for name in _INTEGER_SCOPE & set(scope):
        for item in scope[name]:
            if isinstance(item, bool) or not isinstance(item, (int, str)):
                return f"{name} takes integers or ranges, got {item!r}"
            if isinstance(item, str):
                try:
                    _parse_range(item)
                except ValueError as exc:
                    return f"{name}: {exc}"
    return None


@functools.lru_cache(maxsize=None)
def _load(path: str) -> tuple[KnownIssue, ...]:
    with open(path, "rb") as handle:
        document = tomllib.load(handle)
    unknown = set(document) - {"issue"}
    if unknown:
        raise ValueError(f"{path}: unknown top-level keys {sorted(unknown)}; entries are [[issue]] tables")
    raw_entries = document.get("issue", [])
    if not isinstance(raw_entries, list) or not all(isinstance(raw, dict) for raw in raw_entries):
        raise ValueError(f"{path}: entries must be [[issue]] tables")
    entries = tuple(_entry_from_toml(raw, path) for raw in raw_entries)
    ids = [entry.id for entry in entries]
    duplicates = sorted({entry_id for entry_id in ids if ids.count(entry_id) > 1})
    if duplicates:
        raise ValueError(f"{path}: duplicate issue ids {duplicates}")
    return entries


def load_registry(path: str | Path | None = None) -> tuple[KnownIssue, ...]:
    """The validated entries of a registry file (default: the bundled one)."""
    return _load(str(Path(path or DEFAULT_REGISTRY).resolve()))


def match(case: Case, profile, triton_version: str | None, implementation: str | None = None,
          registry: tuple[KnownIssue, ...] | None = None) -> KnownIssue | None:
    """The first registry entry whose scope covers this case on this backend, or None."""
    entries = load_registry() if registry is None else registry
    for entry in entries:
        if entry.matches(case, profile, triton_version, implementation):
            return entry
    return None


def match_probe(probe_id: str, profile, triton_version: str | None,
                registry: tuple[KnownIssue, ...] | None = None) -> KnownIssue | None:
    """The first registry entry scoped by `probe` that covers this probe on this backend, or None."""
    entries = load_registry() if registry is None else registry
    for entry in entries:
        if entry.matches_probe(probe_id, profile, triton_version):
            return entry
    return None


def apply_known_issue(verdict: str, issue: KnownIssue | None) -> str:
    """The reported verdict: a failing verdict under a known issue is xfail, a pass is xpass."""
    if issue is None or verdict == verdicts.UNSUPPORTED:
        return verdict
    if verdict == verdicts.PASS:
        return verdicts.XPASS
    if verdict in (verdicts.FAIL, verdicts.NONFINITE, verdicts.ERROR):
        return verdicts.XFAIL
    raise ValueError(f"cannot apply a known issue to verdict {verdict!r}")
