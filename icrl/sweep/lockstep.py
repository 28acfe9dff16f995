"""Lock-step execution: many experiments, one loaded backend, their model calls batched.

Each experiment runs its own, unchanged loop (``Experiment.run``) in a thread, with a
``RunBackend`` in place of a real backend. Its ``predict`` hands the call to the
``LockStep`` coordinator and waits. When every live run waits in ``predict`` (or has
ended), the coordinator, in the calling (main) thread, sends all waiting calls to the real
backend as ONE ``predict_calls`` and hands each run its outputs. So a run's records are those
it writes alone, provided a prompt's output does not depend on what else is in the call
(seeded per-prompt sampling: true of the transformers and vLLM backends).

Only one run thread executes at a time (a baton, released while waiting in ``predict``):
rendering, tokenizing and writing records never run concurrently, and the backend is only
used by the coordinator. ``width`` bounds the runs live at once (1: one after the other).

Interruption: ``interrupt(signum)`` makes every waiting (and every later) ``predict`` raise
``Interrupted``; each experiment then saves its progress as it does alone.

Usage: on a backend whose API reports usage (``icrl.backends.usage``), each run's view reports
the run's own share (``MeteredRunBackend.usage()``), so its records hold what its calls used:
a batch's usage is told apart by caller where the backend can (``ReportsCallUsage``: the
server backend), else its calls are sent one after the other, each measured; a run's direct
calls (``generate``) are measured around the call, when no batch is in flight.
"""

from __future__ import annotations

import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Protocol, Sequence, Union, runtime_checkable

from ..backends import Backend, Call, predict_calls
from ..backends.usage import ReportsCallUsage, ReportsUsage, Usage
from ..errors import UsageError
from ..infra.signals import Interrupted


@dataclass
class Outcome:
    """How one run of a sweep ended."""

    status: str = "pending"  # finished, failed, interrupted, pending
    summary: Optional[dict[str, Any]] = None
    error: Optional[str] = None
    seconds: float = 0.0
    traceback: Optional[str] = None


class RunBackend:
    """A run's view of the shared backend: everything but ``predict`` is the backend's own."""

    def __init__(self, coordinator: "LockStep", key: int) -> None:
        self._coordinator = coordinator
        self._key = key

    def __getattr__(self, name: str) -> Any:
        return getattr(self._coordinator.backend, name)

    def predict(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                progress: Optional[Callable[[int], None]] = None) -> list[str]:
        out = self._coordinator.submit(self._key, Call(list(prompts), list(labels), temperature, seed, self._key))
        if progress is not None:  # the shared call returns all at once
            progress(len(out))
        return out


class MeteredRunBackend(RunBackend):
    """A run's view of a shared backend that reports usage: ``usage()`` is the run's share."""

    def __init__(self, coordinator: "LockStep", key: int) -> None:
        super().__init__(coordinator, key)
        self._own = Usage()  # its direct calls' (generate)

    def usage(self) -> Usage:
        return self._own + self._coordinator.spent.get(self._key, Usage())

    def generate(self, *args: Any, **kwargs: Any) -> Any:
        backend = self._coordinator.backend
        if not isinstance(backend, ReportsUsage) or not isinstance(backend, _Generates):
            raise AttributeError(f"{type(backend).__name__} has no generate() to meter (a metered view needs "
                                 f"generate() and usage())")
        before = backend.usage()
        try:
            return backend.generate(*args, **kwargs)
        finally:
            self._own = self._own + (backend.usage() - before)


@runtime_checkable
class _Generates(Protocol):
    def generate(self, *args: Any, **kwargs: Any) -> Any: ...


@dataclass
class _Job:
    key: int
    target: Callable[[RunBackend], dict[str, Any]]
    outcome: Outcome = field(default_factory=Outcome)
    thread: Optional[threading.Thread] = None


