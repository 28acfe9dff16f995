"""A run's configuration: one frozen, typed object built from the command line in one place.

    RunSpec     what a run computes: config.json "args", compared when a run resumes
    RunOptions  how it runs: config.json "runtime_args", may differ between a run and its resume
    Secrets     never written anywhere (config.json, the log, the lock file, a sweep's commands)
    RunConfig   the three together (``icrl.cli.parse_args`` builds it; everything below reads it)

Each field declares its role once, in its metadata, next to its help text:

- ``folder``: the short name under which the field joins the run folder's name when it differs
  from its default (``records.run_folder``; "" = the value alone);
- ``column``: its column in the results table (``icrl.analysis.results``);
- ``backend``: the loaded backend depends on it (runs of a sweep that agree on every such field
  share one backend, see ``backend_spec``);
- ``extends``: a larger value continues a recorded run instead of making another one (train_k);
- ``added``: added after runs were recorded; records without it had the field's default;
- ``optional``: a group name; the group's fields are written in config.json "args" only when one
  of them differs from its default (opt-in settings beyond the paper: exploration, rewards,
  agents; the records of every run without them stay byte for byte as they were; implies
  ``added``); the group "strategy" holds the strategies' own parameters, written for the runs
  of the strategies that declare them (``owners``).
- ``only``: "llm" or "learner": the field means something to that kind of agent alone (``--agent``);
  the other kind refuses it when it is set (``icrl.cli.validate``).
- ``param``: the declaration (:class:`icrl.method.registry.Param`) of a field that a part of
  the method declares.

RunSpec is the published script's arguments and ours (``_Spec``), then the parameters the parts
of the method declare (``icrl.method.declared_params``: exploration, rewards, agents, the
strategies' own), added as fields when this module is imported: a new part's parameter is a
field, a flag and a record entry without an edit here.

The lists of names the rest of the package needs (runtime names, secret flags, folder parts,
result columns, backend options) are derived from this metadata, never written out again.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Mapping, Optional, Sequence, TypeVar

from .backends import BACKEND_CHOICES, FIRST_ANSWER_HELP, FIRST_ANSWER_S
from .backends.embedded import DEFAULT_MODEL
from .errors import UsageError
from .infra import plugins
from .infra.masking import SECRET_OPTIONS
from .method import declared_params
from .method.agents import AgentSetting, agent_params, llm_params
from .method.declared import registered_calls
from .method.exploration import Exploration
from .method.registry import Param
from .method.rewards import REWARDS, RewardSetting, reward_params
from .method.shape import RunShape
from .method.strategies import SAMPLING_METHODS, STRATEGIES
from .method.strategies.base import StrategyChoice, strategy_params

_FOLDER_NONE = object()
T = TypeVar("T")


def flag(default: T, help: str, *, folder: object = _FOLDER_NONE, column: Optional[str] = None, backend: bool = False,
         extends: bool = False, added: bool = False, optional: str = "", only: str = "", param: Optional[Param] = None,
         owners: tuple[str, ...] = (), spelled: Optional[str] = None, folder_value: bool = True,
         choices: Optional[Sequence[str]] = None, switch: bool = False) -> T:
    """A configuration field: its default, help text and roles (see the module docstring);
    ``spelled``: the flag's first spelling when it is not ``--<name>`` (which stays an old one);
    ``choices``: the values its flag takes (a list the flag reads when the parser is built);
    ``switch``: a true/false field whose flag only turns it on (no ``--no-`` form). The flag's
    type is the field's annotation (``icrl.cli.run``)."""
    assert only in ("", "llm", "learner"), only
    return field(default=default, metadata={
        "help": help, "folder": None if folder is _FOLDER_NONE else folder, "column": column,
        "backend": backend, "extends": extends, "added": added or bool(optional), "optional": optional,
        "only": only, "param": param, "owners": owners, "flag": spelled, "folder_value": folder_value,
        "choices": choices if choices is not None else (param.choices if param is not None else None),
        "switch": switch})


def declared_field(param: Param, group: str, owners: tuple[str, ...] = ()) -> Any:
    """The field of a parameter a part of the method declares (recorded with ``group``)."""
    return flag(param.default, param.help, folder=_FOLDER_NONE if param.folder is None else param.folder,
                column=param.column, optional=group, only=param.only, param=param, owners=owners,
                folder_value=param.folder_value)


# Our definitions of the three flags the published script parsed and never read (docs/method.md,
# "Beyond the paper: exploration and rewards"); off by default.
EXPLORATION_NAMES = ("ucb_alpha", "prob_reset", "p_exploration")


