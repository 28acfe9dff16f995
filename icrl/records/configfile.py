"""config.json, typed: what it holds field by field (``ConfigFile``), read strictly, and what
config.json alone shows wrong with itself (``problem``).

``ConfigFile.parse(value, where)`` is the one parse of config.json: every section is a dataclass
(``args`` and ``runtime_args`` are checked against the run configuration's own field types,
``icrl.config``: a field of the run is a field here without an edit), every number finite,
no key unknown where the schema is closed (``backend`` may hold a backend's own fields;
``args`` a plugin's parameters). ``problem(config)`` then checks the record against itself:
the format version, the plan (``resolved``) against the arguments and the data sizes it
records, the test set and exemplars against the labels. The readers and a resume run both, so
they refuse the same config.json (``icrl.records.log``); a resume then checks it against the
data and the arguments it is given (``icrl.run.rebuild``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..config import EXPLORATION_NAMES, SPEC_DEFAULTS, RunOptions, RunSpec
from .layout import FORMAT_VERSION
from .plan import Plan, mode_of
from .typed import expected, fits, hints, parse, shown

MODES = ("icrl", "icl", "zero_shot")


@dataclass(frozen=True)
class Resolved:
    """``resolved``: the plan the arguments gave (an extension rewrites steps and test steps)."""

    mode: str  # "icrl", "icl" or "zero_shot"
    max_context_examples: Optional[int]  # context episodes, after the exemplars are subtracted; null for a learner
    steps: int
    test_steps: List[int]
    num_exemplars: int
    train_examples: int
    test_examples: int


@dataclass(frozen=True)
class BackendRecord:
    """``backend``: ``Backend.describe()`` (``{"name": "none"}`` for a learner); the fields named
    here are typed where present, a backend's own others are kept in ``others``."""

    backend: Optional[str] = None
    name: Optional[str] = None
    model_name: Optional[str] = None
    max_model_len: Optional[int] = None
    supports_system_role: Optional[bool] = None
    eot_token: Optional[str] = None
    published_tokenization: Optional[bool] = None
    device: Optional[str] = None
    dtype: Optional[str] = None
    batch_size: Optional[int] = None  # null: chosen per step from the GPU's free memory
    prefix_reuse: Optional[bool] = None
    api_model: Optional[str] = None  # a hosted API's name of the model (what the run is billed for)
    base_url: Optional[str] = None
    others: Dict[str, Any] = field(default_factory=dict, metadata={"extra": True})


@dataclass(frozen=True)
class Environment:
    """``environment``: where the run was computed."""

    icrl: str
    python: str
    platform: str
    packages: Dict[str, str]
    git_commit: Optional[str]
    git_dirty: Optional[bool]
    device: str


@dataclass(frozen=True)
class Dataset:
    task: str
    fingerprint: str
    labels: List[str]
    num_train: int
    num_test: int


@dataclass(frozen=True)
class TestSet:
    __test__ = False  # not a test class (pytest collects classes named Test*)

    ids: List[int]
    prompts: List[str]
    answers: List[str]


@dataclass(frozen=True)
class Exemplar:
    id: int
    prompt: str
    answer: str


@dataclass(frozen=True)
class Extension:
    """One extension of a finished run to a larger --train_k."""

    start: int = field(metadata={"json": "from"})
    to: int
    train_k_before: int
    train_k: int
    at: str


@dataclass(frozen=True)
class PluginRecord:
    module: str
    sha256: str


@dataclass(frozen=True)
class ConfigFile:
    """config.json: written when a run starts, rewritten only when it is extended. ``args`` and
    ``runtime_args`` as recorded (checked against ``RunSpec``'s and ``RunOptions``' types: see
    ``spec`` for the run's settings typed)."""

    format_version: int
    created: str
    args: Dict[str, Any]
    runtime_args: Dict[str, Any]
    resolved: Resolved
    backend: BackendRecord
    environment: Environment
    dataset: Dataset
    test_set: TestSet
    train_example_ids: List[int]
    exemplars: List[Exemplar]
    extended: List[Extension] = field(default_factory=list)
    plugins: Optional[List[PluginRecord]] = field(default=None, metadata={"optional": True})

    @classmethod
    def parse(cls, value: object, where: str) -> "ConfigFile":
        """config.json's JSON value, every field checked (module docstring): DamagedRecords naming
        ``where`` and the field otherwise."""
        config: ConfigFile = parse(cls, value, where)
        for section, types in (("args", args_types()), ("runtime_args", runtime_types())):
            for name, item in getattr(config, section).items():
                if name in types and not fits(item, types[name]):
                    from ..errors import DamagedRecords

                    raise DamagedRecords(f"{where}: field '{section}.{name}' is {shown(item)}, expected "
                                         f"{expected(types[name])}")
        return config

    @property
    def spec(self) -> RunSpec:
        """The run's settings as recorded (a field the record leaves out at its default; a
        parameter of a plugin that is not loaded left out)."""
        return RunSpec(**{**SPEC_DEFAULTS, **{k: v for k, v in self.args.items() if k in SPEC_DEFAULTS}})

    @property
    def labels(self) -> list[str]:
        return self.dataset.labels

    @property
    def plugin_modules(self) -> list[str]:
        return [p.module for p in self.plugins or []]

    def plan(self) -> Plan:
        r = self.resolved
        return Plan(r.mode, r.max_context_examples, r.steps, tuple(r.test_steps))


