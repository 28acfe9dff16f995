"""Every token budget of a run checked against the window of the model that spends it, from the
tokenizer alone, before any model loads and before anything is written.

A budget is what a model may write freely: ``--reasoning`` (before each answer of the acting
model) and the budget of each declared call that generates (``ModelCall.budget``: the
reflection's ``--reflection_tokens``). A call that answers with a label (a judge's verdict)
spends the longest label's tokens. Each must fit, with the smallest prompt it can follow, in
the window of its model (``--max_model_len``, else the model's own, as its tokenizer gives it):

- the acting model's answer: the longest input with no context episode (and the exemplars) as
  the run renders it, the reasoning budget, the text a strategy's generating call shows in
  every later prompt (a guide: its whole budget), and the longest label;
- each call a strategy or reward declares (``icrl.run.assemble.calls_of``), with its own model:
  its prompt for the longest input (``call_prompt`` of the part that declares it), then its
  budget or its longest answer.

A budget that does not fit is one line (UsageError, exit 2) naming the flag to lower and by how
much (the tightest of the bounds found, so that lowering it by that much fits every call); a
call that answers with a label and whose prompt alone outgrows its model's window names
``--max_model_len`` (when given) and the option that names its model. The acting model's
prompt too long with no budget at all is not this check's to say (``check_window``:
``--max_model_len``; the backends: the context size). Runs on a backend whose window is not the
one a local tokenizer gives (``window_from_tokenizer``: a server's, ``--backend openai``) are
not checked here, nor runs whose model has no tokenizer here (a hosted API's).
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence

from ..backends import window_from_tokenizer
from ..config import RunConfig, RunSpec
from ..errors import UsageError
from ..method.agents import is_learner
from ..method.calls import ModelCall
from ..method.prompts import build_messages
from ..method.rewards import REWARDS, Reward
from ..method.strategies.base import STRATEGIES, Strategy
from .data import RunData
from .size import acting_budgets, tokenizer_of
from .window import Chat

# what _refuse says of a budget too large: (the tokens too many, the budgets, the window, what needs, its tokens)
Excess = tuple[int, dict[str, int], int, str, int]


def _parts(spec: RunSpec) -> tuple[Optional[type[Strategy]], type[Reward]]:
    """The run's strategy class (None where it has none) and reward class."""
    name = spec.context_strategy_name
    strategy = STRATEGIES.get(name).cls if name and not is_learner(spec.agent) and name in STRATEGIES \
        and spec.max_context_examples != 0 else None
    return strategy, REWARDS.get(spec.reward)


def _answer_tokens(chat: Chat, labels: Sequence[str]) -> int:
    return max(chat.count_tokens(f" {label}") for label in labels) + 1


def _refuse(budgets: dict[str, int], excess: int, window: int, what: str, needs: int) -> UsageError:
    """The one line: the largest budget that can absorb ``excess`` alone, else all of them."""
    ordered = sorted(budgets.items(), key=lambda item: -item[1])
    flag, value = ordered[0]
    if value - excess >= 1:
        change = f"lower {flag} by at least {excess} (to {value - excess} or less)"
    else:
        change = f"lower {' and '.join(f for f, _ in ordered)} by at least {excess} together"
    given = ", ".join(f"{f} {v}" for f, v in ordered)
    return UsageError(f"{given}: more than the model's window of {window} tokens holds ({what} already needs "
                      f"{needs}); {change}, or give a model with a longer window")


def _excess(chat: Chat, budgets: dict[str, int], needs: int, what: str) -> Optional[Excess]:
    """``needs`` tokens beside ``budgets`` (flag -> tokens) against the window of ``chat``: None
    where they fit, else what ``_refuse`` says, the tokens too many first."""
    budgets = {flag: value for flag, value in budgets.items() if value}
    window = chat.max_model_len
    if not budgets or needs > window:
        return None  # no budget to lower, or no budget could help: said elsewhere
    excess = needs + sum(budgets.values()) - window
    return (excess, budgets, window, what, needs) if excess > 0 else None


def _too_long(spec: RunSpec, call: ModelCall, needs: int, window: int) -> UsageError:
    """A call that writes a label, whose smallest prompt does not fit its model's window."""
    other = f"give --{call.option} a model with a longer window" if call.option else "use a model with a longer window"
    change = f"raise --max_model_len by at least {needs - window} (to {needs}), or {other}" \
        if spec.max_model_len else other
    return UsageError(f"the {call.kind} call for the longest input needs {needs} tokens, {needs - window} more than "
                      f"its model's window of {window}; {change}")


def check_budgets(config: RunConfig, data: RunData,
                  load: Callable[[RunConfig], Optional[Chat]] = tokenizer_of) -> None:
    """Every budget of the run ``config`` against its model's window (module docstring);
    UsageError naming the flag. ``load(config)``: a model's tokenizer (None: none here)."""
    s = config.spec
    strategy, reward = _parts(s)
    calls = [(part, call) for part in (strategy, reward) if part is not None for call in getattr(part, "calls", ())]
    shown = {flag: value for flag, value in acting_budgets(s).items() if flag != "--reasoning"}
    inputs = [data.task.prompt(e) for e in data.test + data.train]
    if not window_from_tokenizer(s.backend) or not inputs or not (s.reasoning or shown or calls):
        return
    tokenizers: dict[Optional[str], Optional[Chat]] = {}

    def chat_of(name: Optional[str]) -> Optional[Chat]:
        if name not in tokenizers:
            tokenizers[name] = load(config if name is None else config.replace(model_name=name, agent="llm"))
        return tokenizers[name]

    task = data.task
    acting = None if is_learner(s.agent) else chat_of(None)
    found: list[Optional[Excess]] = []
    if acting is not None and (s.reasoning or shown):
        longest = max(inputs, key=acting.count_tokens)
        mode = "zero_shot" if s.max_context_examples == 0 else ("icrl" if s.icrl else "icl")
        messages, prefix = build_messages(task, [], longest, mode, exemplars=data.exemplar_pairs,
                                          supports_system_role=acting.supports_system_role,
                                          reasoning=bool(s.reasoning) and not getattr(acting, "thinking", False))
        needs = acting.count_tokens(acting.render(messages, prefix)) + _answer_tokens(acting, task.labels)
        found.append(_excess(acting, {"--reasoning": s.reasoning, **shown}, needs,
                             "the longest input with no context episode"))
    for part, call in calls:
        chat = chat_of(call.model_name(config.call_options))
        prompt = getattr(part, "call_prompt", None)
        if chat is None or prompt is None:
            continue
        longest = max(inputs, key=chat.count_tokens)
        label = max(task.labels, key=lambda x: chat.count_tokens(f" {x}"))
        messages, prefix, answers = prompt(call, task, longest, label)
        needs = chat.count_tokens(chat.render(messages, prefix)) + (_answer_tokens(chat, answers) if answers else 0)
        budget = {f"--{call.budget}": getattr(s, call.budget)} if call.generates and call.budget else {}
        if not budget and needs > chat.max_model_len:
            raise _too_long(s, call, needs, chat.max_model_len)
        found.append(_excess(chat, budget, needs, f"the {call.kind} call's prompt for the longest input"))
    worst = max((f for f in found if f is not None), default=None, key=lambda f: f[0])
    if worst is not None:  # the tightest bound: lowering by it fits every call
        excess, budgets, window, what, needs = worst
        raise _refuse(budgets, excess, window, what, needs)