@dataclass(frozen=True)
class _Spec:
    """The published script's arguments and ours; RunSpec adds the declared parameters."""

    model_name: str = flag(DEFAULT_MODEL, "Hugging Face id, local directory, or the embedded 'smollm2-135m'",
                           column="model")
    task_name: Optional[str] = flag(None, "required: banking77, clinic150, clinic150_oos, trec_coarse, trec_fine, "
                                          "nlu, or a task file path/to/task.toml (docs/tasks.md) "
                                          "[+ _top<K>][+ _unsemantic]", column="task")
    context_strategy_name: Optional[str] = flag(
        None, f"required (not for zero-shot, --max_context_examples 0): one of {', '.join(STRATEGIES.names())}",
        column="strategy", only="llm")
    context_p_keep: float = flag(1.0, "probability that each past episode is kept when the context is drawn "
                                      "(explorative ICRL: 0.1)", column="p_keep", only="llm")
    max_context_examples: Optional[int] = flag(
        None, "episodes in context; 0 = zero-shot; default: as many as fit the model window",
        column="max_context_examples", only="llm")
    icrl: Optional[bool] = flag(None, "required: ICRL (predictions + rewards) or --no-icrl, supervised ICL (the "
                                      "published script silently runs supervised ICL when both are omitted)",
                                column="icrl")
    icrl_omit_feedback: bool = flag(False, "ICRL ablation: show the context episodes without their reward",
                                    column="omit_feedback", only="llm")
    icrl_flip_feedback: bool = flag(False, "ICRL ablation: flip the shown reward with probability "
                                           "--icrl_flip_feedback_prob (the recorded accuracy is not flipped)",
                                    column="flip_feedback", only="llm")
    icrl_flip_feedback_prob: Optional[float] = flag(
        None, "probability of flipping a shown reward, in [0, 1]; required with --icrl_flip_feedback",
        column="flip_prob", only="llm")
    max_contexts: int = flag(-1, "approximate strategies: number of contexts K", column="max_contexts", only="llm")
    approximate_context_sampling_method: Optional[str] = flag(
        None, f"approximate strategies: {' or '.join(SAMPLING_METHODS)} (required with them)",
        column="sampling_method", only="llm")
    temperature: float = flag(1.0, "sampling temperature of the model's label choice; 0 = greedy",
                              column="temperature", only="llm")
    train_k: int = flag(-1, "training steps (-1 or omitted: the whole training split, as published)",
                        column="train_k", extends=True)
    test_every: int = flag(500, "test every this many steps (and always at the first and the last step)",
                           column="test_every")
    test_k: int = flag(-1, "test examples (-1 or omitted: the whole test split, as published)", column="test_k")
    exemplars_per_label: int = flag(0, "gold exemplars per label, first in every context",
                                    column="exemplars_per_label", only="llm")
    seed: Optional[int] = flag(None, "required: seeds the context draws and the model's sampling (the paper: 100)",
                               column="seed")
    training_seed: Optional[int] = flag(
        None, "required: seeds the order of the training examples and the exemplars (the paper: 100)",
        column="training_seed")
    test_seed: Optional[int] = flag(None, "required: seeds which test examples are used (the paper: 100)",
                                    column="test_seed")
    max_model_len: Optional[int] = flag(None, "context window in tokens (default: the model's maximum length)",
                                        column="max_model_len", folder="maxlen", backend=True, only="llm")
    backend: str = flag("auto", "auto: vLLM when installed and a CUDA GPU is visible, else transformers",
                        folder="", only="llm", choices=BACKEND_CHOICES)
    device: Optional[str] = flag(None, "transformers backend: cpu, cuda, cuda:1 ... (default: cuda if visible)",
                                 folder="", backend=True, only="llm")
    dtype: str = flag("auto", "auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16",
                      folder="", backend=True, only="llm")
    rope_scaling: Optional[str] = flag(
        None, "RoPE scaling, both backends: TYPE:FACTOR:ORIGINAL_LEN (e.g. yarn:4.0:32768), none, or auto "
              "(default): as published, yarn:4.0:32768 for any model whose name contains Qwen2.5 (window "
              "131072), none for the others", folder="rope", backend=True, only="llm")
    eot_token: Optional[str] = flag(None, "end-of-turn token (default: read from the tokenizer)", folder="eot",
                                    backend=True, only="llm")
    published_tokenization: bool = flag(
        False, "reproduce the published code's quirks, for exact replication: a second begin-of-text token on "
               "Llama-3 prompts (vLLM 0.6.4 text prompts), labels forced as encode(' ' + label) (an extra '▁' "
               "token on Phi-3.5), and one automatic context size per model and task, the first run's, for ICRL "
               "and ICL runs alike (the published size cache); --published_tokenization is its old name",
        folder="pubtok", backend=True, added=True, only="llm", spelled="--published_quirks", switch=True)
    api_model: Optional[str] = flag(None, "model name the server knows (default: --model_name)", folder="apimodel",
                                    backend=True, only="llm")
    api_mode: str = flag("auto", "completions: prompt rendered here (chat template + prediction prefix) with a "
                                 "structured-output choice; chat: messages with a JSON-schema enum of the labels; "
                                 "auto: completions when the server supports it (--backend anthropic: completions "
                                 "prefills the prediction prefix, chat forces a tool call with an enum of the labels; "
                                 "auto: chat)", folder="api", backend=True,
                       only="llm", choices=("auto", "completions", "chat"))
    def as_record(self) -> dict[str, Any]:
        """config.json "args": every field (an ``optional`` group only when one of its fields is set;
        a strategy's own parameters for runs of that strategy), sorted by name, as JSON gives it back."""
        set_groups = {f.metadata["optional"] for f in fields(self)
                      if f.metadata.get("optional") and getattr(self, f.name) != f.default}
        strategy = self.context_strategy_name
        base = STRATEGIES.get(strategy).base if strategy is not None and strategy in STRATEGIES else None
        values = {f.name: getattr(self, f.name) for f in fields(self)
                  if not f.metadata.get("optional") or f.metadata["optional"] in set_groups - {"strategy"}
                  or base in f.metadata.get("owners", ())}
        return json.loads(json.dumps(dict(sorted(values.items()))))

    @property
    def zero_shot(self) -> bool:
        return self.max_context_examples == 0


