"""run_sweep.py's own command line: its options -> a frozen SweepOptions; every other word is a
run_experiment.py flag given to every run (parsed per run by ``icrl.cli.parse_args``).

A sweep option given where the sweep would not read it is refused in one line when nothing
could read it (``--reward_share`` without ``--estimate``, ``--ray_cpus_per_worker`` or
``--ray_wait_s`` without Ray), and said once (``SweepOptions.ignored``, one warning each) when
the same command without the dry run reads it (``--ray``, ``--max_parallel``, ``--summary`` and
``--name`` of a ``--dry_run`` or ``--estimate``). A number that means nothing (nan, an infinite
rate or share of a GPU) is refused."""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass, fields
from typing import Mapping, Optional, Sequence

from ..errors import UsageError
from .parser import ArgumentParser, add_plugin_flag
from .presets import preset_help


@dataclass(frozen=True)
class SweepOptions:
    preset: Optional[str] = None
    config: Optional[str] = None
    grid: tuple[str, ...] = ()
    shard: Optional[str] = None
    dry_run: bool = False
    max_parallel: Optional[int] = None
    name: Optional[str] = None
    summary: Optional[str] = None
    estimate: bool = False
    reward_share: float = 0.5
    tokens_per_s: Optional[float] = None
    prices: Optional[str] = None  # --estimate's price file (None: the default)
    ray: bool = False
    ray_address: Optional[str] = None
    ray_workers: Optional[int] = None
    ray_gpus_per_worker: Optional[float] = None
    ray_cpus_per_worker: float = 1.0
    ray_wait_s: float = 600.0
    shard_of: Optional[tuple[int, int]] = None  # resolved from shard
    sweep_name: Optional[str] = None  # resolved: name, else preset or file name, else a timestamp
    ignored: tuple[str, ...] = ()  # warnings: options given that this (dry) run does not read


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
    cost = p.add_argument_group("cost of a study before it runs (docs/scaling.md)")
    cost.add_argument("--estimate", action="store_true",
                      help="a dry run that also prints each run's prompt tokens (training and test calls apart, "
                           "and the published processed-token count): each run played through its loop in memory "
                           "from the plan, the task's data and the model's tokenizer; loads no model")
    cost.add_argument("--reward_share", type=float, default=0.5,
                      help="--estimate's one assumption: the share of training episodes rewarded (sets the "
                           "size of positive-only contexts)")
    cost.add_argument("--prices", metavar="FILE", default=None,
                      help="--estimate: a price file (TOML, US dollars per million input, cached-input and output "
                           "tokens per model) for the dollars of runs on hosted APIs (default: the dated one shipped "
                           "with icrl; docs/backends.md)")
    cost.add_argument("--tokens_per_s", type=float, default=None,
                      help="--estimate: prompt tokens per second of one model replica (bench/gpu.py measures it); "
                           "prints GPU-hours")
    ray = p.add_argument_group("Ray: the runs spread over workers, each loading its model once (docs/scaling.md)")
    ray.add_argument("--ray", action="store_true",
                     help="run on Ray: a local instance (ray.init()), or the cluster of --ray_address")
    ray.add_argument("--ray_address", metavar="HOST:PORT",
                     help="an existing Ray cluster's address (implies --ray); 'auto': the cluster this machine is in")
    ray.add_argument("--ray_workers", type=int, default=None,
                     help="workers (each one loaded model); default: the cluster's GPUs / --ray_gpus_per_worker, "
                          "or 1 on a cluster without GPUs")
    ray.add_argument("--ray_gpus_per_worker", type=float, default=None,
                     help="GPUs each worker holds; default: the runs' --tensor_parallel_size, else 1 where the "
                          "cluster has GPUs, else 0")
    ray.add_argument("--ray_cpus_per_worker", type=float, default=1.0, help="CPUs each worker holds")
    ray.add_argument("--ray_wait_s", type=float, default=600.0,
                     help="how long to wait for Ray to place the workers before giving up (exit 2)")
    add_plugin_flag(p)
    return p


RAY_FLAGS = ("ray", "ray_address", "ray_workers", "ray_gpus_per_worker", "ray_cpus_per_worker", "ray_wait_s")
RUN_FLAGS = ("max_parallel", "summary", "name")  # read when the sweep runs, not by a dry run


