"""run_sweep.py --ray: a sweep's runs spread over persistent Ray workers.

Each worker is a Ray actor (``icrl.sweep.worker.SweepWorker``) that loads its backend once and
advances the runs it is handed in lock-step, as run_sweep.py does in one process. The driver
(this module, in the run_sweep.py process):

1. connects: a local Ray instance (``ray.init()``) or an existing cluster (``--ray_address``);
   an address where nothing answers, a missing Ray, or more GPUs or CPUs than the cluster has
   are one-line errors (exit 2) before anything starts;
2. places the workers, saying so while Ray cannot place them yet, and gives up after
   ``--ray_wait_s`` (exit 2);
3. has every worker load its first backend before any run starts: a model that cannot load is
   one line, exit 2, and no run directory has been written;
4. splits each backend configuration's runs into one batch per worker (run i to batch i mod W)
   and hands batches to idle workers. A run is in exactly one batch, and a batch with exactly
   one worker at a time, so no two workers write one run (each run directory is also locked
   by its writer, icrl/lock.py);
5. when a worker dies, its batch goes back to the queue and a new worker is started: the next
   worker to take it resumes each run from its records, to the step. A batch is given up (its
   unfinished runs reported as failed) only when its workers died ``BARREN_DEATHS`` times in a
   row without writing a line of its records: deaths after progress never end a sweep, however
   many (workers killed every few seconds: bench/chaos.py), and a batch that kills every worker
   it meets ends after a bounded count;
6. prints one progress bar and the test lines, and returns each run's outcome for the summary.

Ray's own log lines of steps 1 to 3 (its ``ray`` logger: e.g. a word on token authentication)
are held (``held_ray_lines``) and printed once the workers have loaded their models; a refusal
in those steps is the harness's one line alone, and the held lines go to the ``icrl`` logger at
debug level, not to the screen.

Runs already finished are reported by the driver itself (no worker, no model). The records do
not depend on which worker wrote them or with which other runs: outputs are seeded per prompt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import time
from collections import deque
from typing import Any, Callable, Iterator, Optional, Sequence

from ..cli.sweep import SweepOptions
from ..errors import UsageError
from ..infra import plugins
from ..infra.masking import scrub
from ..infra.words import plural
from ..records import read_log
from .execution import Run, execute, groups_of
from .lockstep import Outcome
from .worker import Polled, Steps, SweepWorker

INSTALL_HINT = "pip install -e .[ray] (make setup installs it)"
# Variables a worker on another node needs to see the data, models and caches the driver sees,
# and to wait as the driver's threads do (the wait policy run_sweep.py set, icrl/infra/threads.py).
FORWARDED_ENV = ("ICRL_DATA_DIR", "ICRL_CACHE_DIR", "ICRL_TOKENIZERS_DIR", "HF_HOME", "HF_HUB_OFFLINE",
                 "HF_HUB_CACHE", "ICRL_FAKE_DELAY_S", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
POLL_S = 1.0
SAY_EVERY_S = 30.0
BARREN_DEATHS = 3  # deaths in a row of a batch's workers, no line written in between: the batch fails


def import_ray() -> Any:  # the ray module (Any: mypy skips Ray's own annotations, pyproject.toml)
    try:
        import ray
    except ImportError:
        raise UsageError(f"--ray needs Ray, which is not installed here: {INSTALL_HINT}") from None
    return ray


def check_reachable(address: Optional[str], timeout: float = 5.0) -> None:
    """An explicit HOST:PORT must answer a TCP connection (Ray itself would retry for minutes)."""
    if address in (None, "", "auto", "local") or address.startswith("ray://"):
        return
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UsageError(f"--ray_address {address!r}: write HOST:PORT (the head's GCS port, 6379 by default), "
                         f"'auto' or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise UsageError(f"--ray_address {address}: nothing answers there ({exc.strerror or exc}); start the cluster "
                         f"(ray start --head on its head node) or fix the address") from None


def connect(ray: Any, address: Optional[str]) -> None:
    env = {name: os.environ[name] for name in FORWARDED_ENV if name in os.environ}
    if plugins.loaded():  # each worker loads the driver's plugins before it reads a run's words
        env[plugins.ENV] = plugins.environment_value()
    kwargs = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=True,
                  runtime_env={"env_vars": env} if env else None)
    if address:
        kwargs.pop("include_dashboard")  # a setting of the cluster, not of a driver joining it
    try:
        ray.init(address=address or None, **kwargs)
    except Exception as exc:  # noqa: BLE001 - Ray raises a bare Exception for a node that times out starting
        where = f"the Ray cluster at {address}" if address else "a local Ray instance"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UsageError(f"cannot connect to {where}: {first}") from None


def worker_shape(ray_resources: dict[str, float], runs: Sequence[Run], opts: SweepOptions) -> tuple[int, float, float]:
    """(workers, GPUs per worker, CPUs per worker), checked against the cluster."""
    gpus = float(ray_resources.get("GPU", 0))
    cpus = float(ray_resources.get("CPU", 0))
    per_gpu = opts.ray_gpus_per_worker
    if per_gpu is None:
        tp = [n for n in (getattr(r.args.spec, "tensor_parallel_size", None) for r in runs if r.args is not None) if n]
        per_gpu = float(max(tp)) if tp else (1.0 if gpus > 0 else 0.0)
    workers = opts.ray_workers
    if workers is None:
        workers = int(gpus // per_gpu) if per_gpu > 0 else 1
        if workers < 1:
            raise UsageError(f"each worker needs {per_gpu:g} GPUs but the Ray cluster has {gpus:g}; "
                             f"lower --ray_gpus_per_worker (or --tensor_parallel_size)")
    if workers * per_gpu > gpus:
        raise UsageError(f"{plural(workers, 'worker')} x {per_gpu:g} GPUs = {workers * per_gpu:g} GPUs, "
                         f"but the Ray cluster has {gpus:g}; lower --ray_workers or --ray_gpus_per_worker")
    if workers * opts.ray_cpus_per_worker > cpus:
        raise UsageError(f"{plural(workers, 'worker')} x {opts.ray_cpus_per_worker:g} CPUs = "
                         f"{workers * opts.ray_cpus_per_worker:g} CPUs, but the Ray cluster has {cpus:g}; "
                         f"lower --ray_workers or --ray_cpus_per_worker")
    return workers, per_gpu, opts.ray_cpus_per_worker


def shape_line(shape: tuple[int, float, float], runs: int, batches: int) -> str:
    """What the sweep says once Ray has its workers: how many, their share of the cluster, and
    the runs and batches they take ("Ray: 1 worker (0 GPUs, 1 CPU each) for 4 runs in 1 batch")."""
    workers, gpus, cpus = shape
    return (f"Ray: {plural(workers, 'worker')} ({plural(gpus, 'GPU')}, {plural(cpus, 'CPU')} each) for "
            f"{plural(runs, 'run')} in {plural(batches, 'batch', 'batches')}")


def batches(groups: Sequence[Sequence[Run]], workers: int) -> list[list[Run]]:
    """Each backend configuration's runs cut into at most ``workers`` batches (run i of the group
    to batch i mod W): every run in exactly one batch."""
    out = []
    for group in groups:
        k = min(workers, len(group))
        out += [list(group[i::k]) for i in range(k)]
    return out


def lines_written(batch: Sequence[Run]) -> int:
    """Lines the runs of ``batch`` have in their records (train.jsonl and test.jsonl): what a
    dead worker left for the next one; a line more since it took the batch is progress."""
    total = 0
    for out_dir in (run.out_dir for run in batch if run.out_dir is not None):  # a valid run's (all a batch has)
        for name in ("train.jsonl", "test.jsonl"):
            try:
                with open(out_dir / name, "rb") as f:
                    total += f.read().count(b"\n")
            except OSError:  # not written yet
                continue
    return total


def _cause(exc: BaseException) -> BaseException:
    """The exception a worker raised, out of Ray's wrapper."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    return scrub(text.splitlines()[0] if text else type(exc).__name__)


