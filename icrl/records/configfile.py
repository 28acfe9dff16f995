"""config.json, typed: what it holds field by field (``ConfigFile``), read strictly.

``ConfigFile.parse(value, where)`` is the one parse of config.json: every section is a dataclass
(``args`` and ``runtime_args`` are checked against the run configuration's own field types,
``icrl.config``: a field of the run is a field here without an edit), every number finite,
no key unknown where the schema is closed (``backend`` may hold a backend's own fields;
``args`` a plugin's parameters). What the record then shows wrong with itself is checked by
``icrl.records.log`` (for the readers and a resume alike), what it shows against the data and
the arguments by ``icrl.run.rebuild``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from ..config import EXPLORATION_NAMES, SPEC_DEFAULTS, RunOptions, RunSpec
from .plan import Plan
from .typed import expected, fits, hints, parse, shown



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