def parse_sweep_args(argv: Sequence[str]) -> tuple[SweepOptions, list[str]]:
    """(the sweep's options, the run_experiment.py words for every run)."""
    parser = build_parser()
    parsed, extra = parser.parse_known_args(list(argv))
    extra = [w for w in extra if w != "--"]
    stray = [w for w in extra if w.startswith("-") and not w.startswith("--") and not _is_number(w)]
    if stray:
        raise UsageError(f"unknown option {stray[0]}; run_experiment.py flags start with -- (see run_sweep.py --help)")
    check_numbers(parsed)
    given = given_options(parser, argv)
    if parsed.tokens_per_s is not None or parsed.prices is not None:
        parsed.estimate = True
    if parsed.estimate:
        parsed.dry_run = True
    if parsed.ray_address is not None or parsed.ray_workers is not None or parsed.ray_gpus_per_worker is not None:
        parsed.ray = True
    if parsed.ray and parsed.shard:
        raise UsageError("--ray spreads the whole sweep over its workers; give --ray or --shard, not both")
    values = {f.name: getattr(parsed, f.name) for f in fields(SweepOptions) if hasattr(parsed, f.name)}
    values["grid"] = tuple(values["grid"])
    return SweepOptions(**values, ignored=unread_options(parsed, given)), extra


def check_numbers(parsed: argparse.Namespace) -> None:
    """Each number option in its range; nan (and inf where it means nothing) refused."""
    if parsed.max_parallel is not None and parsed.max_parallel < 1:
        raise UsageError(f"--max_parallel must be >= 1, got {parsed.max_parallel}")
    if not 0.0 <= parsed.reward_share <= 1.0:
        raise UsageError(f"--reward_share is a share of episodes, from 0 to 1; got {parsed.reward_share}")
    if parsed.tokens_per_s is not None and not 0 < parsed.tokens_per_s < math.inf:
        raise UsageError(f"--tokens_per_s must be a positive finite number of tokens per second, "
                         f"got {parsed.tokens_per_s}")
    if parsed.ray_workers is not None and parsed.ray_workers < 1:
        raise UsageError(f"--ray_workers must be >= 1, got {parsed.ray_workers}")
    for name in ("ray_gpus_per_worker", "ray_cpus_per_worker"):
        value = getattr(parsed, name)
        if value is not None and not 0 <= value < math.inf:
            raise UsageError(f"--{name} must be a finite number >= 0, got {value}")
    if not parsed.ray_wait_s > 0:  # inf: wait as long as it takes
        raise UsageError(f"--ray_wait_s must be a number of seconds above 0, got {parsed.ray_wait_s}")


def given_options(parser: argparse.ArgumentParser, argv: Sequence[str]) -> dict[str, str]:
    """The sweep options the user typed (before a ``--``): field name -> the option string."""
    options = {option: action.dest for action in parser._actions for option in action.option_strings}
    given: dict[str, str] = {}
    for word in argv:
        if word == "--":
            break
        flag = str(word).split("=", 1)[0]
        if flag in options:
            given[options[flag]] = flag
    return given


def unread_options(parsed: argparse.Namespace, given: Mapping[str, str]) -> tuple[str, ...]:
    """Refuse the options given that nothing would read; the warnings for those a dry run does
    not read (the same command without --dry_run / --estimate reads them)."""
    if "reward_share" in given and not parsed.estimate:
        raise UsageError("--reward_share is --estimate's assumption and this sweep estimates nothing: add --estimate "
                         "(or --tokens_per_s), or drop --reward_share")
    unplaced = [given[name] for name in ("ray_cpus_per_worker", "ray_wait_s") if name in given]
    if unplaced and not parsed.ray:
        raise UsageError(f"{' and '.join(unplaced)} only {'applies' if len(unplaced) == 1 else 'apply'} to Ray "
                         f"workers and this sweep runs without Ray: add --ray, or drop {' and '.join(unplaced)}")
    if not parsed.dry_run:
        return ()
    unread = [given[name] for name in (*RAY_FLAGS, *RUN_FLAGS) if name in given]
    what = "--estimate" if parsed.estimate else "--dry_run"
    return tuple(f"{flag} does nothing for a dry run ({what}: nothing runs and no summary is written): ignored"
                 for flag in unread)


def _is_number(word: str) -> bool:
    try:
        float(word)
        return True
    except ValueError:
        return False
