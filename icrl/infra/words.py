"""Counts in words as a reader expects them: ``plural(1, "worker")`` is "1 worker",
``plural(2, "worker")`` "2 workers" (the noun given in the singular; "es" or another plural
passed as ``many``)."""

from __future__ import annotations


def plural(count: float, noun: str, many: str = "") -> str:
    """``count`` and ``noun``, the noun in the plural unless the count is exactly 1."""
    return f"{count:g} {noun if count == 1 else (many or noun + 's')}"
