"""The context size of a run, as the published runner resolves it, with its per-model cache.

The automatic size (no --max_context_examples) is searched in the window less what the acting
model may write or be shown beyond its context episodes (``acting_budgets``: --reasoning, and
the budget of a strategy's generating call whose text every later prompt shows); with none of
these (every published run) it is the published search in the whole window."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from ..backends import offline_chat
from ..config import RunConfig, RunSpec, given
from ..errors import UsageError
from ..records import max_context_path, read_json, remove_leftovers, write_json_atomic
from ..method.agents import is_learner
from ..method.strategies.base import STRATEGIES
from .counted_window import check_counted_window
from .data import RunData

if TYPE_CHECKING:
    from .window import Chat

log = logging.getLogger("icrl")


def resolve_max_examples(config: RunConfig, data: RunData, backend: Any) -> int:
    """--max_context_examples, or when omitted the published search's ``left + 1`` for this
    model, task, mode (ICRL or ICL system prompt) and window, cached per model and task
    under the key ``<icrl|icl>@<window>``. Either way the exemplars are then subtracted
    (published: ``max(0, n - exemplars)``; here no room left is an error). An explicit 0
    (zero-shot) stays 0."""
    s = config.spec
    if s.max_context_examples == 0:
        check_counted_window(config, data, backend, 0)  # an API's window: the longest input must fit it
        return 0
    fit = s.max_context_examples if s.max_context_examples is not None else automatic_size(config, data, backend)
    if data.exemplars:
        fit -= len(data.exemplars)
        if fit < 1:
            raise UsageError(f"no room for context episodes: {len(data.exemplars)} exemplars fill the "
                             f"{fit + len(data.exemplars)} context examples (the published runner subtracts "
                             f"them); lower --exemplars_per_label or raise --max_context_examples")
    if s.max_context_examples is not None:
        check_counted_window(config, data, backend, fit)  # an API's window: a context of that size must fit it
    return fit


def acting_budgets(spec: RunSpec) -> dict[str, int]:
    """What the acting model may write (--reasoning) or be shown (the text of a strategy's
    generating call, e.g. a reflection's guide: its whole budget) in a prompt beyond its
    context episodes, as {flag: tokens}, the flags that are set only."""
    name = spec.context_strategy_name
    strategy = STRATEGIES.get(name).cls if name and not is_learner(spec.agent) and name in STRATEGIES \
        and spec.max_context_examples != 0 else None
    shown = {f"--{c.budget}": getattr(spec, c.budget) for c in getattr(strategy, "calls", ()) if c.generates}
    return {flag: value for flag, value in {"--reasoning": spec.reasoning, **shown}.items() if value}


def search_window(spec: RunSpec, max_model_len: int) -> int:
    """The window the automatic size is searched in: the model's, less ``acting_budgets``."""
    budgets = acting_budgets(spec)
    window = max_model_len - sum(budgets.values())
    if window < 1:
        given = ", ".join(f"{flag} {value}" for flag, value in budgets.items())
        raise UsageError(f"{given}: more than the model's window of {max_model_len} tokens, leaving no room for a "
                         f"context; lower {' and '.join(budgets)}")
    return window


def tokenizer_of(config: RunConfig) -> Optional[Chat]:
    """The run's model tokenizer and chat template without its weights (loads in seconds), with
    the window --max_model_len gives; None where there is none to load here (a hosted model)."""
    s = config.spec
    try:
        return offline_chat(s.backend, s.model_name, hf_token=config.secrets.hf_token, max_model_len=s.max_model_len,
                            eot_token=s.eot_token, rope_scaling=s.rope_scaling)
    except UsageError:
        return None  # the backend says what is wrong with the model when it loads


def check_window(config: RunConfig, data: RunData) -> None:
    """With --max_model_len given, one input with no context episode (the longest, with the
    system prompt and the exemplars) and its longest answer must fit it: else one line naming
    the flag, from the tokenizer alone, before the model loads (no context size could help)."""
    s = config.spec
    if s.max_model_len is None or s.max_context_examples == 0 and not data.test:
        return
    chat = tokenizer_of(config)
    if chat is None:
        return
    from ..method.prompts import build_messages

    task = data.task
    inputs = [task.prompt(e) for e in data.test + data.train]
    longest = max(inputs, key=chat.count_tokens)
    mode = "zero_shot" if s.max_context_examples == 0 else ("icrl" if s.icrl else "icl")
    messages, prefix = build_messages(task, [], longest, mode, exemplars=data.exemplar_pairs,
                                      supports_system_role=chat.supports_system_role)
    tokens = chat.count_tokens(chat.render(messages, prefix))
    answer = max(chat.count_tokens(f" {label}") for label in task.labels) + 1
    if tokens + answer > s.max_model_len:
        raise UsageError(f"--max_model_len {s.max_model_len}: too small, the longest input with no context episode "
                         f"already needs {tokens + answer} tokens (prompt and answer); give the model's window in "
                         f"tokens (e.g. 8192) or leave it out")


def automatic_size(config: RunConfig, data: RunData, backend: Any) -> int:
    """The published search's size for this run: read from the per-model cache (as ``cached``
    reads it), else searched (``searched_size``) and written to it. ``backend``: the loaded
    model, whose window (``max_model_len``) and ``chat`` (a ``Chat``) the search reads."""
    s = config.spec
    path = max_context_path(config.options.output_dir, s.model_name, given(s.task_name, "task_name"))
    window = search_window(s, backend.max_model_len)
    remove_leftovers(path.parent, [path.name], older_than_s=3600)
    try:
        sizes = read_sizes(path)
    except (OSError, ValueError) as exc:
        log.warning("ignoring the unreadable cache %s (%s); finding the size again", path, exc)
        sizes = {}
    if sizes is None:  # an older format (the largest fitting n, one fewer): not reused
        log.info("replacing the old-format cache %s (it held one fewer episode)", path)
        sizes = {}
    from .window import cached_size

    fit, keys = cached_size(sizes, given(s.icrl, "icrl"), window, s.published_tokenization)
    if fit is not None:
        if keys[0] not in sizes:  # --published_quirks: the first run's size, shared from now on
            write_json_atomic(path, {"sizes": dict(sorted({**sizes, **dict.fromkeys(keys, fit)}.items()))})
        return fit

    log.info("finding how many episodes fit %d tokens (%s; cached in %s)", window, keys[0], path)
    fit = searched_size(config, data, backend.chat, window)
    sizes.update(dict.fromkeys(keys, fit))
    write_json_atomic(path, {"sizes": dict(sorted(sizes.items()))})
    return fit


def cached(config: RunConfig, window: int) -> Optional[int]:
    """The size the per-model cache holds for this run's model, task, mode and window
    (``run.window.cached_size``), or None; read only (an unreadable or old cache holds none).
    What ``automatic_size`` reads, for a caller that must not write (the sweep's estimate)."""
    from .window import cached_size

    s = config.spec
    try:
        sizes = read_sizes(max_context_path(config.options.output_dir, s.model_name, given(s.task_name, "task_name")))
    except (OSError, ValueError):
        sizes = {}
    return cached_size(sizes or {}, given(s.icrl, "icrl"), window, s.published_tokenization)[0]


def read_sizes(path: Path) -> Optional[dict[str, int]]:
    """The sizes a cache file holds (``{"sizes": {key: n}}``, each n an int above 0; others are
    left out): {} with no file, None for the older format (no "sizes"); ValueError when it is
    not a cache record."""
    record = read_json(path) if path.is_file() else None
    if record is None:
        return {}
    if not isinstance(record, dict):
        raise ValueError("not a cache record")
    if "sizes" not in record:
        return None
    if not isinstance(record["sizes"], dict):
        raise ValueError("not a cache record")
    return {k: v for k, v in record["sizes"].items() if isinstance(v, int) and not isinstance(v, bool) and v > 0}


def searched_size(config: RunConfig, data: RunData, chat: Chat, window: int) -> int:
    """The published search's size (``run.window.find_max_examples``) in ``window`` tokens; a
    window too small for any context is one line naming --max_model_len when it was given."""
    from .window import find_max_examples

    try:
        return find_max_examples(chat, data.task, window, icrl=given(config.spec.icrl, "icrl"))
    except UsageError as exc:
        if config.spec.max_model_len is None:
            raise
        raise UsageError(f"--max_model_len {config.spec.max_model_len}: {exc}; give the model's window in tokens "
                         f"(e.g. 8192) or leave it out") from None
