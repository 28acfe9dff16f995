"""run_sweep.py: expand a sweep, validate every run, then run them in lock-step per model.

Runs are grouped by the flags that define the loaded backend (``BACKEND_FLAGS``); each group
loads its backend once and runs all its runs together (see lockstep.py). A run's arguments,
run directory and records are those run_experiment.py gives it alone.
"""

from __future__ import annotations

import argparse
import csv
import math
import shlex
import signal
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Optional, Sequence

from ..cli import build_parser as run_parser
from ..cli import parse_args
from ..errors import ArgumentParser, UsageError
from ..experiment import HANDLED_SIGNALS, Experiment, Interrupted, _raise_interrupted
from ..records import experiment_dir, inspect_run
from .. import signals
from ..diskfull import atomic_output
from ..masking import mask_words, scrub
from ..safepaths import check_file_name
from .grid import default_name, expand, load_toml, parse_grid_option, parse_shard, shard_indices
from .lockstep import LockStep, Outcome
from .presets import preset_help, preset_runs

# The flags that define a loaded backend: runs that agree on them share one. (--seed only
# seeds vLLM's engine-wide generator, unused by seeded requests: runs of any seed share it.)
BACKEND_FLAGS = ("model_name", "backend", "device", "dtype", "batch_size", "hf_token", "max_model_len", "eot_token",
                 "tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend",
                 "gpu_memory_utilization", "enforce_eager", "rope_scaling", "published_tokenization",
                 "base_url", "api_key", "api_model", "api_mode", "max_concurrency", "timeout", "max_retries")
SUMMARY_FIELDS = ("run", "status", "final_test_accuracy", "best_test_accuracy", "best_test_step", "regret",
                  "steps_completed", "total_steps", "time_s", "run_dir", "error")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="run_sweep.py", allow_abbrev=False,
        description="Run a grid of run_experiment.py runs in one process: one loaded model per model "
                    "configuration, all its runs advanced in lock-step (their model calls batched). Any "
                    "other flags (after -- or mixed in) are run_experiment.py flags given to every run "
                    "and override preset and file values.",
        epilog="example: run_sweep.py --preset paper_main --model_name smollm2-135m --train_k 30 --test_k 20 "
               "--test_every 15")
    p.add_argument("--preset", help=preset_help())
    p.add_argument("--config", metavar="FILE.toml",
                   help="sweep file: name = '...', [base] flags, [grid] lists of values, [[run]] tables")
    p.add_argument("--grid", action="append", default=[], metavar="FLAG=V1,V2",
                   help="one axis of the grid (repeatable); FLAG1+FLAG2=... sets tied flags to the same value")
    p.add_argument("--shard", metavar="I/N", help="run only slice I of N (1-based): runs with index %% N == I-1")
    p.add_argument("--dry_run", action="store_true", help="print each run's command and directory; load nothing")
    p.add_argument("--max_parallel", type=int, default=None,
                   help="runs in lock-step at once (default: all runs of a model; 1: one after the other)")
    p.add_argument("--name", help="sweep name for the summary file (default: preset or file name, else a timestamp)")
    p.add_argument("--summary", metavar="FILE.csv",
                   help="summary table path (default: <output_dir>/sweeps/<name>[-shard-I-of-N].csv)")
    return p


class Run:
    """One run of the sweep: its words, its parsed arguments (or why they are invalid)."""

    def __init__(self, index: int, words: list[str]):
        self.index, self.words = index, words
        self.args: Optional[argparse.Namespace] = None
        self.error: Optional[str] = None
        self.out_dir: Optional[Path] = None
        try:
            self.args = parse_args(words)
            self.args.progress = False  # the sweep has one bar for all runs
            self.out_dir = experiment_dir(self.args.output_dir, vars(self.args))
        except UsageError as exc:
            self.error = scrub(str(exc))

    def command(self) -> str:
        return shlex.join(["python", "run_experiment.py", *mask_words(self.words)])

    def backend_key(self) -> tuple:
        return tuple((k, getattr(self.args, k, None)) for k in BACKEND_FLAGS)

    def label(self) -> str:
        a = self.args
        return f"#{self.index} {a.task_name} {a.context_strategy_name} seed {a.seed}"


def plan(argv: Sequence[str]) -> tuple[argparse.Namespace, list[Run]]:
    """The sweep's own options and its runs (this shard's), validated; nothing loads."""
    opts, extra = build_parser().parse_known_args(list(argv))
    extra = [w for w in extra if w != "--"]
    stray = [w for w in extra if w.startswith("-") and not w.startswith("--") and not _is_number(w)]
    if stray:
        raise UsageError(f"unknown option {stray[0]}; run_experiment.py flags start with -- (see run_sweep.py --help)")
    if opts.max_parallel is not None and opts.max_parallel < 1:
        raise UsageError(f"--max_parallel must be >= 1, got {opts.max_parallel}")
    parser = run_parser()
    preset = preset_runs(opts.preset) if opts.preset else None
    config = load_toml(opts.config) if opts.config else None
    if preset and not any(w == "--model_name" or w.startswith("--model_name=") for w in extra) \
            and "model_name" not in (config or {}).get("base", {}):
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
    opts.shard_of = parse_shard(opts.shard)
    runs = [runs[i] for i in shard_indices(len(runs), opts.shard_of)]
    opts.sweep_name = opts.name if opts.name is not None else default_name(opts.preset, opts.config, config)
    if opts.sweep_name is not None:
        check_file_name("--name" if opts.name is not None else "the sweep name", opts.sweep_name)
    return opts, runs


def _is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False


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
            append = exp.records.append_test

            def append_test(record, run=run, append=append):
                append(record)
                self.bar.write(f"{run.label()}: step {record['step']} test accuracy {record['accuracy']:.3f}")
            exp.records.append_test = append_test

    def _total(self) -> int:
        total = 0
        for run, exp in self.experiments.items():
            steps = getattr(exp, "steps", None)
            total += steps if steps is not None else max(run.args.train_k, 0)
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
    if backend is None and not all(inspect_run(exp.out_dir).finished for exp in experiments.values()):
        loader = experiments[runs[0]]
        loader.load_backend()
        backend, loader.backend = loader.backend, None
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
    root = next((Path(r.args.output_dir) for r in runs if r.args is not None), Path("data"))
    name = opts.sweep_name or datetime.now().strftime("%Y%m%d-%H%M%S")
    if opts.shard_of:
        name += f"-shard-{opts.shard_of[0]}-of-{opts.shard_of[1]}"
    return root / "sweeps" / f"{name}.csv"


def write_summary(path: Path, rows: Sequence[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_output(path) as tmp, open(tmp, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=SUMMARY_FIELDS)
        writer.writeheader()
        writer.writerows(rows)


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
        signals.install(_raise_interrupted)  # SIGHUP only where it is a stop request (not nohup)
        print(f"sweep{shard}: {len(runs)} runs")
        tic = time.perf_counter()
        outcomes = run_all(runs, opts.max_parallel)
    except UsageError as exc:
        print(f"error: {scrub(str(exc))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        signals.ignore_all()
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
    return 1 if failed else 0
