"""Render a context and a new input into chat messages, string for string as published.

Layout (Monea et al. 2024, arXiv 2410.05362): a system prompt, then for i = 0, 1, ...
the i-th input, the i-th prediction, the i-th feedback and the i-th gold answer, each
present only when the mode has it. An input is appended (after a blank line) to the
previous message when that message is a user message (the system prompt on templates
without a system role, or a feedback message), else it opens a new user message. The
last message is the user message with the new input; the backend adds the generation
prompt and then the prediction prefix (e.g. ``Intent:``), after which the model writes
`` <label>``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Sequence, Union

from icrl.method.episode import Episode
from icrl.method.task import TaskView
from icrl.errors import UsageError

SYSTEM_PROMPT_ICRL = (
    "You are an useful assistant. Answer the following questions. Feedback will indicate if you "
    "answered correctly. You must answer correctly, using previous feedback to make better predictions."
)
SYSTEM_PROMPT_ICL = "You are an useful assistant. Answer the following questions."
MODES = ("icrl", "icl", "zero_shot")
# --reasoning on a template without a thinking mode (ours): the system prompt asks for a few
# sentences of reasoning before the answer, which follows the prediction prefix (the answer marker).
REASONING_INSTRUCTION = "Before you answer, think in a few sentences; then write '{prefix}' and your answer."


PARTIAL_FEEDBACK = 0.5  # --reward coarse_credit: a wrong label of the right parent class (ours)
Exemplar = Union[Episode, tuple[str, str]]  # a gold (prompt, answer) pair, or an episode showing one


def feedback_message(prediction: str, feedback: Optional[float]) -> str:
    """The user message telling the model whether ``prediction`` was right (1), wrong (0) or,
    with a graded reward (ours, not the paper's), partly right (0.5)."""
    if feedback == PARTIAL_FEEDBACK:
        return (f"The answer '{prediction}' is partly right: the right kind, but not the exact answer. "
                f"You can do better!")
    if feedback not in (0, 1):
        raise ValueError(f"feedback must be 1, 0 or 0.5 to be rendered (got {feedback!r})")
    if feedback:
        return f"'{prediction}' is the correct answer! Good job!"
    return f"The answer '{prediction}' is wrong! You can do better!"


def build_messages(task: TaskView, context: Sequence[Episode], prompt: str, mode: str, *,
                   omit_feedback: bool = False, exemplars: Sequence[Exemplar] = (),
                   supports_system_role: bool = True, reasoning: bool = False,
                   preamble: str = "") -> tuple[list[dict[str, str]], str]:
    """(messages, prefix) for predicting ``prompt`` after ``context``.

    mode "icrl": the context's inputs, predictions and feedbacks (no feedback messages with
    ``omit_feedback``); "icl": inputs and gold answers; "zero_shot": no context at all.
    ``exemplars`` are gold (prompt, answer) pairs (or episodes; their .prompt and .answer are
    used) placed before the context: in icrl mode as predictions with positive feedback, in
    icl/zero_shot mode as gold answers. ``task`` needs ``prediction_prefix`` and ``description``.
    Without a system role the system prompt is a user message (the first input joins it).
    ``reasoning`` (ours): the system prompt ends with ``REASONING_INSTRUCTION`` (for templates
    without a thinking mode). ``preamble`` (ours): text a strategy puts before the episodes (a
    summary of the history, a written reflection), after the system prompt and description.
    """
    if mode not in MODES:
        raise UsageError(f"unknown prompt mode {mode!r}; choose one of: {', '.join(MODES)}")
    context = list(context)
    if mode == "zero_shot" and context:
        raise UsageError("zero_shot mode takes no context; use max_examples 0")
    gold = [_as_pair(exemplar) for exemplar in exemplars]
    inputs = [p for p, _ in gold] + [episode.prompt for episode in context] + [prompt]
    predictions: list[str] = []
    feedbacks: list[Optional[float]] = []  # 1, 0 or 0.5 (feedback_message)
    answers: list[str] = []
    if mode == "icrl":
        predictions = [a for _, a in gold] + [_prediction(episode) for episode in context]
        if not omit_feedback:
            feedbacks = [1] * len(gold) + [episode.feedback for episode in context]
        system = SYSTEM_PROMPT_ICRL
    else:
        answers = [a for _, a in gold] + [episode.answer for episode in context]
        system = SYSTEM_PROMPT_ICL
    prefix = task.prediction_prefix
    content = f"{system}\n{task.description}"
    if reasoning:
        content += "\n" + REASONING_INSTRUCTION.format(prefix=prefix)
    if preamble:
        content += "\n\n" + preamble
    messages = [{"role": "system" if supports_system_role else "user", "content": content}]
    for i in range(max(len(inputs), len(predictions), len(feedbacks), len(answers))):
        if i < len(inputs):
            if messages[-1]["role"] == "user":
                messages[-1]["content"] += f"\n\n{inputs[i]}"
            else:
                messages.append({"role": "user", "content": inputs[i]})
        if i < len(predictions):
            messages.append({"role": "assistant", "content": f"{prefix} {predictions[i]}"})
        if i < len(feedbacks):
            messages.append({"role": "user", "content": feedback_message(predictions[i], feedbacks[i])})
        if i < len(answers):
            messages.append({"role": "assistant", "content": f"{prefix} {answers[i]}"})
    return messages, prefix


def _prediction(episode: Episode) -> str:
    """An ICRL context episode's prediction (a supervised-ICL episode has none to show)."""
    if episode.prediction is None:
        step = getattr(episode, "step", "?")
        raise ValueError(f"an ICRL context shows each episode's prediction; the episode of step {step} has none")
    return episode.prediction


def _as_pair(exemplar: Exemplar) -> tuple[str, str]:
    """(prompt, gold answer) from a pair or an Episode."""
    if isinstance(exemplar, Episode):
        return exemplar.prompt, exemplar.answer
    prompt, answer = exemplar
    return prompt, answer


class Frame(Protocol):
    """Where a call's reasoning goes (``icrl.backends.ReasoningFrame``)."""

    @property
    def prompt(self) -> str: ...

    @property
    def stop(self) -> str: ...

    def answer_prompt(self, reasoning: str) -> str: ...


class Renderer(Protocol):
    """What renders a call's messages: a backend or a chat tokenizer (``icrl.backends``)."""

    @property
    def supports_system_role(self) -> bool: ...

    @property
    def thinks(self) -> bool: ...

    def render(self, messages: Sequence[dict[str, str]], prefix: str) -> str: ...

    def reasoning_frame(self, messages: Sequence[dict[str, str]], prefix: str) -> Frame: ...


@dataclass(frozen=True)
class Prompter:
    """How a run words its model's calls: the task, the mode, the feedback and exemplars shown,
    and whether the calls reason first (--reasoning). The policy asks the model with it, and the
    token counter replays a finished run's calls with the one it rebuilds from config.json
    (``icrl.run.assemble.prompter_of_record``), so that both render the same text.

    ``model`` is what renders: a backend or a chat tokenizer (``supports_system_role``,
    ``thinks``, ``render``, ``reasoning_frame``)."""

    task: TaskView  # its prediction_prefix and description
    mode: str
    omit_feedback: bool = False
    exemplars: tuple[Exemplar, ...] = ()
    reasoning: bool = False

    def messages(self, model: Renderer, context: Sequence[Episode], prompt: str,
                 preamble: str = "") -> tuple[list[dict[str, str]], str]:
        """(messages, prefix) of the call predicting ``prompt`` after ``context``."""
        return build_messages(self.task, context, prompt, self.mode, omit_feedback=self.omit_feedback,
                              exemplars=self.exemplars, supports_system_role=model.supports_system_role,
                              reasoning=self.reasoning and not model.thinks, preamble=preamble)

    def frame(self, model: Renderer, context: Sequence[Episode], prompt: str, preamble: str = "") -> Frame:
        """Where the call's reasoning goes (``icrl.backends.ReasoningFrame``)."""
        return model.reasoning_frame(*self.messages(model, context, prompt, preamble))

    def render(self, model: Renderer, context: Sequence[Episode], prompt: str, preamble: str = "",
               reasoning: Optional[str] = None) -> str:
        """The call's prompt as the model reads it; with ``reasoning`` (what the model wrote
        first), the prompt its label is chosen after."""
        if reasoning is None:
            return model.render(*self.messages(model, context, prompt, preamble))
        return self.frame(model, context, prompt, preamble).answer_prompt(reasoning)
