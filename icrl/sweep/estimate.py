"""The prompt tokens of a sweep's runs, before they run (run_sweep.py --estimate).

A run's token count depends on what its model answers only through the rewards: a
positive-only strategy keeps the rewarded episodes, so the share of rewarded episodes sets
the size of its contexts. With that share given (``--reward_share``, the estimate's one
assumption), everything else follows from the plan, the task's data and the tokenizer. So
each run is assembled as a run is (``icrl.run.assemble``: its steps, test steps, context
strategy, seeds and reward function) and played in memory, with a stand-in model that answers
right at that share of the steps, evenly spread (the expected context at every step), and a
wrong label otherwise. The records it would write are then counted exactly as
run_count_tokens.py counts finished runs (``icrl.analysis.counting``): training calls and test
calls apart, and the published processed-token count.

Nothing is written and no model loads: only the tokenizer (``$ICRL_TOKENIZERS_DIR``, a local
folder, or the Hub's tokenizer files).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Hashable, Mapping, Optional, Sequence

import numpy as np

from ..backends import Generated, offline_chat
from ..backends.fake import FakeChat, fake_label
from ..errors import UsageError
from ..records.configfile import ConfigFile
from ..records.schema import TestLine, TrainLine

if TYPE_CHECKING:
    from ..config import RunConfig
    from ..method.rewards import Reward
    from ..run.data import RunData
    from .execution import Run

_SEARCHED: dict[Hashable, int] = {}  # automatic context sizes found in this process
SAMPLED_CALLS = 1000  # beyond this many training (or test) calls in a run, a sample is counted
FIELDS = ("train_calls", "train_prompt_tokens", "processed_tokens", "test_calls", "test_prompt_tokens",
          "generated_tokens")


def rewarded_steps(share: float, steps: int) -> list[bool]:
    """Which steps the stand-in answers right: evenly spread, ``share`` of them (step t is right
    when round((t + 1) * share) passes an integer), so that every step's context holds the
    expected number of rewarded episodes, with no luck of the draw in the estimate."""
    return [int((t + 1) * share + 0.5) > int(t * share + 0.5) for t in range(steps)]


class StandIn:
    """What the loop needs of a backend, without a model: the tokenizer's facts, and answers
    right at the steps ``rewarded_steps`` gives (the run's own reward function then scores them
    as it would score a model), else a wrong label drawn from the step's seed. Prompts are
    rendered by the counter, not here: the policy gives it each call's input alone
    (``reads_prompts``); ``render`` (another part's declared call) returns the
    prompt's last paragraph. With --reasoning and written guides each call is taken to use its
    whole budget (an upper bound). It answers every declared call of the run."""

    name = "estimate"
    reads_prompts = False

    def __init__(self, chat: Any, answers: dict[str, str], right: Sequence[bool], seed: int) -> None:
        self.chat, self.answers, self.right, self.seed = chat, answers, right, seed
        self.max_model_len = chat.max_model_len
        self.supports_system_role = chat.supports_system_role
        self.eot_token = chat.eot_token

    def render(self, messages: Sequence[dict[str, str]], prefix: str) -> str:
        return messages[-1]["content"].rsplit("\n\n", 1)[-1]

    def predict(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                progress: Optional[Callable[[int], None]] = None) -> list[str]:
        labels, step = list(labels), seed - self.seed
        out = []
        for query in prompts:
            answer = self.answers.get(query)
            if answer is not None and 0 <= step < len(self.right) and self.right[step]:
                out.append(answer)
            else:
                wrong = [label for label in labels if label != answer] or labels
                out.append(fake_label(query, wrong, seed))
        return out

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> list[Generated]:
        """Written text (reasoning, a guide): none, its whole budget of tokens (an upper bound)."""
        return [Generated("", max_tokens) for _ in prompts]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name}


@dataclass
class Estimate:
    """One run's estimated calls and tokens (the names of run_count_tokens.py's figures)."""

    train_calls: int = 0
    train_prompt_tokens: int = 0
    processed_tokens: int = 0
    test_calls: int = 0
    test_prompt_tokens: int = 0
    steps: int = 0
    generated_tokens: int = 0  # --reasoning and written guides, each at its whole budget (an upper bound)
    other_calls: dict[str, int] = field(default_factory=dict)  # each declared call that answers a label, by its summary
    cached_prompt_tokens: int = 0  # of the prompt tokens, those a prompt cache is assumed to serve (sweep.cost)
    output_tokens: int = 0  # the label calls' answers (sweep.cost)
    note: str = ""
    error: Optional[str] = None  # why the run could not be estimated

    @property
    def prompt_tokens(self) -> int:
        return self.train_prompt_tokens + self.test_prompt_tokens


class Tokenizers:
    """Each model's tokenizer, loaded once for the whole sweep."""

    def __init__(self) -> None:
        self._chats: dict[Hashable, Any] = {}

    def chat(self, config: RunConfig) -> Any:
        s = config.spec
        key = (s.backend, s.model_name, s.max_model_len, s.eot_token, s.rope_scaling, s.published_tokenization)
        if key not in self._chats:
            chat = offline_chat(s.backend, s.model_name, hf_token=config.secrets.hf_token, max_model_len=s.max_model_len,
                                eot_token=s.eot_token, rope_scaling=s.rope_scaling)
            if not isinstance(chat, FakeChat):  # the published tokenization is a tokenizer's setting
                chat.published_tokenization = bool(s.published_tokenization)
            self._chats[key] = chat
        return self._chats[key]


