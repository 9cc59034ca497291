"""Keeping verdicts trustworthy over time: the known-issue registry (`known_issues`,
`known_issues.toml`), the false-alarm checks (`flake`, `flake_scales`) and the nightly
triton-version matrix job (`matrix_job`).

`known_issues` imports only the cases; the flake commands drive running and reporting."""
