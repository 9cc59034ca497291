"""The compile-only tier: the bundled kernels compiled for GPU targets nobody here
owns, without a GPU (`python -m conformance compile`). See tier.py.

Reads the profiles and the kernels' own launch tables; runs the real operators in a
worker process whose launches compile instead of run. Nothing else imports it but the CLI."""
