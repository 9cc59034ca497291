"""Primitive probes: tiny kernels that exercise one Triton primitive each
(`probe_kernels`), their measurements (`probe_measures`), the probe list and its
verdicts (`probes`), and the attribution of failing cases to failing probes
(`attribution`).

Imports backends and judging.verdicts; never running or reporting."""