@dataclass(frozen=True)
class RunOptions:
    """How a run executes, not what it computes (config.json "runtime_args")."""

    output_dir: str = flag("data", "results root")
    data_dir: Optional[str] = flag(None, "raw dataset files (default: $ICRL_DATA_DIR, else ../shared/datasets beside "
                                         "the checkout, else the Hugging Face Hub; README: Data)")
    overwrite: bool = flag(False, "replace an existing run with other arguments", switch=True)
    progress: bool = flag(True, "progress bar (--no-progress: logs only)")
    verbose: bool = flag(False, "also show the run's log (as in log.txt) on the console")
    debug_k: int = flag(0, "log the full prompt and output of the first k model calls")
    wandb: bool = flag(False, "also log to Weights & Biases, offline mode", switch=True)
    batch_size: Optional[int] = flag(
        None, "transformers backend: prompts per forward pass (default: on a GPU as many as its free memory holds "
              "for the step's prompts, on a CPU 8; halved when the device runs out of memory)", backend=True)
    tensor_parallel_size: Optional[int] = flag(None, "default: all visible GPUs", backend=True)
    pipeline_parallel_size: int = flag(1, "pipeline stages (GPUs or nodes)", backend=True)
    distributed_executor_backend: Optional[str] = flag(
        None, "mp (one node) or ray (several nodes) (default: vLLM's choice)", backend=True, choices=("mp", "ray"))
    gpu_memory_utilization: Optional[float] = flag(
        None, "share of memory for vLLM (default: 0.9 of the GPU memory; on the CPU build, a 4 GiB KV cache, at "
              "most a third of the free memory, given as a share of the whole memory)", backend=True)
    enforce_eager: Optional[bool] = flag(
        None, "vLLM without CUDA graphs / compilation (default: on for the CPU build, off on GPUs)", backend=True)
    base_url: Optional[str] = flag(
        None, "OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (vllm serve), or another endpoint of the API "
              "(default: $OPENAI_BASE_URL, $ANTHROPIC_BASE_URL, $GOOGLE_GEMINI_BASE_URL, else the API's)", backend=True)
    max_concurrency: int = flag(32, "requests in flight at once", backend=True)
    timeout: float = flag(600.0, "seconds per request", backend=True)
    max_retries: int = flag(5, "retries (with backoff) on 429, 5xx, timeouts", backend=True)
    first_answer_timeout: float = flag(FIRST_ANSWER_S, FIRST_ANSWER_HELP, backend=True, added=True)

    def as_record(self) -> dict[str, Any]:
        """config.json "runtime_args", sorted by name (an ``added`` field only when it is set)."""
        kept = {f.name: getattr(self, f.name) for f in sorted(fields(self), key=lambda f: f.name)
                if not (f.metadata["added"] and getattr(self, f.name) == f.default)}
        found: dict[str, Any] = json.loads(json.dumps(kept))
        return found


