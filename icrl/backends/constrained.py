"""Constrained decoding over a fixed set of labels, independent of any model library.

The model may only write ` <label>` followed by its end-of-turn token. A token trie over the
labels gives, at each step, the allowed next tokens; the next token is drawn from the model's
distribution renormalised over those tokens (greedy at temperature 0). Randomness comes from
one numpy generator per prompt, so outputs do not depend on batching or caching.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np


@dataclass
class Node:
    children: dict[int, Node] = field(default_factory=dict)  # token id -> Node
    label: Optional[str] = None  # set when a whole label ends here


class LabelTrie:
    def __init__(self, labels: Sequence[str], token_ids: Sequence[Sequence[int]], eot_id: int):
        if len(set(labels)) != len(labels):
            raise ValueError("labels must be distinct")
        self.eot_id = eot_id
        self.root = Node()
        for label, ids in zip(labels, token_ids):
            if not ids:
                raise ValueError(f"label {label!r} has no tokens")
            node = self.root
            for token in ids:
                node = node.children.setdefault(int(token), Node())
            if node.label is not None:
                raise ValueError(f"labels {node.label!r} and {label!r} have the same tokens")
            node.label = label
        self.max_depth = max(len(ids) for ids in token_ids) + 1

    def options(self, node: Node) -> list[int]:
        """Allowed next tokens, sorted; the end-of-turn token where a label may end."""
        allowed = sorted(node.children)
        if node.label is not None:
            allowed.append(self.eot_id)
        return allowed

    def advance(self, node: Node, token: int) -> tuple[Node, Optional[str]]:
        """Follow `token`; returns (next node, finished label or None).

        A label whose node has no children is finished at once: its end-of-turn token is the
        only option, so it need not be computed.
        """
        if token == self.eot_id and node.label is not None:
            return node, node.label
        nxt = node.children[token]
        if nxt.label is not None and not nxt.children:
            return nxt, nxt.label
        return nxt, None


def choose(logits: np.ndarray, allowed: Sequence[int], temperature: float, rng: np.random.Generator) -> int:
    """Pick one of `allowed` from full-vocabulary `logits` (one row).

    Temperature 0: the allowed token with the highest logit (ties: the smallest id).
    Otherwise: sample from softmax(logits[allowed] / temperature) by inverse CDF.
    A generator draw is used at every choice, greedy or not, so streams stay aligned.
    """
    u = rng.random()
    scores = np.asarray(logits, dtype=np.float64)[list(allowed)]
    if temperature <= 0:
        # `allowed` ends with the end-of-turn token, whose id may be the smallest.
        return int(min(np.asarray(allowed)[scores == scores.max()]))
    z = scores / temperature
    z -= z.max()
    p = np.exp(z)
    cdf = np.cumsum(p / p.sum())
    return int(allowed[min(int(np.searchsorted(cdf, u, side="right")), len(allowed) - 1)])


def prompt_rngs(seed: int, count: int, stream: int = 0) -> list[np.random.Generator]:
    """One generator per prompt position: the same (seed, index) gives the same stream.
    ``stream`` 1: the reasoning's (free generation), apart from the label choice's."""
    if stream == 0:
        return [np.random.default_rng([int(seed) & 0x7FFFFFFFFFFFFFFF, i]) for i in range(count)]
    return [np.random.default_rng([int(seed) & 0x7FFFFFFFFFFFFFFF, i, stream]) for i in range(count)]