class Driver:
    """Places the workers, hands out batches, takes back a dead worker's batch (see module)."""

    def __init__(self, ray: Any, shape: tuple[int, float, float], cwd: str,
                 say: Optional[Callable[[str], None]] = None) -> None:
        self.ray = ray
        self.workers_wanted, self.gpus, self.cpus = shape
        self.remote = ray.remote(SweepWorker).options(num_gpus=self.gpus, num_cpus=self.cpus, max_concurrency=2)
        self.cwd = cwd
        self.say = say or (lambda text: print(text, file=sys.stderr, flush=True))
        self.actors: list[Any] = []  # Ray actor handles
        self.deaths = 0

    def _start(self) -> Any:
        return self.remote.remote(self.cwd)

    def place(self, wait_s: float) -> None:
        """Start the workers and wait until Ray has placed every one; UsageError after ``wait_s``."""
        self.actors = [self._start() for _ in range(self.workers_wanted)]
        pending = {actor.ready.remote(): actor for actor in self.actors}
        start = said = time.monotonic()
        while pending:
            ready, _ = self.ray.wait(list(pending), num_returns=len(pending), timeout=min(5.0, wait_s))
            for ref in ready:
                pending.pop(ref)
                try:
                    self.ray.get(ref)
                except Exception as exc:  # noqa: BLE001 - a worker that cannot start: say it in one line
                    raise UsageError(f"a Ray worker could not start: {_line(_cause(exc))}") from None
            now = time.monotonic()
            if pending and now - start >= wait_s:
                raise UsageError(f"Ray placed {len(self.actors) - len(pending)} of {len(self.actors)} workers "
                                 f"({self.gpus:g} GPUs and {self.cpus:g} CPUs each) in {wait_s:g} s; the cluster is "
                                 f"busy or too small: lower --ray_workers, or wait longer (--ray_wait_s)")
            if pending and now - said >= SAY_EVERY_S:
                said = now
                self.say(f"waiting for Ray to place {len(pending)} of {len(self.actors)} workers "
                         f"({self.gpus:g} GPUs, {self.cpus:g} CPUs each; giving up after {wait_s:g} s)")

    def load(self, words_per_actor: Sequence[list[str]]) -> None:
        """Each worker loads its first batch's backend; a model that cannot load: UsageError."""
        refs = [actor.load.remote(words) for actor, words in zip(self.actors, words_per_actor)]
        for ref in refs:
            try:
                self.ray.get(ref)
            except Exception as exc:  # noqa: BLE001
                raise UsageError(f"a Ray worker could not load the model: {_line(_cause(exc))}") from None

    def run(self, work: Sequence[list[Run]], on_poll: Callable[[list[Polled]], None],
            width: Optional[int] = None) -> dict[int, Outcome]:
        """Every batch of ``work`` (lists of Runs) to its end; outcomes by run index. A dead worker's
        batch is queued again and a new worker started, until its workers died ``BARREN_DEATHS``
        times in a row without a line written (see the module docstring)."""
        ray = self.ray
        queue = deque((batch, 0) for batch in work)  # (batch, deaths in a row without progress)
        idle = deque(self.actors)
        busy: dict[Any, tuple[Any, list[Run], int, int]] = {}  # ref -> (actor, batch, barren deaths, lines at hand-out)
        outcomes: dict[int, Outcome] = {}
        while queue or busy:
            while queue and idle:
                actor, (batch, barren) = idle.popleft(), queue.popleft()
                ref = actor.run.remote([(r.index, r.words) for r in batch], width)
                busy[ref] = (actor, batch, barren, lines_written(batch))
            done, _ = ray.wait(list(busy), num_returns=1, timeout=POLL_S)
            on_poll(self._poll([entry[0] for entry in busy.values()]))
            for ref in done:
                actor, batch, barren, before = busy.pop(ref)
                try:
                    results = ray.get(ref)
                except ray.exceptions.RayActorError as exc:
                    barren = 0 if lines_written(batch) > before else barren + 1
                    self._died(actor, batch, barren, exc, queue, idle, outcomes)
                    continue
                except Exception as exc:  # noqa: BLE001 - the batch failed as a whole: each run says why
                    for run in batch:
                        outcomes[run.index] = Outcome(status="failed", error=_line(_cause(exc)))
                    idle.append(actor)
                    continue
                for run, result in zip(batch, results):
                    outcomes[run.index] = Outcome(**result)
                idle.append(actor)
        return outcomes

    def _died(self, actor: Any, batch: list[Run], barren: int, exc: BaseException, queue: deque[tuple[list[Run], int]],
              idle: deque[Any], outcomes: dict[int, Outcome]) -> None:
        """A worker died running ``batch``: a new worker in its place, and the batch queued again,
        or failed after ``BARREN_DEATHS`` deaths in a row without a line written."""
        self.deaths += 1
        self.actors.remove(actor)
        replacement = self._start()
        self.actors.append(replacement)
        idle.append(replacement)
        if barren >= BARREN_DEATHS:
            for run in batch:
                outcomes[run.index] = Outcome(status="failed", error=(
                    f"its Ray workers died {barren} times in a row without writing a line; last: {_line(exc)}"))
            return
        labels = ", ".join(f"#{r.index}" for r in batch)
        self.say(f"a Ray worker died ({_line(exc)}); its runs {labels} resume on another worker")
        queue.appendleft((batch, barren))

    def _poll(self, actors: Sequence[Any]) -> list[Polled]:
        refs = [actor.poll.remote() for actor in actors]
        out = []
        for ref in refs:
            try:
                out.append(self.ray.get(ref, timeout=10))
            except Exception:  # noqa: BLE001 - a dying worker: the batch's own call says so
                continue
        return out

    def shutdown(self) -> None:
        for actor in self.actors:
            try:
                self.ray.kill(actor)
            except Exception:  # noqa: BLE001
                pass
        self.actors = []


