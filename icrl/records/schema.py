"""The records' schema: what each file of a run directory holds, field by field.

The lines of train.jsonl and test.jsonl are the dataclasses ``TrainLine`` and ``TestLine``: the
loop builds them and ``RunRecords`` writes them (``as_json``), so this is the code that writes;
``from_json`` reads a line back with every field checked against its type (``records.typed``),
which is how every reader of records gets them (``records.log``, ``icrl.run.readback``).
config.json is ``records.configfile.ConfigFile``; results.json and token_counts.json are described
as TypedDicts. Fields in the ``total=False`` classes may be absent: records written before they
existed, or fields of only some backends or runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Mapping, Optional, TypedDict, Union

from ..backends.usage import UsageRecord
from ..errors import DamagedRecords
from ..method.declared import answer_fields
from .typed import expected, fits, parse, parse_leniently, shown


# -- train.jsonl and test.jsonl: written from these types (``RunRecords.append_train/_test``) ---
# ``usage``: ``UsageRecord`` (prompt_tokens, cached_prompt_tokens, output_tokens, requests), what a
# hosted API reported for a step's calls, declared beside ``Usage`` that writes it
# (``icrl.backends.usage``).


@dataclass
class TrainLine:
    """One line of train.jsonl: one training step (the step is complete once this is on disk).
    The optional fields (None) are written only with their flag (docs/method.md, beyond the
    paper), after the others and before ``time_s``; then ``answers``, written as one top-level
    field per declared model call that answered at this step (its ``ModelCall.field``,
    ``icrl.method.calls``: a call a plugin declares is recorded like a built-in's). ``usage``,
    after ``time_s``, is written only by a run whose models report their API's usage."""

    step: int
    example_id: int
    prompt: str
    prediction: Optional[str]   # None in supervised ICL (no training call)
    feedback: Optional[float]   # the reward shown (flipped with --icrl_flip_feedback); None in ICL
    answer: str
    accuracy: Optional[int]     # 1 if the prediction is the answer; None in ICL
    context_size: int
    context: List[int]          # steps whose episodes were in the context, in context order
    metrics: Dict[str, Any]     # the strategy's metrics (approximate: context_index, context_lengths;
                                # --ucb_alpha: ucb {score, counts, means}; knn_*: knn_scores) or the
                                # learner's (epsilon-greedy: explored)
    reset: Optional[bool] = None     # --prob_reset: the strategy forgot the steps before this one
    explored: Optional[bool] = None  # --p_exploration: a random label, no model call
    reward: Optional[float] = None   # --reward other than exact_match: the step's reward (accuracy stays exact)
    reasoning: Optional[str] = None  # --reasoning: what the model wrote before its answer
    reasoning_tokens: Optional[int] = None  # --reasoning: the tokens it took
    answers: Dict[str, str] = field(default_factory=dict)  # the declared model calls' answers at this
                                     # step, by record field (``ModelCall.field``): e.g. ``reflection``, the
                                     # guide a strategy wrote; ``judge``, a reward model's "yes" or "no"
    time_s: float = 0.0              # the whole step, its test included
    usage: Optional[UsageRecord] = None  # an API backend: what it reported for the step's training calls

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, value in _as_json(self, OPTIONAL_TRAIN).items():
            if name == "answers":
                out.update((k, v) for k, v in value.items() if v is not None)
            else:
                out[name] = value
        return out

    @classmethod
    def from_json(cls, record: object, where: str = "train.jsonl") -> "TrainLine":
        """The line a record says, every field checked against its type (``records.typed``; a
        declared call's answer: text or null): DamagedRecords naming ``where`` and the field
        otherwise."""
        if not isinstance(record, dict) or all(name in _TRAIN_FIELDS and name != "answers" for name in record):
            return parse(cls, record, where)
        declared = answer_fields()
        answers: dict[str, Optional[str]] = {}
        for name, value in record.items():
            if name in declared and name not in _TRAIN_FIELDS:
                if not fits(value, Optional[str]):
                    raise DamagedRecords(f"{where}: field {name!r} is {shown(value)}, "
                                         f"expected {expected(Optional[str])}")
                answers[name] = value
        unknown = next((name for name in record if name == "answers" or
                        (name not in _TRAIN_FIELDS and name not in declared)), None)
        if unknown is not None:
            names = [name for name in _TRAIN_FIELDS if name != "answers"] + list(declared)
            raise DamagedRecords(f"{where}: field {unknown!r} is not a field of TrainLine ({', '.join(names)})")
        line: TrainLine = parse(cls, {k: v for k, v in record.items() if k not in answers}, where)
        line.answers = {k: v for k, v in answers.items() if v is not None}
        return line

    @classmethod
    def leniently(cls, record: dict[str, Any]) -> tuple["TrainLine", dict[str, Any]]:
        """(the line, what of the record does not fit it): ``records.typed.parse_leniently``, a
        declared call's answer (text or null) read into ``answers``."""
        declared = answer_fields()
        answers = {k: v for k, v in record.items() if k in declared and k not in _TRAIN_FIELDS}
        line, wrong = parse_leniently(cls, {k: v for k, v in record.items() if k not in answers})
        for name, value in answers.items():
            if isinstance(value, str):
                line.answers[name] = value
            elif value is not None:
                wrong[name] = value
        return line, wrong

    @property
    def earned(self) -> Optional[float]:
        """The step's reward: ``reward`` where it is recorded apart (a reward other than exact
        match), else the accuracy; None in supervised ICL."""
        return self.accuracy if self.reward is None else self.reward


@dataclass
class TestLine:
    """One line of test.jsonl: every test prompt predicted with that step's context and seed."""

    __test__ = False  # not a test class (pytest collects classes named Test*)

    step: int
    accuracy: float
    per_class_accuracy: Dict[str, float]
    predictions: List[str]
    context_size: Union[int, List[int]]  # a query-aware strategy (knn_*): a list, one size per test input
    context: Optional[List[int]] = None           # the step's context (not for query-aware strategies)
    contexts: Optional[List[List[int]]] = None    # query-aware strategies: one context per test input
    metrics: Dict[str, Any] = field(default_factory=dict)
    reward: Optional[float] = None  # --reward other than exact_match: the mean reward (accuracy stays exact)
    reasoning: Optional[List[str]] = None  # --reasoning: what the model wrote before each test answer
    reasoning_tokens: Optional[List[int]] = None  # --reasoning: the tokens each took
    time_s: float = 0.0
    usage: Optional[UsageRecord] = None  # an API backend: what it reported for the test calls

    def as_json(self) -> dict[str, Any]:
        return _as_json(self, OPTIONAL_TEST)

    @classmethod
    def from_json(cls, record: object, where: str = "test.jsonl") -> "TestLine":
        """The line a record says, every field checked against its type: DamagedRecords naming
        ``where`` and the field otherwise."""
        return parse(cls, record, where)

    @classmethod
    def leniently(cls, record: dict[str, Any]) -> tuple["TestLine", dict[str, Any]]:
        """(the line, what of the record does not fit it): ``records.typed.parse_leniently``."""
        line, wrong = parse_leniently(cls, record)
        return line, wrong


OPTIONAL_TRAIN = ("reset", "explored", "reward", "reasoning", "reasoning_tokens", "usage")
_TRAIN_FIELDS = tuple(f.name for f in fields(TrainLine))


def train_line_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """A step's record fields (``Decision.fields``, a reward's ``fields()``) as ``TrainLine``'s
    keyword arguments: a field of its own passes, any other is a declared call's answer."""
    out = {name: value for name, value in values.items() if name in _TRAIN_FIELDS and name != "answers"}
    answers = {name: value for name, value in values.items() if name not in _TRAIN_FIELDS and value is not None}
    if answers:
        out["answers"] = answers
    return out
OPTIONAL_TEST = ("context", "contexts", "reward", "reasoning", "reasoning_tokens", "usage")


def _as_json(line: Union[TrainLine, TestLine], optional: tuple[str, ...]) -> dict[str, Any]:
    """The line as written: its fields in order, the optional ones only when set."""
    return {f.name: getattr(line, f.name) for f in fields(line)
            if f.name not in optional or getattr(line, f.name) is not None}


# -- results.json -----------------------------------------------------------------------------
class _ResultsFile(TypedDict):

    finished: bool
    mode: str
    total_steps: int
    steps_completed: int
    final_test_accuracy: Optional[float]
    best_test_accuracy: Optional[float]
    best_test_step: Optional[int]
    regret: Optional[int]                # ICRL only: training steps predicted wrong
    train_accuracy: Optional[float]
    test_accuracy: Dict[str, float]      # step (as a string) -> accuracy
    mean_step_time_s: Optional[float]
    total_time_s: float


class ResultsFile(_ResultsFile, total=False):
    """results.json: a summary of the records, rewritten after each test step."""

    usage: UsageRecord  # a run on an API backend: the sum of its lines' usage, training and test


# -- token_counts.json (run_count_tokens.py, next to token_counts.csv) ------------------------
class TokenizerKey(TypedDict):
    name: str
    fingerprint: str


class TokenCountKey(TypedDict):
    """What the counts depend on: a cached count is reused only for the same key."""

    version: int
    tokenizer: TokenizerKey
    full_tokenization: bool
    records: Dict[str, object]  # ``analysis.token_cache.records_stamp``: size and time of each record file


class TokenCountSummary(TypedDict):
    """``summary``: ``icrl.analysis.counting``'s totals of one run; beside these, one
    ``<field>_calls`` count (an integer) per declared model call that records a field."""

    processed_tokens: Optional[int]  # the paper's figure; null for a zero-shot run
    processed_tokens_as_run: Optional[int]
    rebuilt_contexts: int
    calls: int
    prompt_tokens: int
    uncached_tokens: int
    train_calls: int
    train_prompt_tokens: int
    train_uncached_tokens: int
    test_calls: int
    test_prompt_tokens: int
    test_uncached_tokens: int
    icl_train_calls: int
    icl_train_prompt_tokens: int
    steps: int
    tokenization: str  # "incremental" or "full" (with the reason when it fell back)
    verified_prompts: int
    cached_segments: int
    tree_nodes: int
    train_reasoning_tokens: int
    test_reasoning_tokens: int
    seconds: float
    render_s: float
    encode_s: float
    prefix_tree_s: float
    tokens_per_s: Optional[float]


class TokenCounts(TypedDict):
    """token_counts.json (``icrl.analysis.token_cache``)."""

    key: TokenCountKey
    summary: TokenCountSummary