def context_size(config: RunConfig, data: RunData, chat: Any) -> int:
    """The run's context size as the run resolves it (``icrl.run.size``: in its search window):
    read from the size cache as the run reads it (``run.size.cached``), searched otherwise, but
    never written."""
    from ..run.size import cached, search_window, searched_size

    s = config.spec
    if s.max_context_examples == 0:
        return 0
    fit = s.max_context_examples
    if fit is None:
        window = search_window(s, chat.max_model_len)
        fit = cached(config, window)
        if fit is None:
            key = (s.backend == "fake", s.model_name, s.eot_token, s.task_name, s.icrl, window)
            if key not in _SEARCHED:  # once per model and task in a sweep (a run would cache it on disk)
                _SEARCHED[key] = searched_size(config, data, chat, window)
            fit = _SEARCHED[key]
    return max(fit - len(data.exemplars), 1) if data.exemplars else fit


def play(config: RunConfig, chat: Any, share: float, reward: Optional[Reward] = None
         ) -> Optional[tuple[ConfigFile, list[TrainLine], list[TestLine]]]:
    """One run assembled and played in memory (see the module docstring): (its config.json
    record, training records, test records), or None for a learner (no model calls). ``reward``:
    in place of the run's own reward function (tests replay a finished run's rewards)."""
    from ..config import given
    from ..method.agents import is_learner
    from ..run.assemble import MemoryRecords, assemble, plan_of
    from ..run.data import load_data
    from ..run.resume import config_record

    s = config.spec
    if is_learner(s.agent):
        return None
    data = load_data(config)
    plan = plan_of(config, data, context_size(config, data, chat))
    task = data.task
    answers = {task.prompt(e): task.answer(e) for e in [*data.train, *data.test]}
    backend = StandIn(chat, answers, rewarded_steps(share, plan.steps), given(s.seed, "seed"))
    records = MemoryRecords()
    assemble(config, data, plan, lambda call: backend, records, reward=reward).loop.run(0)
    record = ConfigFile.parse(config_record(config, plan, data, backend.describe()), "the estimate's config.json")
    return record, records.train, records.test


def count(record: ConfigFile, train: Sequence[TrainLine], test: Sequence[TestLine], chat: Any) -> Estimate:
    """A run's calls and tokens from its records, as run_count_tokens.py counts them."""
    from ..analysis.counting import Replay, _count  # the counter of run_count_tokens.py
    from ..analysis.prefixes import FakeEncoder, SegmentEncoder

    encoder = FakeEncoder(chat) if isinstance(chat, FakeChat) else SegmentEncoder(chat)
    summary, _ = _count(Replay(record, train, test, chat), encoder, 8 if encoder.incremental else 0, 256,
                        time.perf_counter())
    mode = record.resolved.mode
    return Estimate(train_calls=summary["train_calls"], train_prompt_tokens=summary["train_prompt_tokens"],
                    processed_tokens=summary["processed_tokens"] or 0, test_calls=summary["test_calls"],
                    test_prompt_tokens=summary["test_prompt_tokens"], steps=record.resolved.steps,
                    note="ICL: its training steps send nothing; the published count counts them" if mode == "icl" else "")


_Trie = dict[int, "_Trie"]  # the episodes of the contexts so far, each to the episodes after it


def shared_contexts(contexts: Sequence[Sequence[int]]) -> list[int]:
    """For each context (a list of episode indices, in call order), how many of its first
    episodes it shares with an earlier context (the longest such run): its prompt shares
    those episodes' tokens with an earlier prompt, which is what the processed count leaves out."""
    root: _Trie = {}
    out = []
    for context in contexts:
        node, shared = root, 0
        for i, episode in enumerate(context):
            child = node.get(episode)
            if child is None:
                child = node[episode] = {}
            elif shared == i:
                shared = i + 1
            node = child
        out.append(shared)
    return out


