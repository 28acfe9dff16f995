"""The method: what a reader of the paper looks for. Episodes, prompts, feedback and rewards;
the context strategies (``strategies/``), exploration, the agents (the LLM and the bandit
learners, ``agents/``), embeddings and the task as an environment.

Each strategy, exploration method, reward and agent declares itself once
(:mod:`icrl.method.registry`); ``declared_params`` gathers their parameters for the run
configuration, in the order their fields and flags take.
"""

from __future__ import annotations

from typing import NamedTuple

from .agents import agent_params, llm_params
from .exploration import exploration_params
from .registry import Param
from .rewards import reward_params
from .strategies import owners_of, strategy_params


class Declared(NamedTuple):
    """A declared parameter and the group its field is recorded with: ``group`` names the
    fields written in config.json "args" together, only while one of them is set (a run without
    them records what it recorded before they existed); ``owners``: the strategies that declare
    it (a strategy's parameters are recorded for runs of those strategies)."""

    param: Param
    group: str
    owners: tuple[str, ...] = ()


def declared_params() -> list[Declared]:
    """Every declared parameter: exploration methods (each its own group), --reward (then each
    reward's own parameter, its own group), agents (the
    learners'), the strategies' own, then the LLM's (each its own group)."""
    return [*[Declared(p, p.name) for p in exploration_params()],
            *[Declared(p, "reward" if p.name == "reward" else p.name) for p in reward_params()],
            *[Declared(p, "agent") for p in agent_params()],
            *[Declared(p, "strategy", tuple(owners_of(p.name))) for p in strategy_params()],
            *[Declared(p, p.name) for p in llm_params()]]
