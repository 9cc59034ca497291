"""How a case is judged: the operators described as data (`operators`, `returns`), the
reference and torch paths (`comparison_paths`, with `bad_inputs` and the `dropout`
replay), the 2x rule (`rule`), the verdict names (`verdicts`), the determinism check.

Imports cases, backends and `reference`; never running, reporting or the kernels."""