def stratified(n: int, k: int) -> list[int]:
    """One index drawn in each block of ``k`` of ``range(n)`` (seeded): every part of a run is
    sampled, and no periodic pattern (the stand-in's evenly spread rewards) lines up with the
    stride."""
    rng = np.random.default_rng(0)
    return [start + int(rng.integers(min(k, n - start))) for start in range(0, n, k)]


def sampled_count(record: ConfigFile, train: Sequence[TrainLine], test: Sequence[TestLine], chat: Any,
                  budget: int) -> Estimate:
    """``count`` from a sample, for runs with more than ``budget`` training or test calls (a
    10,000-step run whose prompts hold thousands of episodes takes as long to render as to count
    once finished). One training call in k (at most ``budget``) is rendered; its processed
    tokens are its tokens less the prefix it shares with an earlier prompt: the system prompt
    and the first episodes its context shares with an earlier context (``shared_contexts``,
    over every call's episode indices, exact), rendered with the previous call's input after
    them. Every k'-th test prompt is rendered likewise. The sums are scaled to all calls."""
    from ..analysis.counting import Replay
    from ..analysis.prefixes import FakeEncoder, SegmentEncoder

    replay = Replay(record, train, test, chat)
    encoder = FakeEncoder(chat) if isinstance(chat, FakeChat) else SegmentEncoder(chat)
    calls = list(replay.calls())
    training = [c for c in calls if c.kind != "test"]
    testing = [c for c in calls if c.kind == "test"]
    sent = processed = 0.0
    if training:
        contexts = []
        for call in training:  # the published counter's contexts, where they differ
            published = replay.published_context(call.step, call.kind, call.context)
            contexts.append(list(published if published is not None else call.context))
        shared = shared_contexts(contexts)
        k = -(-len(training) // budget)
        picked = stratified(len(training), k)
        sums = [0, 0]
        for j in picked:
            call = training[j]
            kind, context = call.kind, call.context
            texts = [replay.render(contexts[j], call.prompt, call)]
            if j > 0:
                texts.append(replay.render(contexts[j][:shared[j]], training[j - 1].prompt, training[j - 1]))
            if kind == "train" and contexts[j] != list(context):
                texts.append(replay.render_call(call))
            ids = encoder.encode(texts)
            lcp = 0
            if j > 0:
                a, b = ids[0], ids[1]
                n = min(len(a), len(b))
                diff = (a[:n] != b[:n]).nonzero()[0]
                lcp = int(diff[0]) if len(diff) else n
            sums[1] += len(ids[0]) - lcp
            if kind == "train":  # what is sent (a supervised-ICL step sends nothing)
                sums[0] += len(ids[-1] if len(texts) == 3 else ids[0])
        scale = len(training) / len(picked)
        sent, processed = sums[0] * scale, sums[1] * scale
    test_tokens = 0.0
    if testing:
        k = -(-len(testing) // budget)
        sampled = [testing[i] for i in stratified(len(testing), k)]
        ids = encoder.encode([replay.render_call(call) for call in sampled])
        test_tokens = sum(len(x) for x in ids) * len(testing) / len(sampled)
    mode = record.resolved.mode
    every = -(-len(training) // budget)
    return Estimate(train_calls=sum(1 for c in training if c.kind == "train"), train_prompt_tokens=round(sent),
                    processed_tokens=round(processed) if mode != "zero_shot" else 0, test_calls=len(testing),
                    test_prompt_tokens=round(test_tokens), steps=record.resolved.steps,
                    note=f"sampled: one training call in {every}" if every > 1 else "")


def estimate_run(config: RunConfig, chat: Any, share: float, budget: int = SAMPLED_CALLS) -> Estimate:
    """One run's estimate at the assumed share of rewarded episodes: every call counted, or a
    sample of them (``sampled_count``) when the run has more than ``budget`` of a kind."""
    played = play(config, chat, share)
    if played is None:
        return Estimate(note="a learner: no model calls")
    from ..analysis.counting import iter_calls

    record, train, test = played
    calls = list(iter_calls(record, train, test))
    if max(sum(1 for c in calls if c.kind != "test"), sum(1 for c in calls if c.kind == "test")) > budget:
        estimate = sampled_count(record, train, test, chat, budget)
    else:
        estimate = count(record, train, test, chat)
    from .cost import cached_and_output

    return dataclasses.replace(estimate, **generated(record, train, test), **cached_and_output(record, train, test, chat))


def generated(record: ConfigFile, train: Sequence[TrainLine], test: Sequence[TestLine]) -> dict[str, Any]:
    """What a played run costs besides its labels: the tokens it generates (its reasoning, and
    each declared call that writes text, at its budget) and the calls of each declared call
    that answers a label (``icrl.run.assemble.all_calls``), by the call's summary."""
    from ..run.assemble import all_calls

    tokens = sum(r.reasoning_tokens or 0 for r in train) + sum(sum(r.reasoning_tokens or []) for r in test)
    other: dict[str, int] = {}
    for call in all_calls():
        n = sum(1 for r in train if call.answered(r))
        if call.generates:
            tokens += n * (getattr(record.spec, call.budget or "", None) or 0)
        else:
            other[call.summary] = n
    return {"generated_tokens": tokens, "other_calls": other}


def estimate_runs(runs: Sequence[Run], share: float,
                  on_run: Optional[Callable[[Run, Estimate], None]] = None) -> dict[int, Estimate]:
    """Estimates of the valid ``runs`` by run index. A run whose tokenizer or data cannot load
    gets an Estimate with ``error`` set (the report leaves it out of the totals and says so).
    ``on_run(run, estimate)`` is called as each run is done (a long sweep prints as it goes)."""
    tokenizers = Tokenizers()
    out: dict[int, Estimate] = {}
    for run in runs:
        if run.error is not None:
            continue
        try:
            args = run.valid_args()
            out[run.index] = estimate_run(args, tokenizers.chat(args), share)
        except UsageError as exc:
            out[run.index] = Estimate(error=str(exc))
        if on_run is not None:
            on_run(run, out[run.index])
    return out


def _n(value: float) -> str:
    return f"{value:,.0f}"


def header(share: float) -> list[str]:
    """The lines before the runs' rows."""
    return [f"token estimate, assuming {share:.0%} of training episodes rewarded (--reward_share); "
            f"published counting: training calls and test calls apart",
            f"{'run':>5} {'steps':>7} {'train calls':>11} {'train tokens':>14} {'processed':>14} "
            f"{'test calls':>10} {'test tokens':>14}"]


def row(run: Run, e: Estimate) -> str:
    if e.error is not None:
        return f"{'#' + str(run.index):>5} not estimated (left out of the total): {e.error}"
    return (f"{'#' + str(run.index):>5} {e.steps:>7} {_n(e.train_calls):>11} {_n(e.train_prompt_tokens):>14} "
            f"{_n(e.processed_tokens):>14} {_n(e.test_calls):>10} {_n(e.test_prompt_tokens):>14}"
            + (f"  ({e.note})" if e.note else "") + _beside(e))


def _beside(e: Estimate) -> str:
    """What a run costs besides its prompts: generated text and other declared calls."""
    parts = [f"{_n(e.generated_tokens)} tokens generated at budget" if e.generated_tokens else "",
             *[f"{_n(n)} {what}" if n else "" for what, n in e.other_calls.items()]]
    parts = [p for p in parts if p]
    return f"  (+ {', '.join(parts)})" if parts else ""


def footer(estimates: Mapping[int, Estimate], tokens_per_s: Optional[float]) -> list[str]:
    """The total and, given a throughput, GPU-hours."""
    total = Estimate()
    for e in estimates.values():
        if e.error is None:
            for name in FIELDS + ("steps",):
                setattr(total, name, getattr(total, name) + getattr(e, name))
            for what, n in e.other_calls.items():
                total.other_calls[what] = total.other_calls.get(what, 0) + n
    lines = [f"{'total':>5} {total.steps:>7} {_n(total.train_calls):>11} {_n(total.train_prompt_tokens):>14} "
             f"{_n(total.processed_tokens):>14} {_n(total.test_calls):>10} {_n(total.test_prompt_tokens):>14}",
             f"prompt tokens sent: {_n(total.prompt_tokens)} (training {_n(total.train_prompt_tokens)}, "
             f"test {_n(total.test_prompt_tokens)}); processed (the paper's count): {_n(total.processed_tokens)}"]
    if total.generated_tokens or any(total.other_calls.values()):
        other = " and ".join(f"{_n(n)} {what}" for what, n in total.other_calls.items())
        lines.append(f"besides: {_n(total.generated_tokens)} tokens generated (reasoning and guides, at their "
                     f"budgets) and {other}, not in the GPU-hours below")
    if tokens_per_s:
        hours = total.prompt_tokens / tokens_per_s / 3600
        lines.append(f"at {_n(tokens_per_s)} prompt tokens/s per model replica (--tokens_per_s): "
                     f"{hours:,.2f} GPU-hours for the prompt tokens sent (one replica per GPU)")
    return lines


def report(runs: Sequence[Run], estimates: Mapping[int, Estimate], share: float,
           tokens_per_s: Optional[float]) -> list[str]:
    """Every line run_sweep.py --estimate prints after the runs' commands."""
    return header(share) + [row(r, estimates[r.index]) for r in runs if r.index in estimates] + \
        footer(estimates, tokens_per_s)
