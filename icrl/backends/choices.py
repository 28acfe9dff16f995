"""A label chosen by a served engine (vLLM in process, or an OpenAI-compatible server): the texts
a constrained output may take (a space, then a label), the label read back from the text, the
token budget no tokenization of a choice exceeds, and the plain sampling arguments."""

from __future__ import annotations

from typing import Any, Sequence

from ..errors import UsageError


def choices(labels: Sequence[str]) -> list[str]:
    """What the model may write after the prefix: a space, then one label."""
    return [" " + label for label in labels]


def parse_output(text: str, labels: Sequence[str]) -> str:
    """Map a generated text back to its label (structured outputs guarantee a match)."""
    label = text.strip()
    if label not in labels:
        raise RuntimeError(f"vLLM returned {text!r}, which is not one of the {len(labels)} labels")
    return label


def max_label_tokens(labels: Sequence[str]) -> int:
    """A token budget no tokenization of a choice can exceed: structured outputs accept any
    tokenization of ` <label>`, not only the canonical one, and a token holds at least one
    byte; plus one for the end-of-turn token."""
    return max(len(choice.encode("utf-8")) for choice in choices(labels)) + 1


def sampling_kwargs(temperature: float, seed: int, max_tokens: int) -> dict[str, Any]:
    """Plain SamplingParams arguments; temperature 0 is greedy in vLLM."""
    if temperature < 0:
        raise UsageError(f"--temperature must be >= 0, got {temperature}")
    return {"temperature": float(temperature), "seed": int(seed), "max_tokens": int(max_tokens)}
