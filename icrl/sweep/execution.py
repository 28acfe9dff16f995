"""A sweep's runs and how they execute: ``Run`` (one run's words, parsed), and ``execute`` (runs
that share one backend, in lock-step: lockstep.py), group by group (``run_all``). run_sweep.py
(runner.py) and the Ray workers (worker.py, ray_launcher.py) both run runs through here."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Callable, Hashable, Optional, Protocol, Sequence

from ..backends import Backend
from ..cli.run import parse_args
from ..cli.validate import WrongAgentSetting
from ..config import RunConfig
from ..errors import UsageError
from ..infra import plugins
from ..infra.masking import mask_words, scrub
from ..records import experiment_dir, read_log
from ..run.environment import backend_spec_of
from ..run import plugins as run_plugins
from ..run.experiment import Experiment
from ..run.observers import TestLines
from .lockstep import LockStep, Outcome, RunBackend


class Run:
    """One run of the sweep: its words, its parsed arguments (or why they are invalid)."""

    def __init__(self, index: int, words: list[str], weights: bool = True) -> None:
        """``weights=False``: the run is only estimated, so its model needs only a tokenizer."""
        self.index, self.words = index, words
        self.args: Optional[RunConfig] = None
        self.error: Optional[str] = None
        self.out_dir: Optional[Path] = None
        try:
            self.args = parse_args(words, weights).replace(progress=False)  # the sweep has one bar for all runs
            self.out_dir = experiment_dir(self.args.options.output_dir, self.args.spec.as_record())
        except UsageError as exc:
            self.error = scrub(str(exc))
            if isinstance(exc, WrongAgentSetting):  # e.g. a learner crossed with LLM settings
                self.error += ("; in a sweep, give learners and LLM runs their own [[run]] tables "
                               "(docs/sweeps.md, bench/methods/learners.toml)")

    def command(self) -> str:
        given = [word for plugin in plugins.loaded() for word in (plugins.FLAG, plugin.source)]
        return shlex.join(["python", "run_experiment.py", *given, *mask_words(self.words)])

    def valid_args(self) -> RunConfig:
        """The parsed arguments of a valid run (only valid runs are keyed, labelled and run)."""
        assert self.args is not None, f"run #{self.index} is invalid: {self.error}"
        return self.args

    def backend_key(self) -> Hashable:
        """The run's BackendSpec without engine-wide values: runs with equal keys share a backend."""
        return backend_spec_of(self.valid_args(), engine=False)

    def label(self) -> str:
        a = self.valid_args()
        what = a.spec.context_strategy_name if a.spec.agent == "llm" else f"agent {a.spec.agent}"
        return f"#{self.index} {a.spec.task_name} {what} seed {a.spec.seed}"


class Listener(Protocol):
    """What hears a group's progress: ``update()`` after each batch, ``close()`` at the end."""

    def update(self) -> None: ...

    def close(self) -> None: ...


class Progress:
    """One bar for the whole sweep (steps of all runs) and a line per test step."""

    def __init__(self, experiments: dict[Run, Experiment], enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        self.experiments = experiments
        self.bar = tqdm(total=self._total(), disable=not enabled, desc="sweep", unit="step", dynamic_ncols=True)
        if not enabled:
            return
        for run, exp in experiments.items():
            exp.observers.append(TestLines(self.bar.write, run.label()))

    def _total(self) -> int:
        total = 0
        for run, exp in self.experiments.items():
            steps = exp.steps
            total += steps if steps is not None else max(run.valid_args().spec.train_k, 0)
        return total

    def update(self) -> None:
        self.bar.total = self._total()
        self.bar.n = sum(exp.steps_done for exp in self.experiments.values())
        self.bar.refresh()

    def close(self) -> None:
        self.update()
        self.bar.close()


def execute(runs: Sequence[Run], *, backend: Optional[Backend] = None, width: Optional[int] = None,
            progress: bool = True, reporter: Optional[Callable[[dict[Run, Experiment]], Listener]] = None
            ) -> list[Outcome]:
    """Run valid ``runs`` (one backend configuration) in lock-step; ``backend``: already loaded
    (else loaded here, unless every run is already finished). ``reporter(experiments)``, when
    given, makes what hears the progress (``update()`` after each batch, ``close()``) in place of
    the console bar (a Ray worker reports to the driver)."""
    experiments = {run: Experiment(run.valid_args()) for run in runs}
    owned = None  # a backend loaded here is closed here, when the group is done
    if backend is None and not all(read_log(exp.out_dir).finished for exp in experiments.values()):
        loader = experiments[runs[0]]
        loader.load_backend()
        backend, loader.backend = loader.backend, None
        owned = backend
    bar: Listener = reporter(experiments) if reporter is not None else Progress(experiments, enabled=progress)

    def target(exp: Experiment) -> Callable[[RunBackend], dict[str, Any]]:
        def start(proxy: RunBackend) -> dict[str, Any]:
            exp.backend = proxy
            try:
                return exp.run()
            except Exception as exc:  # a plugin's failure: one line naming it and the step
                line = run_plugins.failure(exc, exp.steps_done)
                if line is None:
                    raise
                raise UsageError(line) from exc
        return start

    lockstep = LockStep(backend, width=width, on_batch=bar.update)
    try:
        return lockstep.run([target(experiments[run]) for run in runs])
    finally:
        bar.close()
        if owned is not None:
            close_backend(owned)


def groups_of(runs: Sequence[Run]) -> list[list[Run]]:
    groups: dict[Hashable, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.backend_key(), []).append(run)
    return list(groups.values())


def close_backend(backend: object) -> None:
    close = getattr(backend, "close", None)
    if close is not None:
        close()


def run_all(runs: Sequence[Run], width: Optional[int], progress: bool = True) -> dict[int, Outcome]:
    """Every valid run, group by group; returns outcomes by run index (invalid runs: failed)."""
    outcomes: dict[int, Outcome] = {}
    for run in runs:
        if run.error is not None:
            outcomes[run.index] = Outcome(status="failed", error=run.error)
    for group in groups_of([r for r in runs if r.error is None]):
        try:
            results = execute(group, width=width, progress=progress)
        except UsageError as exc:  # the group's model could not load
            results = [Outcome(status="failed", error=str(exc)) for _ in group]
        for run, outcome in zip(group, results):
            outcomes[run.index] = outcome
    return outcomes
