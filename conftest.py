"""Repository-wide pytest setup: the conformance plugin (options, backend
activation before any kernel import, and the catalog cases of conformance/suite.py)."""

pytest_plugins = ["conformance.running.plugin"]
