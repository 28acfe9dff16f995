"""Token ids of a run's prompts and their longest common prefixes (run_count_tokens.py's
counter, ``icrl.analysis.counting``, and the cost estimate use them).

Each prefix is found in a radix tree (compressed trie) of the earlier prompts' token ids:
at most two nodes per prompt, and an edge keeps only the tokens that no earlier prompt
had at that place, so memory grows with the uncached tokens, not with the prompt tokens.
The published script keeps token strings (``tokenizer.tokenize``) in a plain trie; a
vocabulary's strings and ids correspond one to one, so the prefix lengths are the same.

Incremental tokenization. A Hugging Face fast tokenizer first cuts the text at its added
tokens (``<|im_start|>``, ``<|eot_id|>`` ...) and then normalizes, pre-tokenizes and
encodes each piece in between on its own. So when the text is cut just before added tokens
that match as-is and take in nothing before them (not normalized, no lstrip or single_word),
the ids of the whole text are the ids of the segments put end to end. Chat prompts are mostly the same segments over
and over (the system prompt, each episode's messages), so each distinct segment is encoded
once and cached. This is checked, not assumed: the first prompts of every run and a sample
of the others are also encoded whole, and on any difference the run is counted again with
whole-prompt tokenization (``--full_tokenization`` forces that).
"""

from __future__ import annotations

import re
from array import array
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

if TYPE_CHECKING:
    from ..backends.chat import ChatTokenizer
    from ..backends.fake import FakeChat


# -- tokenization -------------------------------------------------------------------------------
class SegmentEncoder:
    """Token ids of rendered prompts, segment by segment with a cache (see the module docstring).

    ``incremental`` is False when the tokenizer gives no safe cut points (a slow tokenizer, or
    no added token that matches as-is): then every prompt is encoded whole.
    """

    def __init__(self, chat: ChatTokenizer, incremental: bool = True) -> None:
        self.chat = chat
        self.tokenizer = chat.tokenizer
        cut: list[str] = []
        if getattr(self.tokenizer, "is_fast", False):
            for token in self.tokenizer.added_tokens_decoder.values():
                # A cut before the token is safe unless the token takes in text before it
                # (lstrip, single_word) or is matched after normalization. rstrip is safe: the
                # whitespace it strips lies in its own segment.
                if not (token.lstrip or token.single_word or token.normalized) and token.content:
                    cut.append(token.content)
        # Any subset of safe cut points is safe: keep the tokens the chat template writes (a
        # regex over hundreds of reserved tokens would be slow to scan every prompt with).
        written = _template_sample(chat)
        if written is not None:
            cut = [t for t in cut if t in written]
        self.incremental = incremental and bool(cut)
        # Cut before each cut token; longer tokens first so that a token that is a prefix of
        # another never cuts it in two.
        alternatives = "|".join(re.escape(t) for t in sorted(set(cut), key=len, reverse=True))
        self._cut = re.compile(f"(?=(?:{alternatives}))") if cut else None
        self._cache: dict[str, bytes] = {}
        self._backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if self._backend is None:
            self.incremental = False

    def segments(self, text: str) -> list[str]:
        """The text cut before each safe cut token (none: the text whole)."""
        pieces = self._cut.split(text) if self._cut is not None else [text]
        return [s for s in pieces if s]

    def encode_full(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Whole-text ids, as ChatTokenizer.encode gives them."""
        ids = self.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
        return [np.asarray(x, dtype=np.int32) for x in ids]

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        backend = self._backend
        if not self.incremental or backend is None:
            return self.encode_full(texts)
        cache = self._cache
        pieces = [self.segments(text) for text in texts]
        missing = list({s for segs in pieces for s in segs if s not in cache})
        if missing:
            # The Rust tokenizer directly: the same ids as tokenizer(...) without building a
            # BatchEncoding (whole-prompt checks go through tokenizer(...)).
            for segment, encoding in zip(missing, backend.encode_batch(missing, add_special_tokens=False)):
                cache[segment] = array("i", encoding.ids).tobytes()
        return [np.frombuffer(b"".join([cache[s] for s in segs]), dtype=np.int32) for segs in pieces]

    @property
    def cached_segments(self) -> int:
        return len(self._cache)


def _template_sample(chat: ChatTokenizer) -> Optional[str]:
    """A short conversation in the model's chat template (None if it cannot be rendered)."""
    role = "system" if chat.supports_system_role else "user"
    messages = [{"role": role, "content": "s"}, *([{"role": "user", "content": "u"}] if role == "system" else []),
                {"role": "assistant", "content": "a"}, {"role": "user", "content": "u"}]
    try:
        return chat.render(messages, "")
    except Exception:  # noqa: BLE001 - any template error: use every safe token
        return None


# -- longest common prefix with any earlier prompt ----------------------------------------------
class PrefixTree:
    """Radix tree of token sequences: ``insert`` returns the longest common prefix of the new
    sequence with any sequence inserted before (0 for the first), then adds it.

    A node is a dict {first token of an edge: [edge tokens (numpy int32), child node]}.
    """

    def __init__(self) -> None:
        self.root: dict[int, list[Any]] = {}  # a node: first token -> [edge tokens, child node]
        self.nodes = 1

    def insert(self, tokens: np.ndarray) -> int:
        node, i, n = self.root, 0, len(tokens)
        while i < n:
            edge = node.get(int(tokens[i]))
            if edge is None:
                node[int(tokens[i])] = [tokens[i:].copy(), {}]
                self.nodes += 1
                return i
            label, child = edge
            m = min(len(label), n - i)
            diff = np.flatnonzero(label[1:m] != tokens[i + 1:i + m])
            k = 1 + int(diff[0]) if len(diff) else m
            if k == len(label):
                i += k
                node = child
                continue
            if i + k == n:  # the new sequence is a prefix of an earlier one
                return n
            # split the edge at k; the new sequence branches off there
            edge[0], edge[1] = label[:k], {int(label[k]): [label[k:], child],
                                           int(tokens[i + k]): [tokens[i + k:].copy(), {}]}
            self.nodes += 2
            return i + k
        return n


def naive_uncached(sequences: Sequence[Sequence[int]]) -> list[int]:
    """The same numbers by brute force, O(n^2): for tests."""
    out = []
    for j, seq in enumerate(sequences):
        best = 0
        for earlier in sequences[:j]:
            k = 0
            while k < min(len(seq), len(earlier)) and seq[k] == earlier[k]:
                k += 1
            best = max(best, k)
        out.append(len(seq) - best)
    return out


class FakeEncoder:
    """The fake backend's tokens (words and punctuation) as ids: the counter's encoder for
    --backend fake, whose "tokenizer" has no ids (``chat``: its FakeChat)."""

    incremental = False

    def __init__(self, chat: FakeChat) -> None:
        self.chat = chat
        self.ids: dict[str, int] = {}
        self.cached_segments = 0

    def encode(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [np.asarray([self.ids.setdefault(t, len(self.ids)) for t in self.chat.tokens(text)], dtype=np.int32)
                for text in texts]

    encode_full = encode
