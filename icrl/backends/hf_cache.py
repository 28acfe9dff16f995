"""The transformers backend's KV caches and its CPU attention, built on transformers' own classes
(imported on first use: transformers is imported only when a backend is loaded).

- ``row_buffers(prefix_cache, rows, room)``: per layer, buffers holding ``rows`` copies of a
  stored batch-1 prefix and ``room`` free positions after it;
- ``batch_cache(buffers, batch, shared)``: a cache over such buffers that writes new tokens in
  place (no step copies the prefix again);
- ``packed_cache(caches, lengths, room)``: one row per run, each after its own stored prefix;
- ``register_cpu_attention()``: transformers' ``sdpa`` without the copy of every key/value head
  per query head that a mask makes it do (the CPU kernel handles grouped-query heads itself).
"""

from __future__ import annotations

import functools
from typing import Any, Optional, Sequence

# Per layer, (keys, values) buffers of the rows (``row_buffers``).
Buffers = list[tuple[Any, ...]]


def row_buffers(prefix_cache: Any, rows: int, room: int) -> Buffers:
    """Per layer, key and value buffers of `rows` copies of the stored prefix followed by
    `room` free positions (the stored batch-1 cache is left untouched)."""
    buffers = []
    for layer in prefix_cache.layers:
        pair = []
        for states in (layer.keys, layer.values):
            _, heads, length, dim = states.shape
            buffer = states.new_empty((rows, heads, length + room, dim))
            buffer[:, :, :length] = states
            pair.append(buffer)
        buffers.append(tuple(pair))
    return buffers

def batch_cache(buffers: Buffers, batch: int, shared: int) -> Any:
    """A cache for `batch` rows that starts with the stored prefix and writes new tokens in
    place into `buffers`: unlike concatenation, no step copies the prefix again."""
    from transformers.cache_utils import Cache

    layer = buffer_layer_class()
    return Cache(layers=[layer(keys[:batch], values[:batch], shared) for keys, values in buffers])

def packed_cache(caches: Sequence[Any], lengths: Sequence[int], room: int) -> Any:
    """A cache whose row r holds the first ``lengths[r]`` positions of ``caches[r]`` (a run's
    stored prefix; None when 0), zeros up to the longest, then ``room`` free positions; the
    zeros are masked out. None when no row has a prefix."""
    from transformers.cache_utils import Cache

    longest = max(lengths)
    if longest == 0:
        return None
    source = next(c for c in caches if c is not None)
    layers = []
    for index, template in enumerate(source.layers):
        pair = []
        for name in ("keys", "values"):
            states = getattr(template, name)
            _, heads, _, dim = states.shape
            buffer = states.new_zeros((len(caches), heads, longest + room, dim))
            for row, (cache, length) in enumerate(zip(caches, lengths)):
                if length:
                    buffer[row, :, :length] = getattr(cache.layers[index], name)[0, :, :length]
            pair.append(buffer)
        layers.append(buffer_layer_class()(pair[0], pair[1], longest))
    return Cache(layers=layers)


@functools.lru_cache(maxsize=None)
def buffer_layer_class() -> Any:
    """Defined on first use: transformers is imported only when a backend is loaded."""
    from transformers.cache_utils import DynamicLayer

    class BufferLayer(DynamicLayer):
        """A cache layer over preallocated key/value buffers (rows, heads, capacity, dim) whose
        first `length` positions are filled: `update` writes the new states after them."""

        def __init__(self, keys: Any, values: Any, length: int) -> None:
            super().__init__()
            self._buffers, self._length = (keys, values), length
            self.dtype, self.device = keys.dtype, keys.device
            self.keys, self.values = keys[:, :, :length], values[:, :, :length]
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            keys, values = self._buffers
            end = self._length + key_states.shape[-2]
            if end > keys.shape[-2]:
                raise RuntimeError(f"batch cache overflow: {end} > {keys.shape[-2]} positions")
            keys[:, :, self._length:end] = key_states
            values[:, :, self._length:end] = value_states
            self._length = end
            self.keys, self.values = keys[:, :, :end], values[:, :, :end]
            return self.keys, self.values

    return BufferLayer


CPU_ATTENTION = "icrl_sdpa_gqa"


@functools.lru_cache(maxsize=None)
def register_cpu_attention() -> str:
    """Register transformers' `sdpa` attention, except that with a mask the kernel handles
    grouped-query heads itself (enable_gqa).

    With a mask (padding, a shared prefix) transformers' `sdpa` copies every key/value head
    once per query head, because CUDA kernels would otherwise fall back to slow paths. On CPU
    that copy of the whole prefix, at every step, costs more than the attention itself, and
    the CPU kernel gives the same results without it.
    """
    import torch
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    def attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, dropout: float = 0.0,
                  scaling: Optional[float] = None, **kwargs: Any) -> Any:
        if (attention_mask is None or query.shape[2] == 1 or query.shape[1] == key.shape[1]
                or kwargs.get("position_bias") is not None or kwargs.get("softcap") is not None):
            return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout,
                                          scaling=scaling, **kwargs)
        if attention_mask.ndim == 4:
            attention_mask = attention_mask[:, :, :, :key.shape[-2]]
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(CPU_ATTENTION, attention)
    AttentionMaskInterface.register(CPU_ATTENTION, sdpa_mask)
    return CPU_ATTENTION
