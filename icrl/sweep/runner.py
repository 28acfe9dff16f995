"""run_sweep.py: expand a sweep, validate every run, then run them in lock-step per model
(execution.py), here or on Ray workers (ray_launcher.py), and write the summary.

Runs are grouped by the backend they load (``BackendSpec``: model, backend and that backend's
typed options, from the configuration fields with a backend role); each group loads its backend
once, runs all its runs together (see lockstep.py) and closes it when they are done. A run's
arguments, run directory and records are those run_experiment.py gives it alone.
"""

from __future__ import annotations

import math
import signal
import sys
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..cli.parser import ArgumentParser
from ..cli.run import build_parser as run_parser
from ..cli.sweep import SweepOptions, parse_sweep_args
from ..infra.masking import scrub
from ..errors import UsageError
from ..infra import plugins, signals
from ..infra.signals import HANDLED_SIGNALS, Interrupted, raise_interrupted
from ..records import write_csv_atomic
from ..infra.atomic import writable
from ..records.safepaths import check_file_name
from .grid import default_name, expand, load_toml, parse_grid_option, parse_shard, shard_indices
from .execution import Run, execute, groups_of, run_all  # noqa: F401  (execute, groups_of: the sweep's API)
from .lockstep import Outcome
from .epilogue import preset_epilogue
from ..cli.presets import preset_runs

SUMMARY_FIELDS = ("run", "status", "final_test_accuracy", "best_test_accuracy", "best_test_step", "regret",
                  "steps_completed", "total_steps", "time_s", "run_dir", "error")


def plan(argv: Sequence[str]) -> tuple[SweepOptions, list[Run]]:
    """The sweep's own options and its runs (this shard's), validated; nothing loads."""
    opts, extra = parse_sweep_args(argv)
    parser = run_parser()
    if not isinstance(parser, ArgumentParser):  # what cli.build_parser builds (typed there as argparse's parser)
        raise TypeError(f"run_experiment.py's parser is a {type(parser).__name__}, not icrl.cli.parser.ArgumentParser")
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
    runs = [Run(i, w, weights=not opts.estimate) for i, w in enumerate(words)]  # an estimate: a tokenizer
    seen: dict[Path, int] = {}
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


def unread_by_every_run(runs: Sequence[Run]) -> list[str]:
    """The warnings for the run flags that no valid run of the sweep reads (a flag a run does
    not read is said by run_experiment.py; in a sweep a base flag meant for the runs that take
    it says nothing, unless no run takes it), each once."""
    valid = [r.args for r in runs if r.args is not None]
    if not valid:
        return []
    keys = [{w.split(" does nothing for ")[0]: w for w in args.ignored} for args in valid]
    common = [key for key in keys[0] if all(key in other for other in keys[1:])]
    return [keys[0][key] if len(valid) == 1 else f"{key} does nothing for any run of this sweep: ignored"
            for key in common]


# -- reporting ------------------------------------------------------------------------------------
def summary_rows(runs: Sequence[Run], outcomes: Mapping[int, Outcome]) -> list[dict[str, Any]]:
    rows = []
    for run in runs:
        outcome = outcomes.get(run.index, Outcome())
        s = outcome.summary or {}
        rows.append({"run": run.index, "status": outcome.status,
                     "final_test_accuracy": s.get("final_test_accuracy"),
                     "best_test_accuracy": s.get("best_test_accuracy"),
                     "best_test_step": s.get("best_test_step"), "regret": s.get("regret"),
                     "steps_completed": s.get("steps_completed"), "total_steps": s.get("total_steps"),
                     "time_s": round(outcome.seconds, 1), "run_dir": str(run.out_dir) if run.out_dir else "",
                     "error": outcome.error or ""})
    return rows


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}" if value <= 1 else f"{value:.1f}"
    return str(value)


def print_table(rows: Sequence[Mapping[str, Any]]) -> None:
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


def summary_path(opts: SweepOptions, runs: Sequence[Run]) -> Path:
    if opts.summary:
        return Path(opts.summary)
    root = next((Path(r.args.options.output_dir) for r in runs if r.args is not None), Path("data"))
    name = opts.sweep_name or datetime.now().strftime("%Y%m%d-%H%M%S")
    if opts.shard_of:
        name += f"-shard-{opts.shard_of[0]}-of-{opts.shard_of[1]}"
    return root / "sweeps" / f"{name}.csv"


