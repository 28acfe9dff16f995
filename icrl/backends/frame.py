"""What a chat template renders (``Message``) and where a model's free reasoning goes before its
answer: the frame a chat template gives (``ReasoningFrame``)."""

from __future__ import annotations

from typing import Any, NamedTuple

# A chat message as the prompts build it and the APIs take it (JSON): {"role": ..., "content": ...}.
Message = dict[str, Any]


class ReasoningFrame(NamedTuple):
    """A prompt for reasoning and what turns the reasoning into the prompt of the answer.

    ``prompt``: the chat template with the generation prompt (a thinking template: its thinking
    mode, ending with an open ``<think>``); ``stop``: where the reasoning ends (``</think>``, or
    the prediction prefix, the answer marker a plain template's instruction names); ``close``:
    what follows the reasoning before the prediction prefix."""

    prompt: str
    stop: str
    close: str
    prefix: str

    def answer_prompt(self, reasoning: str) -> str:
        """The prompt whose next tokens are the label: the reasoning, closed, then the prefix."""
        return self.prompt + reasoning.rstrip() + self.close + self.prefix