@dataclass(frozen=True)
class Secrets:
    """Never written: not in config.json, the log, the lock file nor a sweep's printed commands."""

    hf_token: Optional[str] = field(default=None, repr=False, metadata={
        "help": "for gated models; never written to disk (default: $HF_TOKEN)", "backend": True})
    api_key: Optional[str] = field(default=None, repr=False, metadata={
        "help": "API key, never written to disk (default: $OPENAI_API_KEY; --backend anthropic: "
                "$ANTHROPIC_API_KEY; --backend gemini: $GEMINI_API_KEY, $GOOGLE_API_KEY or $API_KEY)",
        "backend": True})


def _check_parameter_names() -> None:
    """A parameter a strategy or reward declares is its own flag: one that takes a flag of icrl's
    or one another part declares otherwise is refused naming both (a plugin's, at start)."""
    flags = {f.name for part in (_Spec, RunOptions, Secrets) for f in fields(part)}
    parts = [(f"the context strategy {e.base!r}", STRATEGIES.owner(name), e.cls.params)
             for name, e in STRATEGIES.items()] + \
            [(f"the reward {name!r}", REWARDS.owner(name), cls.params) for name, cls in REWARDS.items()]
    seen: dict[str, tuple[Param, str]] = {}
    for what, owner, params in parts:
        for param in params:
            mine = f"{what} of {plugins.owner_text(owner)}"
            if param.name in flags:
                raise UsageError(f"{param.flag}, a parameter of {mine}, is a flag of icrl already: rename it")
            first = seen.setdefault(param.name, (param, mine))
            if first[0] is not param and first[0] != param:
                raise UsageError(f"{param.flag} is declared twice, by {first[1]} and by {mine}: rename one")


_check_parameter_names()  # before RunSpec: a name declared twice is one line, not a TypeError


def _annotation(param: Param) -> object:
    return Optional[param.type] if param.default is None else param.type


