"""The model calls the registered parts declare: built-in strategies and rewards and those a
plugin registered so far (``icrl.method.calls`` says what a call is). A training line can record
the answer of each (``TrainLine.answers``); the token counter and the estimate count each."""

from __future__ import annotations

from .calls import ModelCall, declared_calls
from .rewards import REWARDS
from .strategies.base import STRATEGIES


def registered_calls() -> list[ModelCall]:
    """Every call a registered strategy or reward declares, each once, in registration order."""
    return declared_calls(*REWARDS, *(name.cls for name in STRATEGIES))


def answer_fields() -> dict[str, ModelCall]:
    """The record field of each registered call that has one -> the call."""
    return {call.field: call for call in registered_calls() if call.field}
