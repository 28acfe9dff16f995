"""run_sweep.py's own command line: its options -> a frozen SweepOptions; every other word is a
run_experiment.py flag given to every run (parsed per run by ``icrl.cli.parse_args``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields
from typing import Optional, Sequence

from ..errors import UsageError
from .parser import ArgumentParser
from ..sweep.presets import preset_help


@dataclass(frozen=True)
class SweepOptions:
    preset: Optional[str] = None
    config: Optional[str] = None
    grid: tuple = ()
    shard: Optional[str] = None
    dry_run: bool = False
    max_parallel: Optional[int] = None
    name: Optional[str] = None
    summary: Optional[str] = None
    shard_of: Optional[tuple] = None  # resolved from shard
    sweep_name: Optional[str] = None  # resolved: name, else preset or file name, else a timestamp


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


def parse_sweep_args(argv: Sequence[str]) -> tuple[SweepOptions, list[str]]:
    """(the sweep's options, the run_experiment.py words for every run)."""
    parsed, extra = build_parser().parse_known_args(list(argv))
    extra = [w for w in extra if w != "--"]
    stray = [w for w in extra if w.startswith("-") and not w.startswith("--") and not _is_number(w)]
    if stray:
        raise UsageError(f"unknown option {stray[0]}; run_experiment.py flags start with -- (see run_sweep.py --help)")
    if parsed.max_parallel is not None and parsed.max_parallel < 1:
        raise UsageError(f"--max_parallel must be >= 1, got {parsed.max_parallel}")
    values = {f.name: getattr(parsed, f.name) for f in fields(SweepOptions) if hasattr(parsed, f.name)}
    values["grid"] = tuple(values["grid"])
    return SweepOptions(**values), extra


def _is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False