class LockStep:
    """Runs ``jobs`` (callables taking a backend and returning a summary) together on ``backend``."""

    def __init__(self, backend: Optional[Backend], width: Optional[int] = None,
                 on_batch: Optional[Callable[[], None]] = None) -> None:
        self.backend = backend
        self.width = width
        self.on_batch = on_batch or (lambda: None)
        self.cond = threading.Condition()
        self.baton = threading.Lock()
        self.pending: dict[int, Call] = {}
        self.results: dict[int, Union[list[str], BaseException]] = {}
        self.live: set[int] = set()
        self.signum: Optional[int] = None
        self.batches = 0
        self.spent: dict[int, Usage] = {}  # run key -> the usage of its batched calls (a backend that reports usage)

    # -- run threads ----------------------------------------------------------------------
    def submit(self, key: int, call: Call) -> list[str]:
        with self.cond:
            if self.signum is not None:
                raise Interrupted(self.signum)
            self.pending[key] = call
            self.cond.notify_all()
        self.baton.release()
        try:
            with self.cond:
                while key not in self.results and self.signum is None:
                    self.cond.wait()
                result = self.results.pop(key, None)
                self.pending.pop(key, None)
                signum = self.signum
        finally:
            self.baton.acquire()
        if result is None:  # the wait ended on a signal: no result came
            assert signum is not None
            raise Interrupted(signum)
        if isinstance(result, BaseException):
            raise result
        return result

    def _body(self, job: _Job) -> None:
        outcome, tic = job.outcome, time.perf_counter()
        self.baton.acquire()
        try:
            view = MeteredRunBackend if isinstance(self.backend, ReportsUsage) else RunBackend
            outcome.summary = job.target(view(self, job.key))
            outcome.status = "finished" if outcome.summary.get("finished") else "failed"
            if outcome.status == "failed":
                outcome.error = "ended without finishing"
        except (KeyboardInterrupt, Interrupted):
            outcome.status = "interrupted"
        except UsageError as exc:
            outcome.status, outcome.error = "failed", str(exc)
        except Exception as exc:  # noqa: BLE001 - a bug or an engine failure: this run fails, the others go on
            outcome.status, outcome.error = "failed", f"{type(exc).__name__}: {exc}"
            outcome.traceback = traceback.format_exc()
        finally:
            outcome.seconds = time.perf_counter() - tic
            self.baton.release()
            with self.cond:
                self.live.discard(job.key)
                self.cond.notify_all()

    # -- the coordinator (main thread) ----------------------------------------------------------
    def run(self, targets: Sequence[Callable[[RunBackend], dict[str, Any]]]) -> list[Outcome]:
        """Run every target to its end (or interruption) and return their outcomes, in order.
        KeyboardInterrupt / Interrupted in this thread are passed on after the runs saved."""
        jobs = [_Job(i, t) for i, t in enumerate(targets)]
        waiting = list(jobs)
        try:
            while True:
                with self.cond:
                    while waiting and self.signum is None and (self.width is None or len(self.live) < self.width):
                        job = waiting.pop(0)
                        job.thread = threading.Thread(target=self._body, args=(job,), name=f"run-{job.key}",
                                                      daemon=True)
                        self.live.add(job.key)
                        job.thread.start()
                    if not self.live:
                        break
                    if not (self.live <= set(self.pending)):
                        self.cond.wait(timeout=0.2)  # a timeout keeps signals deliverable
                        continue
                    calls = [(key, self.pending.pop(key)) for key in sorted(self.live)]
                self._serve(calls)
                self.batches += 1
                self.on_batch()
        except (KeyboardInterrupt, Interrupted) as exc:
            self.interrupt(exc.signum if isinstance(exc, Interrupted) else 2)
            self._join(jobs)
            raise
        return [job.outcome for job in jobs]

    def _serve(self, calls: Sequence[tuple[int, Call]]) -> None:
        """All calls in one backend call; if that fails, each alone, so only the runs whose
        call fails get the error."""
        try:
            outputs: list[Union[list[str], BaseException]] = list(self._predict(calls))
        except (KeyboardInterrupt, Interrupted):
            raise
        except Exception as exc:  # noqa: BLE001 - the batch failed: retry its calls one by one
            if len(calls) == 1:
                outputs = [exc]
            else:
                outputs = []
                for key, call in calls:
                    try:
                        outputs.append(self._predict([(key, call)])[0])
                    except (KeyboardInterrupt, Interrupted):
                        raise
                    except Exception as one:  # noqa: BLE001 - this call's own failure goes to its run
                        outputs.append(one)
        with self.cond:
            for (key, _), out in zip(calls, outputs):
                self.results[key] = out
            self.cond.notify_all()

    def _predict(self, calls: Sequence[tuple[int, Call]]) -> list[list[str]]:
        """The outputs of ``calls`` ((key, Call) pairs), their usage added to each run's share."""
        backend = self.backend
        if not isinstance(backend, ReportsUsage):
            return predict_calls(backend, [c for _, c in calls])
        if isinstance(backend, ReportsCallUsage):
            before = {key: backend.usage_of(key) for key, _ in calls}
            try:
                return predict_calls(backend, [c for _, c in calls])
            finally:  # what a failed batch spent is spent too
                for key, _ in calls:
                    self.spent[key] = self.spent.get(key, Usage()) + (backend.usage_of(key) - before[key])
        outputs: list[list[str]] = []
        for key, call in calls:  # usage told apart only call by call
            total = backend.usage()
            try:
                outputs.extend(predict_calls(backend, [call]))
            finally:
                self.spent[key] = self.spent.get(key, Usage()) + (backend.usage() - total)
        return outputs

    def interrupt(self, signum: int) -> None:
        with self.cond:
            if self.signum is None:
                self.signum = int(signum)
            self.cond.notify_all()

    def _join(self, jobs: Sequence[_Job]) -> None:
        """Wait for every started run to save its progress (further Ctrl-C are ignored here)."""
        for job in jobs:
            while job.thread is not None and job.thread.is_alive():
                try:
                    job.thread.join(timeout=0.2)
                except (KeyboardInterrupt, Interrupted):
                    continue
            if job.thread is None:
                job.outcome.status = "interrupted"
