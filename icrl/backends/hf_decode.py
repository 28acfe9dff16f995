"""Decoding on a prepared KV cache, for the transformers backend. ``forward(input_ids, mask,
positions, cache)`` is the backend's one model call (last-position logits and the cache):

- ``decode_rows``: a label per row, walking the row's label trie (constrained decoding);
- ``sample``: free text per row, a token per step, up to a stop string or ``max_tokens``.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from .chat import ChatTokenizer
from .constrained import LabelTrie, choose

# (input ids, attention mask, positions, KV cache) -> (last-position logits, the cache)
Forward = Callable[[np.ndarray, np.ndarray, np.ndarray, Any], tuple[np.ndarray, Any]]


def decode_rows(forward: Forward, suffixes: Sequence[Sequence[int]], shared: Sequence[int], tries: Sequence[LabelTrie],
                temperatures: Sequence[float], rngs: Sequence[np.random.Generator], cache: Any) -> list[str]:
    """Run left-padded suffixes, row r after its own prefix of ``shared[r]`` positions in
    ``cache`` (prefixes shorter than the longest are padded, masked), then walk each row's
    label trie.

    Tokens forced by the trie (one option) are queued and only fed to the model when a
    later step needs a real choice, so most labels cost one or two forward passes.
    """
    batch = len(suffixes)
    width = max(len(s) for s in suffixes)
    lengths = np.asarray(shared, dtype=np.int64)
    longest = int(lengths.max())
    input_ids = np.zeros((batch, width), dtype=np.int64)
    mask = np.zeros((batch, longest + width), dtype=np.int64)
    for row, s in enumerate(suffixes):
        mask[row, :lengths[row]] = 1
        input_ids[row, width - len(s):] = s
        mask[row, longest + width - len(s):] = 1
    position = lengths[:, None] + np.cumsum(mask[:, longest:], axis=1) - 1
    position = np.maximum(position, 0)
    next_pos = position[:, -1] + 1
    logits, cache = forward(input_ids, mask, position, cache)
    nodes = [trie.root for trie in tries]
    results: list[Optional[str]] = [None] * batch
    pending: list[tuple[np.ndarray, np.ndarray]] = []  # queued (tokens, mask) columns
    while any(r is None for r in results):
        options = [tries[i].options(nodes[i]) if results[i] is None else None for i in range(batch)]
        if pending and any(o is not None and len(o) > 1 for o in options):
            cols = np.stack([c[0] for c in pending], axis=1)
            cmask = np.stack([c[1] for c in pending], axis=1)
            pos = next_pos[:, None] + np.cumsum(cmask, axis=1) - 1
            mask = np.concatenate([mask, cmask], axis=1)
            logits, cache = forward(cols, mask, np.maximum(pos, 0), cache)
            next_pos = next_pos + cmask.sum(axis=1)
            pending = []
        col = np.zeros(batch, dtype=np.int64)
        col_mask = np.zeros(batch, dtype=np.int64)
        for i, option in enumerate(options):
            if option is None:
                continue
            token = option[0] if len(option) == 1 else choose(logits[i], option, temperatures[i], rngs[i])
            nodes[i], results[i] = tries[i].advance(nodes[i], token)
            col[i], col_mask[i] = token, 1
        pending.append((col, col_mask))
    return [label for label in results if label is not None]  # all found: the loop ends when none is None

def sample(forward: Forward, chat: ChatTokenizer, suffixes: Sequence[Sequence[int]], shared: int, max_tokens: int,
           temperature: float, rngs: Sequence[np.random.Generator], cache: Any,
           stop: Sequence[str]) -> list[tuple[str, int]]:
    """Sample free text after left-padded suffixes on the shared prefix, a token per step for
    every row still writing; (text up to the first stop string, tokens written) per row."""
    batch = len(suffixes)
    width = max(len(s) for s in suffixes)
    input_ids = np.zeros((batch, width), dtype=np.int64)
    mask = np.zeros((batch, shared + width), dtype=np.int64)
    mask[:, :shared] = 1
    for row, s in enumerate(suffixes):
        input_ids[row, width - len(s):] = s
        mask[row, shared + width - len(s):] = 1
    position = np.maximum(shared + np.cumsum(mask[:, shared:], axis=1) - 1, 0)
    next_pos = position[:, -1] + 1
    logits, cache = forward(input_ids, mask, position, cache)
    written: list[list[int]] = [[] for _ in range(batch)]
    texts = [""] * batch
    done = [False] * batch
    for _ in range(max_tokens):
        col = np.zeros(batch, dtype=np.int64)
        col_mask = np.zeros(batch, dtype=np.int64)
        for i in range(batch):
            if done[i]:
                continue
            token = sample_token(logits[i], temperature, rngs[i])
            if token == chat.eot_token_id:
                done[i] = True
                continue
            written[i].append(token)
            texts[i] = chat.decode(written[i])
            cut = min((texts[i].find(s) for s in stop if s and s in texts[i]), default=-1)
            if cut >= 0:
                texts[i], done[i] = texts[i][:cut], True
                continue
            col[i], col_mask[i] = token, 1
        if all(done) or not col_mask.any():
            break
        mask = np.concatenate([mask, col_mask[:, None]], axis=1)
        logits, cache = forward(col[:, None], mask, next_pos[:, None], cache)
        next_pos = next_pos + col_mask
    return [(texts[i], len(written[i])) for i in range(batch)]


def sample_token(logits: np.ndarray, temperature: float, rng: np.random.Generator) -> int:
    """One token from the whole vocabulary: the most likely at temperature 0 (one draw made all
    the same, so streams stay aligned), else by inverse CDF of softmax(logits / temperature)."""
    u = rng.random()
    scores = np.asarray(logits, dtype=np.float64)
    if temperature <= 0:
        return int(np.argmax(scores))
    z = scores / temperature
    z -= z.max()
    cdf = np.cumsum(np.exp(z))
    return int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(cdf) - 1))
