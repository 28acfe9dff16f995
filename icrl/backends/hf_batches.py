"""Batches that fit on the device: a batch it cannot hold is run again in halves.

``in_batches(items, size, run, out_of_memory)`` calls ``run(batch)`` on consecutive slices of
``items``, ``size`` at a time. When ``run`` raises ``out_of_memory`` (torch's out-of-memory
error), the same batch is tried again at half its size, and the smaller size stays for the rest;
the size in effect at the end is returned (the backend keeps it for its next calls). ``run``
must compute a batch from scratch (the transformers backend gives each attempt fresh copies of
the prompts' random streams), so the labels are those of any other batch size. A single prompt
that does not fit is one line naming what to lower.

How many rows a batch has (``rows_for``): ``--batch_size`` when given; else, on a CUDA device, as
many as its free memory holds for the step's prompts (``row_bytes`` each: every layer's keys and
values over the row's tokens, and one layer's activations over them), up to the step's prompts;
on a CPU, ``CPU_ROWS``. The estimate leaves ``HEADROOM`` of the free memory aside; when it is
wrong anyway, the halving above catches it, and the halved size stays the ceiling.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional, Sequence, TypeVar

from ..errors import UsageError

log = logging.getLogger(__name__)

Item = TypeVar("Item")

# Rows per forward pass on a CPU when --batch_size is not given: on 2-16 cores a batch of 8 already
# keeps every core busy (bench/throughput.py), and larger ones add only padding.
CPU_ROWS = 8
# Share of the device's free memory a batch may fill (the allocator's fragments, kernels' workspaces).
HEADROOM = 0.8


def row_bytes(config: Any, element_bytes: int, tokens: int) -> int:
    """Device memory one row of ``tokens`` tokens takes in a forward pass of the model of
    ``config`` (a transformers config): its keys and values in every layer, kept for the whole
    call, and the widest activations of one layer (the MLP's, with its input and output)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or text.hidden_size // heads
    hidden = text.hidden_size
    mlp = getattr(text, "intermediate_size", None) or 4 * hidden
    per_token = 2 * text.num_hidden_layers * kv_heads * head_dim + 4 * hidden + 3 * mlp
    return per_token * element_bytes * tokens


def rows_for(prompts: int, given: Optional[int], free_bytes: Optional[int], bytes_per_row: int,
             ceiling: Optional[int] = None) -> int:
    """Rows per forward pass for a step of ``prompts`` prompts (module docstring): ``given``
    (--batch_size) when set; else as many as ``HEADROOM`` of ``free_bytes`` holds at
    ``bytes_per_row`` each (``free_bytes`` None: a CPU, ``CPU_ROWS``); never more than the
    prompts or ``ceiling`` (a size an out-of-memory error has halved to), never fewer than 1."""
    if given is not None:
        rows = given
    elif free_bytes is None:
        rows = CPU_ROWS
    else:
        rows = int(free_bytes * HEADROOM) // max(1, bytes_per_row)
    if ceiling is not None:
        rows = min(rows, ceiling)
    return max(1, min(rows, prompts))


def in_batches(items: Sequence[Item], size: int, run: Callable[[Sequence[Item]], None],
               out_of_memory: type[BaseException], free: Callable[[], None] = lambda: None) -> int:
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
