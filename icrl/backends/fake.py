"""A deterministic fake backend, for tests and benchmarks only: no model, no tokenizer files.

``--backend fake`` runs the whole harness (records, resume, extension, sweeps in lock-step)
in milliseconds, so the logic around the model can be tested fast and benchmarked without
the model's cost. What it computes:

- ``render``: a fixed chat format, ``<|role|>\\ncontent<|end|>\\n`` per message, then
  ``<|assistant|>\\n`` and the prediction prefix.
- ``count_tokens``: words and single punctuation characters (regex ``\\w+|[^\\w\\s]``), so
  the automatic context size (``--max_context_examples`` omitted) is computable.
- ``predict``: one of ``labels`` per prompt, a pure function of (prompt, labels, seed) through
  SHA-256 (never Python's salted ``hash()``): the same on every machine and in every process.
  At temperature 0 (greedy) the seed is left out, as a real model's greedy choice ignores it.
- ``generate`` (``--reasoning``): words of the prompt's last user message picked by SHA-256 of
  (prompt, seed, position), "Answer:"-free, as many as a hash of the prompt says up to the
  budget: a pure function, like ``predict``.
- ``max_model_len``: ``--max_model_len``, default 4096 tokens.

It counts its calls (``calls``: predict() calls, a lock-step ``Call`` counting as one;
``prompts``: prompts predicted). For tests of interruption, the environment variable
``ICRL_FAKE_INTERRUPT_AT_CALL=N`` makes the N-th call (0-based, counted per loaded backend)
raise KeyboardInterrupt before it predicts anything, like Ctrl-C during that model call, and
``ICRL_FAKE_DELAY_S=X`` makes every call take X seconds more (a run slow enough to signal or
kill mid-run; a model's latency in a benchmark).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from typing import Any, Callable, Optional, Sequence

from . import Call, ChatBackend, Generated, Message, check_prompt_lengths
from .frame import ReasoningFrame

DEFAULT_MAX_MODEL_LEN = 4096
INTERRUPT_ENV = "ICRL_FAKE_INTERRUPT_AT_CALL"
DELAY_ENV = "ICRL_FAKE_DELAY_S"
_TOKEN = re.compile(r"\w+|[^\w\s]")


class FakeChat:
    """The fake's "tokenizer and chat template" (what the context-size search reads)."""

    supports_system_role = True
    eot_token = "<|end|>"
    published_tokenization = False

    def __init__(self, max_model_len: int = DEFAULT_MAX_MODEL_LEN):
        self.max_model_len = max_model_len

    def render(self, messages: Sequence[Message], prefix: str) -> str:
        body = "".join(f"<|{m['role']}|>\n{m['content']}{self.eot_token}\n" for m in messages)
        return f"{body}<|assistant|>\n{prefix}"

    def tokens(self, text: str) -> list[str]:
        return _TOKEN.findall(text)

    thinking = thinks = False

    def reasoning_frame(self, messages: Sequence[Message], prefix: str) -> ReasoningFrame:
        return ReasoningFrame(self.render(messages, ""), prefix, "\n", prefix)

    def count_tokens(self, text: str) -> int:
        return len(self.tokens(text))


def fake_label(prompt: str, labels: Sequence[str], seed: Optional[int]) -> str:
    """The label the fake predicts: SHA-256 of (seed, labels, prompt) picks one of ``labels``."""
    if not labels:
        raise ValueError("predict needs at least one label")
    key = "\x1f".join(["" if seed is None else str(seed), "\x1e".join(labels), prompt])
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return labels[int.from_bytes(digest[:8], "big") % len(labels)]


class FakeBackend(ChatBackend):
    """See the module docstring. Its one option: max_model_len."""

    name = "fake"
    local_model = False  # no model: its name is a label (icrl.backends)
    chat: FakeChat

    @classmethod
    def offline_chat(cls, model_name: str, *, max_model_len: Optional[int] = None, **_: Any) -> FakeChat:
        """Its "tokenizer" before it loads (``icrl.backends.offline_chat``): the same FakeChat."""
        return FakeChat(max_model_len or DEFAULT_MAX_MODEL_LEN)

    def __init__(self, model_name: str, *, max_model_len: Optional[int] = None) -> None:
        super().__init__(model_name, FakeChat(max_model_len or DEFAULT_MAX_MODEL_LEN))
        self.calls = 0
        self.prompts = 0
        interrupt = os.environ.get(INTERRUPT_ENV)
        self.interrupt_at = int(interrupt) if interrupt not in (None, "") else None
        self.delay_s = float(os.environ.get(DELAY_ENV) or 0.0)

    def predict(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                progress: Optional[Callable[[int], None]] = None) -> list[str]:
        if self.interrupt_at is not None and self.calls == self.interrupt_at:
            self.calls += 1
            raise KeyboardInterrupt(f"{INTERRUPT_ENV}={self.interrupt_at}")
        self.calls += 1
        if self.delay_s > 0:
            time.sleep(self.delay_s)
        if not prompts:
            return []
        labels = list(labels)
        answer = max(self.chat.count_tokens(f" {label}") for label in labels) + 1
        check_prompt_lengths([self.chat.tokens(p) for p in prompts], answer, self.max_model_len)
        key = seed if temperature > 0 else None
        out = [fake_label(p, labels, key) for p in prompts]
        self.prompts += len(prompts)
        if progress is not None:
            progress(len(prompts))
        return out

    def predict_calls(self, calls: Sequence[Call]) -> list[list[str]]:
        return [self.predict(c.prompts, c.labels, c.temperature, c.seed) for c in calls]

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> list[Generated]:
        """Reasoning text (see the module docstring); counted as a model call."""
        self.predict([], [], temperature, seed)  # the interruption and delay hooks count it as a call
        out = []
        for i, prompt in enumerate(prompts):
            last_user = prompt.rsplit("<|user|>\n", 1)[-1].split(FakeChat.eot_token, 1)[0]
            words = [w for w in _TOKEN.findall(last_user) if w.isalnum()] or ["thinking"]
            digest = hashlib.sha256(f"{seed if temperature > 0 else ''}\x1f{i}\x1f{prompt}".encode()).digest()
            n = 1 + digest[0] % max(1, max_tokens)
            picked = [words[digest[1 + k % 31] % len(words)] for k in range(n)]
            text = " ".join(picked)
            for marker in stop:
                text = text.split(marker, 1)[0]
            out.append(Generated(text, n))
        return out
