"""Replaying an implementation's dropout mask in the reference paths (stub until
the kernels expose their mask)."""

from __future__ import annotations


def dropout_replay(case, function):
    """None for cases without dropout."""
    if not case.dropout:
        return None
    raise NotImplementedError("dropout replay")
