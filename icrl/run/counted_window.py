"""A context the API's window cannot hold, refused before the run: for a backend whose tokens and
window are its API's (``count_many``: --backend gemini and anthropic), as ``size.check_window``
refuses from a local tokenizer.

Two prompts are rendered as the run renders them and counted by the API (two requests; each
text once per backend): the run's longest input (by characters) with no context episode, and,
with a context size given, a context of that many episodes of the run's shortest inputs (the
shortest label, the shorter feedback) before its shortest input. If either takes more tokens
than the window the API reports (or --max_model_len), no run of that size can fit: one line,
before anything is written. A context that fits these may still not fit with longer inputs:
the API then refuses that prompt in one line mid-run, the finished steps kept."""

from __future__ import annotations

from typing import Any, Sequence

from ..config import RunConfig
from ..errors import UsageError
from .data import RunData


def check_counted_window(config: RunConfig, data: RunData, backend: Any, size: int) -> None:
    """One line (UsageError) when a prompt of the run cannot fit the API's window (module docstring)."""
    count = getattr(backend, "count_many", None)
    if count is None:
        return
    try:
        window = int(backend.max_model_len)
    except UsageError:  # the API says no window and none was given: nothing to hold the run to
        return
    from ..method.episode import Episode
    from ..method.prompts import build_messages, feedback_message

    spec, task = config.spec, data.task
    inputs = sorted({task.prompt(example) for example in data.test + data.train}, key=lambda text: (len(text), text))
    mode = "zero_shot" if size == 0 else ("icrl" if spec.icrl else "icl")
    label = min(task.labels, key=len)
    feedback = min((0, 1), key=lambda f: len(feedback_message(label, f)))

    def prompt(context: Sequence[Episode], query: str) -> str:
        messages, prefix = build_messages(task, context, query, mode, exemplars=data.exemplar_pairs,
                                          supports_system_role=backend.supports_system_role)
        rendered: str = backend.render(messages, prefix)
        return rendered

    context = [Episode(text, label, feedback, label, feedback) for text in inputs[:size]]
    texts = [prompt([], inputs[-1])] + ([prompt(context, inputs[0])] if size else [])
    counted = count(texts)
    whose = "of --max_model_len" if spec.max_model_len else f"the API reports for {backend.api_model}"
    if counted[0] > window:
        fix = "raise --max_model_len" if spec.max_model_len else "use a model with a larger window"
        raise UsageError(f"the longest input with no context episode already takes {counted[0]} tokens, more than "
                         f"the window of {window} tokens {whose}; {fix}")
    if size and counted[1] > window:
        raise UsageError(f"--max_context_examples {spec.max_context_examples}: a context of {size} episodes of the "
                         f"task's shortest inputs already takes {counted[1]} tokens, more than the window of {window} "
                         f"tokens {whose}; lower --max_context_examples, or leave it out (the size that fits is then "
                         f"found)")
