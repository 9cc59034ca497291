"""The compile-only tier: the bundled kernels compiled for GPU targets nobody here
owns, without a GPU (`python -m conformance compile`). See tier.py."""
