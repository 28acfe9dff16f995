"""run_sweep.py: expand a sweep, validate every run, then run them in lock-step per model.

Runs are grouped by the backend they load (``BackendSpec``: model, backend and that backend's
typed options, from the configuration fields with a backend role); each group loads its backend
once, runs all its runs together (see lockstep.py) and closes it when they are done. A run's
arguments, run directory and records are those run_experiment.py gives it alone.
"""

from __future__ import annotations

import math
import shlex
import signal
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from ..cli import build_parser as run_parser
from ..cli.sweep import SweepOptions, parse_sweep_args
from ..config import RunConfig
from ..infra.masking import mask_words, scrub
from ..cli import parse_args
from ..cli.validate import WrongAgentSetting
from ..errors import UsageError
from ..run.experiment import Experiment
from ..run.environment import backend_spec_of
from ..run.observers import TestLines
from ..infra import signals
from ..infra.signals import HANDLED_SIGNALS, Interrupted, raise_interrupted
from ..records import experiment_dir, inspect_run, write_csv_atomic
from ..records.safepaths import check_file_name
from .grid import default_name, expand, load_toml, parse_grid_option, parse_shard, shard_indices
from .lockstep import LockStep, Outcome
from .epilogue import preset_epilogue
from .presets import preset_runs

SUMMARY_FIELDS = ("run", "status", "final_test_accuracy", "best_test_accuracy", "best_test_step", "regret",
                  "steps_completed", "total_steps", "time_s", "run_dir", "error")


class Run:
    """One run of the sweep: its words, its parsed arguments (or why they are invalid)."""

    def __init__(self, index: int, words: list[str]):
        self.index, self.words = index, words
        self.args: Optional[RunConfig] = None
        self.error: Optional[str] = None
        self.out_dir: Optional[Path] = None
        try:
            self.args = parse_args(words).replace(progress=False)  # the sweep has one bar for all runs
            self.out_dir = experiment_dir(self.args.options.output_dir, self.args.spec.as_record())
        except UsageError as exc:
            self.error = scrub(str(exc))
            if isinstance(exc, WrongAgentSetting):  # e.g. a learner crossed with LLM settings
                self.error += ("; in a sweep, give learners and LLM runs their own [[run]] tables "
                               "(docs/sweeps.md, bench/methods/learners.toml)")

    def command(self) -> str:
        return shlex.join(["python", "run_experiment.py", *mask_words(self.words)])

    def backend_key(self):
        """The run's BackendSpec without engine-wide values: runs with equal keys share a backend."""
        return backend_spec_of(self.args, engine=False)

    def label(self) -> str:
        a = self.args
        what = a.spec.context_strategy_name if a.spec.agent == "llm" else f"agent {a.spec.agent}"
        return f"#{self.index} {a.spec.task_name} {what} seed {a.spec.seed}"


def plan(argv: Sequence[str]) -> tuple[SweepOptions, list[Run]]:
    """The sweep's own options and its runs (this shard's), validated; nothing loads."""
    opts, extra = parse_sweep_args(argv)
    parser = run_parser()
    preset = preset_runs(opts.preset) if opts.preset else None
    config = load_toml(opts.config) if opts.config else None
    if preset and not any(w == "--model_name" or w.startswith("--model_name=") for w in extra) \
            and "model_name" not in (config or {}).get("base", {}) \
            and not all("--model_name" in run for run in preset):  # a preset that names its models
        raise UsageError(f"--preset {opts.preset} needs --model_name (the published commands leave it to you)")
    grid = [parse_grid_option(g) for g in opts.grid]
    words = expand(parser, preset=preset, config=config, grid=grid, extra=extra)
    if words == [[]]:
        raise UsageError("nothing to sweep: give --preset, --config, --grid or run_experiment.py flags "
                         "(see run_sweep.py --help)")
    runs = [Run(i, w) for i, w in enumerate(words)]
    seen: dict = {}
    for run in runs:
        if run.out_dir is None:
            continue
        key = run.out_dir.resolve()
        if key in seen:
            raise UsageError(f"runs #{seen[key]} and #{run.index} would write the same run directory {run.out_dir} "
                             f"(the directory names omit some flags, e.g. --seed: tie it to --training_seed with "
                             f"--grid seed+training_seed=...)")
        seen[key] = run.index
    shard_of = parse_shard(opts.shard)
    runs = [runs[i] for i in shard_indices(len(runs), shard_of)]
    sweep_name = opts.name if opts.name is not None else default_name(opts.preset, opts.config, config)
    if sweep_name is not None:
        check_file_name("--name" if opts.name is not None else "the sweep name", sweep_name)
    opts = replace(opts, shard_of=shard_of, sweep_name=sweep_name)
    return opts, runs


# -- execution ------------------------------------------------------------------------------------
class Progress:
    """One bar for the whole sweep (steps of all runs) and a line per test step."""

    def __init__(self, experiments: dict, enabled: bool = True):
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
            total += steps if steps is not None else max(run.args.spec.train_k, 0)
        return total

    def update(self) -> None:
        self.bar.total = self._total()
        self.bar.n = sum(exp.steps_done for exp in self.experiments.values())
        self.bar.refresh()

    def close(self) -> None:
        self.update()
        self.bar.close()