if TYPE_CHECKING:
    class RunSpec(_Spec):
        """For the type checker: _Spec's fields typed; the declared parameters, known only at import, Any."""

        def __init__(self, **values: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...
else:
    RunSpec = dataclasses.make_dataclass(
        "RunSpec", [(d.param.name, _annotation(d.param), declared_field(d.param, d.group, d.owners))
                    for d in declared_params()],
        bases=(_Spec,), frozen=True, namespace={
            "__doc__": "What a run computes (config.json \"args\"): the published path's parts, then ours, then the "
                       "parameters the parts of the method declare.",
            "__module__": __name__})


@dataclass(frozen=True)
class RunConfig:
    """One run: what it computes, how it runs, its secrets. ``demo``: built from no arguments;
    ``ignored``: one warning per setting given that the run does not read."""

    spec: RunSpec = field(default_factory=RunSpec)
    options: RunOptions = field(default_factory=RunOptions)
    secrets: Secrets = field(default_factory=Secrets, repr=False)
    demo: bool = False
    ignored: tuple[str, ...] = ()  # warnings: published settings given that this run does not read (icrl.cli.validate)

    @classmethod
    def from_values(cls, values: Mapping[str, Any], demo: bool = False) -> "RunConfig":
        """From one flat mapping of field names (every name must be a field of one part)."""
        unknown = set(values) - set(FIELDS)
        if unknown:
            raise TypeError(f"not configuration fields: {', '.join(sorted(unknown))}")
        parts = {part: {k: v for k, v in values.items() if FIELDS[k][0] is part} for part in PARTS}
        return cls(RunSpec(**parts[RunSpec]), RunOptions(**parts[RunOptions]), Secrets(**parts[Secrets]), demo)

    def values(self) -> dict[str, Any]:
        """Every field by name (secrets included: never write this)."""
        return {**_shallow(self.spec), **_shallow(self.options), **_shallow(self.secrets)}

    def runtime_record(self) -> dict[str, Any]:
        """config.json "runtime_args": the options, and, as in every record written before they did
        anything, ``ucb_alpha``, ``prob_reset`` and ``p_exploration`` (a copy of "args"' values)."""
        record = {**self.options.as_record(), **{name: getattr(self.spec, name) for name in EXPLORATION_NAMES}}
        return json.loads(json.dumps(dict(sorted(record.items()))))

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with some fields (of any part) changed (its warnings kept)."""
        return dataclasses.replace(RunConfig.from_values({**self.values(), **changes}, demo=self.demo),
                                   ignored=self.ignored)

    # -- each part's own setting: what the composition root (icrl.run.assemble) gives each part --
    def _values(self, params: Sequence[Any]) -> dict[str, Any]:
        return {p.name: getattr(self.spec, p.name) for p in params}

    @functools.cached_property
    def shape(self) -> RunShape:
        """What kind of run it is (what the parts' checks read besides their own settings)."""
        s = self.spec
        return RunShape(s.icrl, s.agent, s.context_strategy_name, s.max_context_examples)

    @functools.cached_property
    def strategy_choice(self) -> Optional[StrategyChoice]:
        """The strategy the run chose (None: none named)."""
        s, published = self.spec, ("max_contexts", "approximate_context_sampling_method")
        values = {**{name: getattr(s, name) for name in published}, **self._values(strategy_params())}
        name = s.context_strategy_name
        return None if name is None else StrategyChoice(name, s.context_p_keep, values, s.published_tokenization)

    @functools.cached_property
    def exploration(self) -> Exploration:
        return Exploration(self.spec.p_exploration, self.spec.prob_reset, self.spec.ucb_alpha)

    @functools.cached_property
    def reward_setting(self) -> RewardSetting:
        s = self.spec
        values = self._values(reward_params()[1:])
        return RewardSetting(s.reward, s.icrl_flip_feedback, s.icrl_flip_feedback_prob, values)

    @functools.cached_property
    def agent_setting(self) -> AgentSetting:
        s, values = self.spec, self._values([*llm_params(), *agent_params()])
        return AgentSetting(s.agent, s.seed or 0, s.temperature, s.icrl_omit_feedback, s.features, values,
                            self.exploration)

    @functools.cached_property
    def call_options(self) -> dict[str, Any]:
        """The values of the options that name the model of a declared call (--judge_model, ...)."""
        return {call.option: getattr(self.spec, call.option) for call in registered_calls() if call.option}


PARTS = (RunSpec, RunOptions, Secrets)
# field name -> (part, dataclasses.Field)
FIELDS: dict[str, tuple[type, dataclasses.Field[Any]]] = {f.name: (part, f) for part in PARTS for f in fields(part)}


def _shallow(obj: _Spec | RunOptions | Secrets) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in fields(obj)}


# -- the name lists, derived from the metadata ------------------------------------------------------
RUNTIME_NAMES = frozenset(f.name for f in fields(RunOptions))
SECRET_NAMES = frozenset(f.name for f in fields(Secrets))
SECRET_FLAGS = tuple(f"--{f.name}" for f in fields(Secrets))
assert SECRET_FLAGS == SECRET_OPTIONS, "icrl.infra.masking must mask every field of Secrets"
BACKEND_NAMES = tuple(name for name, (_, f) in FIELDS.items() if f.metadata.get("backend"))
# (field, default, short name) of the run folder's optional parts, in the order they are named.
FOLDER_FIELDS = tuple((f.name, f.default, f.metadata["folder"]) for f in fields(RunSpec)
                      if f.metadata.get("folder") is not None)
# the fields whose folder part is their short name alone (their value is in config.json)
FOLDER_NAME_ONLY = frozenset(f.name for f in fields(RunSpec) if f.metadata.get("folder_value") is False)
# config.json "args" name -> results column, in column order.
RESULT_COLUMNS = {f.name: f.metadata["column"] for f in fields(RunSpec) if f.metadata.get("column")}
EXTENDING_NAMES = frozenset(f.name for f in fields(RunSpec) if f.metadata.get("extends"))
# Every field of RunSpec with its default.
SPEC_DEFAULTS = {f.name: f.default for f in fields(RunSpec)}
# Fields added after runs were recorded, with the value those runs had.
ADDED_DEFAULTS = {f.name: f.default for f in fields(RunSpec) if f.metadata.get("added")}
# the defaults of the fields config.json "args" leaves out while they are at them (role ``optional``)
OPTIONAL_DEFAULTS = {f.name: f.default for f in fields(RunSpec) if f.metadata.get("optional")}
# the fields only an LLM agent takes, and those only a learner takes (role ``only``), in field order
LLM_ONLY = tuple(f.name for f in fields(RunSpec) if f.metadata.get("only") == "llm")
LEARNER_ONLY = tuple(f.name for f in fields(RunSpec) if f.metadata.get("only") == "learner")


def flag_of(name: str) -> str:
    """A field's flag as --help shows it first (``--published_quirks`` for published_tokenization)."""
    return FIELDS[name][1].metadata.get("flag") or f"--{name}"


def given(value: Optional[T], name: str) -> T:
    """The value of a setting that every validated run has (``icrl.cli.validate`` refuses a run
    without its --task_name, --icrl or --no-icrl, or a seed), typed as set; a UsageError naming
    its flag where a configuration was not validated."""
    if value is None:
        raise UsageError(f"{flag_of(name)} is required")
    return value
