"""How many ICRL episodes fit in a context window (tokenizer and chat template only).

The worst case decides. Every prompt of the task (train and test splits) is token-counted
once and ranked, longest first. The worst episode label is the one whose episode text is
longest in tokens: its assistant message (``<prefix> <label>``) plus the longer of its two
feedback messages (positive ``'<label>' is the correct answer! Good job!`` or negative
``The answer '<label>' is wrong! You can do better!``); the longer feedback is then used.

The ICRL prompt for ``n`` episodes is rendered as the runner renders its context: system
prompt, the ``n`` longest prompts as episodes (each predicted as the worst label, with the
longer feedback), the generation prompt and the prediction prefix. As published, no new
query is rendered: the 5% margin stands in for it (and for the model's answer). The answer
is the largest ``n`` whose rendering takes at most 95% of the window.

The published search (lil-lab/icrl, ``find_maximum_number_examples``) returns one more than
the largest fitting ``n`` (its binary search's ``left + 1``), and its runner uses that number
as the context size. So do we: ``find_max_examples`` and ``MaxExamplesResult.published_convention``
give ``n + 1``; ``MaxExamplesResult.max_examples`` (``--largest_fitting`` in the script) is the
largest ``n`` that really fits.

With supervised ICL (``icrl=False``) the published search renders the same worst-case
episodes (prediction and feedback messages) under the ICL system prompt, its model being
loaded in ICL mode; ``search_max_examples(..., icrl=False)`` does the same.

The search guesses the answer from the renderings with 0 and 1 episode and the prompt
counts (token-counted once each), gallops from the guess and bisects: O(log n) full
renderings at most, usually a handful.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence

from icrl.method.episode import Episode
from icrl.errors import UsageError
from icrl.method.prompts import SYSTEM_PROMPT_ICL, SYSTEM_PROMPT_ICRL, build_messages, feedback_message
from icrl.tasks import Task

WINDOW_FRACTION = 0.95


class Chat(Protocol):
    """What the search reads of a model's tokenizer and chat template (a backend's ``chat``,
    ``icrl.backends.offline_chat``)."""

    @property
    def max_model_len(self) -> int: ...

    @property
    def supports_system_role(self) -> bool: ...

    def render(self, messages: Sequence[dict[str, Any]], prefix: str) -> str: ...

    def count_tokens(self, text: str) -> int: ...


@dataclass(frozen=True)
class MaxExamplesResult:
    """The answer and the worst case behind it."""

    max_examples: int              # largest n whose worst-case rendering fits the bound
    window: int                    # the window in tokens
    bound: float                   # WINDOW_FRACTION * window: a rendering fits when tokens <= bound
    tokens: int                    # tokens of the rendering with max_examples episodes
    tokens_next: Optional[int]     # tokens with max_examples + 1 episodes (None when capped)
    capped: bool                   # every prompt of the task fits: n cannot grow further
    longest_label: str
    longest_feedback: int          # 1 (positive) or 0 (negative): the longer message for the label
    feedback_text: str
    episode_label_tokens: int      # tokens of the assistant message plus the feedback message
    longest_prompt: str
    longest_prompt_tokens: int
    num_prompts: int
    renders: int                   # full prompts rendered by the search

    @property
    def n(self) -> int:
        """Alias of ``max_examples``."""
        return self.max_examples

    @property
    def published_convention(self) -> int:
        """The number the published script prints: one more than the largest fitting n."""
        return self.max_examples + 1


def _count_many(chat: Any, texts: Sequence[str]) -> List[int]:
    """Token counts of many texts in one batch call (same ids as chat.count_tokens); a counter
    with ``count_many`` (an API's token counter: its requests in flight together) counts them.
    ``chat``: a ``Chat``, asked for the ``count_many`` or the Hugging Face ``tokenizer`` it may have."""
    if not texts:
        return []
    many = getattr(chat, "count_many", None)
    if many is not None:
        return list(many(list(texts)))
    try:
        ids = chat.tokenizer(list(texts), add_special_tokens=False)["input_ids"]
    except Exception:  # noqa: BLE001 - a tokenizer without batch support: count one at a time
        return [chat.count_tokens(text) for text in texts]
    return [len(row) for row in ids]


def _worst_label(chat: Chat, task: Task) -> tuple[str, int, str, int]:
    """(label, feedback, feedback text, tokens) maximising assistant + feedback message tokens.

    Ties go to the earlier label and to the negative feedback (as published)."""
    prefix = task.prediction_prefix
    labels = list(task.labels)
    texts = []
    for label in labels:
        texts += [f"{prefix} {label}", feedback_message(label, 0), feedback_message(label, 1)]
    counts = _count_many(chat, texts)
    best: Optional[tuple[str, int, str, int]] = None
    for i, label in enumerate(labels):
        answer, negative, positive = counts[3 * i: 3 * i + 3]
        feedback = 1 if positive > negative else 0
        total = answer + max(negative, positive)
        if best is None or total > best[3]:
            best = (label, feedback, feedback_message(label, feedback), total)
    assert best is not None, "a task has labels"
    return best


def search_max_examples(chat: Chat, task: Task, max_window_tokens: Optional[int] = None, *,
                        icrl: bool = True) -> MaxExamplesResult:
    """The worst-case search (see module docstring) with its details.

    ``icrl=False`` renders under the supervised ICL system prompt, as the published search
    does for a ``--no-icrl`` run.

    ``max_window_tokens`` defaults to the model's maximum length (``chat.max_model_len``).
    Raises UsageError for a non-positive window, a task without prompts or labels, or a
    window too small for the prompt with no episodes.
    """
    window = chat.max_model_len if max_window_tokens is None else max_window_tokens
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise UsageError(f"the window must be a positive number of tokens, got {window!r}")
    bound = WINDOW_FRACTION * window

    prompts = task.all_prompts()
    if not prompts or not task.labels:
        raise UsageError(f"task {task.name!r} has no prompts or no labels")
    unique = list(dict.fromkeys(prompts))
    unique_counts = dict(zip(unique, _count_many(chat, unique)))
    counts = [unique_counts[p] for p in prompts]
    order = sorted(range(len(prompts)), key=lambda i: (-counts[i], i))
    ranked = [prompts[i] for i in order]
    ranked_counts = [counts[i] for i in order]

    label, feedback, feedback_text, episode_tokens = _worst_label(chat, task)
    rendered: Dict[int, int] = {}

    def tokens_for(n: int) -> int:
        if n not in rendered:
            context = [Episode(p, label, feedback, label, feedback) for p in ranked[:n]]
            messages, prefix = context_messages(task, context, chat.supports_system_role, icrl=icrl)
            rendered[n] = chat.count_tokens(chat.render(messages, prefix))
        return rendered[n]

    hi = len(ranked)
    if tokens_for(0) > bound:
        raise UsageError(
            f"a window of {window} tokens is too small: with no episodes the prompt already takes "
            f"{tokens_for(0)} tokens (bound {bound:g}, {WINDOW_FRACTION:.0%} of the window)")
    guess = _estimate(tokens_for, ranked_counts, bound, hi)
    n = _largest_fitting(lambda k: tokens_for(k) <= bound, hi, guess)
    capped = n == hi
    return MaxExamplesResult(
        max_examples=n, window=window, bound=bound, tokens=tokens_for(n),
        tokens_next=None if capped else tokens_for(n + 1), capped=capped,
        longest_label=label, longest_feedback=feedback, feedback_text=feedback_text,
        episode_label_tokens=episode_tokens, longest_prompt=ranked[0],
        longest_prompt_tokens=ranked_counts[0], num_prompts=len(ranked), renders=len(rendered))


def context_messages(task: Task, context: Sequence[Episode], supports_system_role: bool, *,
                     icrl: bool = True) -> tuple[list[dict[str, Any]], str]:
    """The ICRL messages of ``context`` alone, with no new query (as the published search renders).

    ``build_messages`` always ends with the new input; rendering an empty one and taking it
    back out leaves the context exactly as the runner shows it. ``icrl=False``: the same
    episodes under the ICL system prompt (the published search with a model loaded for ICL)."""
    messages, prefix = build_messages(task, context, "", "icrl", supports_system_role=supports_system_role)
    if not icrl:
        system = messages[0]["content"]
        assert system.startswith(SYSTEM_PROMPT_ICRL)
        messages[0] = {**messages[0], "content": SYSTEM_PROMPT_ICL + system[len(SYSTEM_PROMPT_ICRL):]}
    last = messages[-1]
    if last["content"] == "":
        messages.pop()  # the query opened a user message of its own
    else:
        messages[-1] = {**last, "content": last["content"][:-len("\n\n")]}  # it joined a user message
    return messages, prefix


def _estimate(tokens_for: Callable[[int], int], ranked_counts: Sequence[int], bound: float, hi: int) -> int:
    """A guess at the answer from an additive model fitted on the renderings with 0 and 1 episode.

    tokens(n) ~ tokens(0) + sum_{i<n} (q[i] + e), where q are the ranked prompt counts and e
    the tokens an episode adds besides its prompt (template, label, feedback).
    Tokenization at message joins can make it drift a little; the search corrects it."""
    if hi < 1:
        return 0
    extra = tokens_for(1) - tokens_for(0) - ranked_counts[0]
    total, guess = tokens_for(0), 0
    for n in range(hi):
        total += ranked_counts[n] + extra
        if total > bound:
            break
        guess = n + 1
    return guess


def _largest_fitting(fits: Callable[[int], bool], hi: int, guess: int = 0) -> int:
    """Largest k in [0, hi] with fits(k), given fits(0) and fits monotone (true, then false).

    Gallops away from ``guess`` (steps 1, 2, 4, ...) to bracket the answer, then bisects:
    O(log |answer - guess|) calls."""
    guess = min(max(guess, 0), hi)
    if guess == 0 or fits(guess):  # fits(0) is given
        lo, step = guess, 1
        while lo + step <= hi and fits(lo + step):
            lo, step = lo + step, step * 2
        top = min(lo + step, hi + 1)  # fits(top) is False, or top == hi + 1 (out of range)
    else:
        top, step = guess, 1
        while top - step > 0 and not fits(top - step):
            top, step = top - step, step * 2
        lo = max(top - step, 0)
    while top - lo > 1:
        mid = (lo + top) // 2
        if fits(mid):
            lo = mid
        else:
            top = mid
    return lo


def find_max_examples(chat: Chat, task: Task, max_window_tokens: Optional[int] = None, *, icrl: bool = True) -> int:
    """The context size the published runner uses when --max_context_examples is omitted:
    one more than the largest number of episodes whose worst-case prompt fits 95% of the
    window (the published search's ``left + 1``).

    ``max_window_tokens`` defaults to ``chat.max_model_len``; ``icrl=False`` searches under
    the ICL system prompt, as the published search does for ``--no-icrl``."""
    return search_max_examples(chat, task, max_window_tokens, icrl=icrl).published_convention


def cached_size(sizes: dict[str, int], icrl: bool, window: int,
                published_quirks: bool = False) -> tuple[Optional[int], list[str]]:
    """The automatic size cached for a model and task (``sizes``: the cache file's entries), and
    the keys a newly found size is stored under.

    By default sizes are kept per mode and window (``icrl@4096``, ``icl@4096``): an ICL run gets
    the size searched under the ICL system prompt whatever ran before it. The published cache is
    keyed by model and task only, so its first run's size serves every later run, ICRL or ICL
    (clinic150 at 4096 tokens with Llama-3.1: an ICL run after an ICRL run uses the ICRL run's
    60, alone it gets 61). ``published_quirks`` reproduces that: one shared entry per window
    (``published@4096``), filled by the first run from its own mode's entry or search."""
    own = f"{'icrl' if icrl else 'icl'}@{window}"
    if not published_quirks:
        return sizes.get(own), [own]
    shared = f"published@{window}"
    if shared in sizes:
        return sizes[shared], [shared]
    if own in sizes:
        return sizes[own], [shared]
    return None, [own, shared]