def execute(runs: Sequence[Run], *, backend=None, width: Optional[int] = None, progress: bool = True) -> list[Outcome]:
    """Run valid ``runs`` (one backend configuration) in lock-step; ``backend``: already loaded
    (else loaded here, unless every run is already finished)."""
    experiments = {run: Experiment(run.args) for run in runs}
    owned = None  # a backend loaded here is closed here, when the group is done
    if backend is None and not all(inspect_run(exp.out_dir).finished for exp in experiments.values()):
        loader = experiments[runs[0]]
        loader.load_backend()
        backend, loader.backend = loader.backend, None
        owned = backend
    bar = Progress(experiments, enabled=progress)

    def target(exp):
        def start(proxy):
            exp.backend = proxy
            return exp.run()
        return start

    lockstep = LockStep(backend, width=width, on_batch=bar.update)
    try:
        return lockstep.run([target(experiments[run]) for run in runs])
    finally:
        bar.close()
        if owned is not None:
            close_backend(owned)


def groups_of(runs: Sequence[Run]) -> list[list[Run]]:
    groups: dict = {}
    for run in runs:
        groups.setdefault(run.backend_key(), []).append(run)
    return list(groups.values())


def close_backend(backend) -> None:
    close = getattr(backend, "close", None)
    if close is not None:
        close()


def run_all(runs: Sequence[Run], width: Optional[int], progress: bool = True) -> dict:
    """Every valid run, group by group; returns outcomes by run index (invalid runs: failed)."""
    outcomes: dict = {}
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


# -- reporting ------------------------------------------------------------------------------------
def summary_rows(runs: Sequence[Run], outcomes: dict) -> list[dict]:
    rows = []
    for run in runs:
        outcome = outcomes.get(run.index, Outcome())
        s = outcome.summary or {}
        rows.append({"run": run.index, "status": outcome.status,
                     "final_test_accuracy": s.get("final_test_accuracy"), "best_test_accuracy": s.get("best_test_accuracy"),
                     "best_test_step": s.get("best_test_step"), "regret": s.get("regret"),
                     "steps_completed": s.get("steps_completed"), "total_steps": s.get("total_steps"),
                     "time_s": round(outcome.seconds, 1), "run_dir": str(run.out_dir) if run.out_dir else "",
                     "error": outcome.error or ""})
    return rows


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}" if value <= 1 else f"{value:.1f}"
    return str(value)


def print_table(rows: Sequence[dict]) -> None:
    head = ("run", "status", "final", "best", "regret", "steps", "time_s", "run_dir")
    lines = [head]
    for r in rows:
        steps = f"{_cell(r['steps_completed'])}/{_cell(r['total_steps'])}"
        where = r["run_dir"] + (f"  ({r['error']})" if r["error"] else "")
        lines.append((str(r["run"]), r["status"], _cell(r["final_test_accuracy"]), _cell(r["best_test_accuracy"]),
                      _cell(r["regret"]), steps, _cell(r["time_s"]), where))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    for line in lines:
        print("  ".join(cell.ljust(w) for cell, w in zip(line, widths)) + "  " + line[-1])


def summary_path(opts, runs: Sequence[Run]) -> Path:
    if opts.summary:
        return Path(opts.summary)
    root = next((Path(r.args.options.output_dir) for r in runs if r.args is not None), Path("data"))
    name = opts.sweep_name or datetime.now().strftime("%Y%m%d-%H%M%S")
    if opts.shard_of:
        name += f"-shard-{opts.shard_of[0]}-of-{opts.shard_of[1]}"
    return root / "sweeps" / f"{name}.csv"


def write_summary(path: Path, rows: Sequence[dict]) -> None:
    write_csv_atomic(path, SUMMARY_FIELDS, rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit 0 when every run finished, 1 when some failed, 2 on bad sweep options, 128 + signal
    number when interrupted (every run saved; rerun the same command to resume)."""
    from_script, argv = argv is None, sys.argv[1:] if argv is None else argv
    previous, stopped = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}, False
    try:
        opts, runs = plan(argv)
        shard = f" (shard {opts.shard})" if opts.shard else ""
        if opts.dry_run:
            for run in runs:
                print(f"#{run.index} {run.command()}")
                print(f"    -> {run.out_dir}" if run.error is None else f"    invalid: {run.error}")
            print(f"{len(runs)} runs{shard}, {sum(r.error is not None for r in runs)} invalid; dry run, nothing loaded")
            return 1 if any(r.error for r in runs) else 0
        for run in runs:
            if run.error:
                print(f"error: run #{run.index} is skipped: {run.error}", file=sys.stderr)
        signals.install(raise_interrupted)  # SIGHUP only where it is a stop request (not nohup)
        print(f"sweep{shard}: {len(runs)} runs")
        tic = time.perf_counter()
        outcomes = run_all(runs, opts.max_parallel)
    except UsageError as exc:
        print(f"error: {scrub(str(exc))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        signals.ignore_signals()
        stopped = True
        signals.say("sweep interrupted; every run saved its progress: rerun the same command to resume")
        return 128 + int(signum)
    finally:
        if not (stopped and from_script):  # the script exits with signals ignored
            signals.restore(previous)
    rows = scrub(summary_rows(runs, outcomes))
    print_table(rows)
    path = summary_path(opts, runs)
    write_summary(path, rows)
    failed = [r for r in rows if r["status"] != "finished"]
    print(f"{len(rows) - len(failed)} of {len(rows)} runs finished in {time.perf_counter() - tic:.0f} s; "
          f"summary: {path}")
    for r in failed:
        if r["error"]:
            print(f"error: run #{r['run']} {r['status']}: {r['error']}", file=sys.stderr)
    valid = [r for r in runs if r.out_dir is not None]
    for line in preset_epilogue(opts.preset, {r.args.options.output_dir for r in valid}, [r.out_dir for r in valid]):
        print(line)
    return 1 if failed else 0