class RayProgress:
    """One bar for the whole sweep, fed by the workers' polls, and their test lines."""

    def __init__(self, runs: Sequence[Run], enabled: bool = True) -> None:
        from tqdm.auto import tqdm

        self.steps: dict[int, Steps] = {}
        for run in runs:
            self.steps[run.index] = (0, max(run.valid_args().spec.train_k, 0))
        self.bar = tqdm(total=self._total(), disable=not enabled, desc="sweep", unit="step", dynamic_ncols=True)
        self.enabled = enabled

    def _total(self) -> int:
        return sum(planned if planned is not None else 0 for _, planned in self.steps.values())

    def __call__(self, polls: Sequence[Polled]) -> None:
        for steps, lines in polls:
            for index, (done, planned) in steps.items():
                old_planned = self.steps.get(index, (0, None))[1]
                self.steps[index] = (done, planned if planned is not None else old_planned)
            if self.enabled:
                for line in lines:
                    self.bar.write(line)
        self.bar.total = self._total()
        self.bar.n = sum(done for done, _ in self.steps.values())
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


class _Held(logging.Handler):
    """Keeps the records it is handed (Ray's lines while the sweep may still refuse)."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def held_ray_lines() -> Iterator[None]:
    """Ray's own log lines (its ``ray`` logger) held for the block: printed by Ray's handlers
    after it when it ends well, else sent to the ``icrl`` logger at debug level (a refusal
    stays one line)."""
    logger = logging.getLogger("ray")
    handlers, held = list(logger.handlers), _Held()
    for handler in handlers:
        logger.removeHandler(handler)
    logger.addHandler(held)
    ok = False
    try:
        yield
        ok = True
    finally:
        logger.removeHandler(held)
        for handler in handlers:
            logger.addHandler(handler)
        for record in held.records:
            if ok:
                logger.handle(record)
            else:
                logging.getLogger("icrl").debug("Ray: %s", record.getMessage())


def preflight(opts: SweepOptions) -> None:
    """The checks that need no cluster: Ray is installed, the address answers."""
    import_ray()
    check_reachable(opts.ray_address)


def run_on_ray(runs: Sequence[Run], opts: SweepOptions, progress: bool = True) -> dict[int, Outcome]:
    """run_sweep.py --ray: outcomes by run index (see the module docstring)."""
    ray = import_ray()
    outcomes: dict[int, Outcome] = {}
    for run in runs:
        if run.error is not None:
            outcomes[run.index] = Outcome(status="failed", error=run.error)
    valid = [r for r in runs if r.error is None]
    finished = [r for r in valid if r.out_dir is not None and read_log(r.out_dir).finished]
    todo = [r for r in valid if r not in finished]
    if finished:  # reported from their records: no worker, no model
        for run, outcome in zip(finished, execute(finished, progress=False)):
            outcomes[run.index] = outcome
    if not todo:
        return outcomes
    driver = None
    try:
        with held_ray_lines():
            connect(ray, opts.ray_address)
            shape = worker_shape(ray.cluster_resources(), todo, opts)
            work = batches(groups_of(todo), shape[0])
            shape = (min(shape[0], len(work)), shape[1], shape[2])
            print(shape_line(shape, len(todo), len(work)), flush=True)
            driver = Driver(ray, shape, os.getcwd())
            driver.place(opts.ray_wait_s)
            driver.load([batch[0].words for batch in work[:len(driver.actors)]])
        bar = RayProgress(todo, enabled=progress)
        try:
            outcomes.update(driver.run(work, bar, width=opts.max_parallel))
        finally:
            bar.close()
    finally:
        if driver is not None:
            driver.shutdown()
        ray.shutdown()
    return outcomes