def write_summary(path: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    write_csv_atomic(path, SUMMARY_FIELDS, rows)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Exit 0 when every run finished, 1 when some failed, 2 on bad sweep options, 128 + signal
    number when interrupted (every run saved; rerun the same command to resume)."""
    from_script, argv = argv is None, sys.argv[1:] if argv is None else argv
    previous: signals.Previous = {s: signal.getsignal(s) for s in HANDLED_SIGNALS}
    stopped = False
    try:
        plugins.load(argv)  # the script loaded them before importing this module; main(argv) alone: here
        opts, runs = plan(argv)
        shard = f" (shard {opts.shard})" if opts.shard else ""
        if opts.dry_run:
            return dry_run(opts, runs, shard)
        if opts.ray:  # Ray missing or an address where nothing answers: said before anything else
            from .ray_launcher import preflight

            preflight(opts)
        path = summary_path(opts, runs)
        problem = writable(path)  # before any run: a summary that cannot be written is said now
        if problem:
            raise UsageError(f"cannot write the summary {path} ({'--summary' if opts.summary else 'the default'}): "
                             f"{problem}")
        for run in runs:
            if run.error:
                print(f"error: run #{run.index} is skipped: {run.error}", file=sys.stderr)
        for warning in unread_by_every_run(runs):
            print(f"warning: {warning}", file=sys.stderr)
        signals.install(raise_interrupted)  # SIGHUP only where it is a stop request (not nohup)
        print(f"sweep{shard}: {len(runs)} runs")
        tic = time.perf_counter()
        if opts.ray:
            from .ray_launcher import run_on_ray

            outcomes = run_on_ray(runs, opts)
        else:
            outcomes = run_all(runs, opts.max_parallel)
    except UsageError as exc:
        print(f"error: {scrub(str(exc))}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted, Exception) as exc:
        signum = signals.stop_in(exc)  # a stop inside a class's creation arrives wrapped in a RuntimeError
        if signum is None:
            raise
        signals.ignore_signals()
        stopped = True
        signals.say("sweep interrupted; every run saved its progress: rerun the same command to resume")
        return 128 + int(signum)
    finally:
        if not (stopped and from_script):  # the script exits with signals ignored
            signals.restore(previous)
    rows = scrub(summary_rows(runs, outcomes))
    print_table(rows)
    write_summary(path, rows)
    failed = [r for r in rows if r["status"] != "finished"]
    print(f"{len(rows) - len(failed)} of {len(rows)} runs finished in {time.perf_counter() - tic:.0f} s; "
          f"summary: {path}")
    for r in failed:
        if r["error"]:
            print(f"error: run #{r['run']} {r['status']}: {r['error']}", file=sys.stderr)
    return print_epilogue(opts, runs) or (1 if failed else 0)


def dry_run(opts: SweepOptions, runs: Sequence[Run], shard: str) -> int:
    """--dry_run: each run's command and folder (or why it is invalid), and with --estimate the
    tokens each would send and, on a hosted API, the dollars (``sweep.cost``); 1 when a run is
    invalid or could not be estimated, else 0. An estimate with nothing to estimate (every run
    invalid, or none estimated) prints no totals but one line saying why: a UsageError (exit 2).
    The sweep options a dry run does not read are said first, once each."""
    for warning in [*opts.ignored, *unread_by_every_run(runs)]:
        print(f"warning: {warning}", file=sys.stderr)
    if opts.estimate:
        refuse_all_invalid(runs)
        from .cost import Pricing

        pricing = Pricing.of_runs(runs, opts.prices)  # a bad price file: one line, before anything is printed
    for run in runs:
        print(f"#{run.index} {run.command()}")
        print(f"    -> {run.out_dir}" if run.error is None else f"    invalid: {run.error}")
    if opts.estimate:
        from .estimate import estimate_runs, footer, header, row

        print("\n".join(header(opts.reward_share)), flush=True)
        estimates = estimate_runs(runs, opts.reward_share,
                                  on_run=lambda r, e: print(row(r, e) + pricing.beside(r.index, e), flush=True))
        missing = [i for i, e in estimates.items() if e.error is not None]
        if estimates and len(missing) == len(estimates):
            raise UsageError(f"none of the {len(estimates)} valid runs could be estimated (each says why above); "
                             f"no totals")
        print("\n".join(footer(estimates, opts.tokens_per_s) + pricing.footer(estimates)))
        if missing:
            print(f"error: {len(missing)} runs could not be estimated (#{', #'.join(map(str, missing))}); "
                  f"the total leaves them out", file=sys.stderr)
            return 1
    print(f"{len(runs)} runs{shard}, {sum(r.error is not None for r in runs)} invalid; dry run, "
          f"{'no model loaded' if opts.estimate else 'nothing loaded'}")
    return 1 if any(r.error for r in runs) else 0


def refuse_all_invalid(runs: Sequence[Run]) -> None:
    """A sweep whose every run is invalid: one line saying why (the reason, when all share it)."""
    if not runs or any(run.error is None for run in runs):
        return
    reasons = list(dict.fromkeys(run.error for run in runs))
    if len(reasons) == 1:
        raise UsageError(f"nothing to estimate: all {len(runs)} runs are invalid: {reasons[0]}")
    raise UsageError(f"nothing to estimate: all {len(runs)} runs are invalid, for {len(reasons)} reasons "
                     f"(run #{runs[0].index}: {reasons[0]}); --dry_run lists each run's")


def print_epilogue(opts: SweepOptions, runs: Sequence[Run]) -> int:
    """Print what follows the preset's sweep (its benchmark score); 2, after one error line, when a
    record it reads is refused (``icrl.run.readback``), else 0."""
    valid = [r for r in runs if r.out_dir is not None]
    try:
        folders = {r.args.options.output_dir for r in valid if r.args is not None}  # every valid run has args
        lines = preset_epilogue(opts.preset, folders, [r.out_dir for r in valid if r.out_dir is not None])
    except UsageError as exc:
        print(f"error: {scrub(str(exc))}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0
