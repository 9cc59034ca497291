"""Where a case is born: the catalog of case ids (`catalog`), the tiers that group them
(`tiers`), their seeded inputs (`inputs`, `distributions`) and hypothesis strategies
over them (`strategies`).

Pure description: imports kernels.targets (the dtype names) and the backends, never
judging, running or reporting."""
