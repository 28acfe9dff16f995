"""Batches that fit on the device: a batch it cannot hold is run again in halves.

``in_batches(items, size, run, out_of_memory)`` calls ``run(batch)`` on consecutive slices of
``items``, ``size`` at a time. When ``run`` raises ``out_of_memory`` (torch's out-of-memory
error), the same batch is tried again at half its size, and the smaller size stays for the rest;
the size in effect at the end is returned (the backend keeps it for its next calls). ``run``
must compute a batch from scratch (the transformers backend gives each attempt fresh copies of
the prompts' random streams), so the labels are those of any other batch size. A single prompt
that does not fit is one line naming what to lower.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from ..errors import UsageError

log = logging.getLogger(__name__)


def in_batches(items: Sequence, size: int, run: Callable[[Sequence], None], out_of_memory: type[BaseException],
               free: Callable[[], None] = lambda: None) -> int:
    """Run ``items`` in batches of at most ``size``, halving on ``out_of_memory`` (module docstring)."""
    start = 0
    while start < len(items):
        batch = items[start:start + size]
        try:
            run(batch)
        except out_of_memory:
            free()
            if len(batch) == 1:
                raise UsageError("one prompt does not fit in the device's memory even alone: lower "
                                 "--max_context_examples (or --max_model_len), or use a device with more "
                                 "memory") from None
            size = max(1, len(batch) // 2)
            log.warning("the device could not hold %d prompts at once: batches of %d from here on", len(batch), size)
            continue
        start += len(batch)
    return size
