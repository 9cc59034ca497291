"""Fixtures shared by the harness tests."""

import pytest

from conformance import backends


@pytest.fixture(autouse=True)
def keep_active_profile(monkeypatch):
    """In-process runs activate backend profiles; give every later test back the one it had."""
    monkeypatch.setattr(backends, "_active", backends._active)
