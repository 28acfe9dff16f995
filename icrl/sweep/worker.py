"""A sweep worker: one loaded backend, kept between batches of runs, advancing each batch in
lock-step. Plain Python, with no Ray in it: ``icrl.sweep.ray_launcher`` makes it a Ray actor
(one process, one model load, many runs); tests drive it directly.

A worker is handed runs as (index, run_experiment.py words), rebuilds them as the sweep did
(``Run``), and runs them with ``runner.execute`` on its backend: each run's records are those
run_experiment.py writes alone, whichever worker writes them and whoever shares the batch.
Runs already finished are reported as such; unfinished ones resume from their records, so a
batch taken over from a worker that died carries on where that worker stopped. A worker loads
the driver's plugins ($ICRL_PLUGINS, set by ray_launcher) when it starts, before any run's words
are parsed and before the run configuration is built: this module imports none of icrl's run
configuration at import time (a Ray worker process imports it first).
"""

from __future__ import annotations

import os
import threading
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Hashable, Optional, Sequence

from ..errors import UsageError
from ..infra import plugins
from ..infra.masking import scrub
from .lockstep import Outcome

if TYPE_CHECKING:
    from ..backends import Backend
    from ..run.experiment import Experiment
    from .execution import Run

Steps = tuple[int, Optional[int]]  # a run's steps done, and planned (None: not known yet)
Polled = tuple[dict[int, Steps], list[str]]  # what poll() gives: steps by run index, and test lines


class Reporter:
    """What the driver polls: steps done per run (by sweep index) and the test lines so far."""

    def __init__(self, experiments: dict[Run, Experiment], sink: "SweepWorker") -> None:
        from ..run.observers import TestLines  # here: the module is imported before the plugins load

        self.experiments, self.sink = experiments, sink
        for run, exp in experiments.items():
            exp.observers.append(TestLines(sink.line, run.label()))
        self.update()

    def update(self) -> None:
        with self.sink.lock:
            for run, exp in self.experiments.items():
                self.sink.steps[run.index] = (exp.steps_done, exp.steps)

    def close(self) -> None:
        self.update()


class SweepWorker:
    """Loads a backend once per configuration (``load``) and runs batches of runs on it (``run``);
    ``poll`` may be called from another thread while a batch runs (a Ray actor with two
    concurrent calls)."""

    def __init__(self, cwd: Optional[str] = None) -> None:
        if cwd and os.path.isdir(cwd):  # relative --output_dir and --data_dir mean what they mean to the driver
            os.chdir(cwd)
        plugins.load()  # the driver's ($ICRL_PLUGINS, set by ray_launcher) and the installed ones
        self.backend: Optional[Backend] = None
        self.key: Optional[Hashable] = None
        self.lock = threading.Lock()
        self.steps: dict[int, Steps] = {}
        self.lines: list[str] = []

    def ready(self) -> int:
        """The worker's process id (the driver waits on this to know the worker is placed)."""
        return os.getpid()

    def load(self, words: Sequence[str]) -> str:
        """Load the backend of the run with these words (if not already loaded); a model that
        cannot load raises UsageError. Returns the backend's name."""
        run = self._runs([(0, list(words))])[0]
        if run.error is not None:
            raise UsageError(run.error)
        self._backend_for(run)
        return getattr(self.backend, "name", "")

    def run(self, batch: Sequence[tuple[int, list[str]]], width: Optional[int] = None) -> list[dict[str, Any]]:
        """Run every run of ``batch`` (one backend configuration) in lock-step; their outcomes
        (``Outcome`` as a dict), in order."""
        from . import execution as runner

        runs = self._runs(batch)
        bad = next((r for r in runs if r.error is not None), None)
        if bad is not None:  # the driver sends valid runs only: words that no longer parse here
            raise UsageError(f"run #{bad.index} is invalid on this worker: {bad.error}")
        try:
            backend = self._backend_for(runs[0])
        except UsageError as exc:
            return [asdict(Outcome(status="failed", error=scrub(str(exc)))) for _ in runs]
        outcomes = runner.execute(runs, backend=backend, width=width, progress=False,
                                  reporter=lambda experiments: Reporter(experiments, self))
        return [asdict(o) for o in outcomes]

    def poll(self) -> Polled:
        """(steps done and planned per run index, the test lines since the last poll)."""
        with self.lock:
            lines, self.lines = self.lines, []
            return dict(self.steps), lines

    def line(self, text: str) -> None:
        with self.lock:
            self.lines.append(text)

    def close(self) -> None:
        from .execution import close_backend

        if self.backend is not None:
            close_backend(self.backend)
        self.backend, self.key = None, None

    # -- internals -----------------------------------------------------------------------------
    @staticmethod
    def _runs(batch: Sequence[tuple[int, Sequence[str]]]) -> list[Run]:
        from .execution import Run

        return [Run(index, list(words)) for index, words in batch]

    def _backend_for(self, run: Run) -> Optional[Backend]:
        from ..run.environment import load_backend_of

        key = run.backend_key()
        if self.backend is None or key != self.key:
            self.close()
            self.backend = load_backend_of(run.valid_args())
            self.key = key
        return self.backend
