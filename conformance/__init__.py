"""FA Conformance: the harness that judges Triton FlashAttention kernels (`python -m conformance`,
`fa-conformance`).

The harness and the code it ships (the bundled kernels, the float64 reference, the
mutants, the benchmarks) are importable under this one package only -- the latter as
`conformance.bundled.*` -- so an installed harness shadows no `kernels` or `reference`
of the repository it is run from (conformance/bundled/__init__.py says how).
"""