def args_types() -> dict[str, Any]:
    """config.json ``args``: name -> type, as ``RunSpec`` declares them, each also null (a setting
    one kind of run does not use is recorded as null by it: a learner's model name)."""
    return {name: Optional[kind] for name, kind in hints(RunSpec).items()}


def runtime_types() -> dict[str, Any]:
    """config.json ``runtime_args``: ``RunOptions``' fields and the copies of the three exploration
    settings, each also null (records written before a field existed lack it)."""
    spec = hints(RunSpec)
    return {**{name: Optional[kind] for name, kind in hints(RunOptions).items()},
            **{name: Optional[spec[name]] for name in EXPLORATION_NAMES}}


def problem(config: ConfigFile) -> Optional[str]:
    """What config.json shows wrong with itself (module docstring), in words that follow its
    path, or None."""
    if config.format_version != FORMAT_VERSION:
        return (f"format_version is {config.format_version}, and this icrl reads format {FORMAT_VERSION} (a run of "
                f"another version of icrl)")
    return _plan_problem(config) or _data_problem(config)


def _plan_problem(config: ConfigFile) -> Optional[str]:
    r, spec, dataset = config.resolved, config.spec, config.dataset
    if r.mode not in MODES:
        return f"resolved.mode is {r.mode!r}, not one of {', '.join(MODES)}"
    if r.num_exemplars != len(config.exemplars):
        return f"resolved.num_exemplars is {r.num_exemplars}, and config.json holds {len(config.exemplars)} exemplars"
    if not isinstance(spec.train_k, int) or spec.train_k == 0 or spec.train_k < -1:
        return f"args.train_k is {spec.train_k!r}"
    if not isinstance(spec.test_every, int) or spec.test_every < 1:
        return f"args.test_every is {spec.test_every!r}"
    pool = dataset.num_train - r.num_exemplars
    zero_shot = r.mode == "zero_shot"
    num_train = 0 if zero_shot else (pool if spec.train_k == -1 else min(spec.train_k, pool))
    size = _size_problem(config)
    if size is not None:
        return size
    if spec.icrl is None or r.mode != mode_of(spec.icrl, r.max_context_examples):
        return f"resolved.mode is {r.mode!r}, and args give icrl {spec.icrl!r} with {r.max_context_examples!r} episodes"
    starts = [e.start for e in config.extended]
    if not all(0 < e.start < e.to for e in config.extended):
        return "extended is not a list of extensions (from, to steps)"
    plan = Plan.of(r.mode != "icl", r.max_context_examples, num_train, spec.test_every)
    plan = plan.with_tests(s - 1 for s in starts if s <= plan.steps)
    for name, value, planned in (("steps", r.steps, plan.steps), ("test_steps", r.test_steps, list(plan.test_steps)),
                                 ("train_examples", r.train_examples, num_train)):
        if value != planned:
            return f"resolved.{name} is {value!r}, the run plans {planned!r}"
    ids = len(config.train_example_ids)
    if ids != (0 if zero_shot else r.steps):
        return f"train_example_ids has {ids} ids for {r.steps} steps"
    return None


def _size_problem(config: ConfigFile) -> Optional[str]:
    """resolved.max_context_examples against the arguments: None for a learner, the given size
    less the exemplars (0: zero-shot), or a size >= 1 found from the window."""
    size, given, spec = config.resolved.max_context_examples, config.spec.max_context_examples, config.spec
    if spec.agent not in (None, "llm"):
        planned: object = None
    elif given is not None:
        planned = 0 if given == 0 else given - config.resolved.num_exemplars
    else:
        planned = size if isinstance(size, int) and size >= 1 else "a number of episodes >= 1"
    if size != planned or (size is not None and size < 0):
        return f"resolved.max_context_examples is {size!r}, the arguments give {planned!r}"
    return None


def _data_problem(config: ConfigFile) -> Optional[str]:
    labels, tests = config.dataset.labels, config.test_set
    if not labels or len(set(labels)) != len(labels):
        return "dataset.labels is not a list of distinct labels"
    if not len(tests.ids) == len(tests.prompts) == len(tests.answers) == config.resolved.test_examples:
        return (f"test_set holds {len(tests.ids)} ids, {len(tests.prompts)} prompts and {len(tests.answers)} "
                f"answers for resolved.test_examples {config.resolved.test_examples}")
    if not tests.ids:
        return "test_set is empty"
    known = set(labels)
    if any(answer not in known for answer in tests.answers):
        return "the labels in config.json (dataset.labels) do not hold the test set's answers (test_set.answers)"
    if any(e.answer not in known for e in config.exemplars):
        return "exemplars' answers are not labels of dataset.labels"
    return None
