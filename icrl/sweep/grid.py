"""A sweep's runs: argument lists for run_experiment.py, expanded from a preset, a TOML file,
``--grid`` options and base flags, then sliced into shards. Pure functions (nothing loads).

Each run is a list of run_experiment.py words. Later words win (argparse keeps the last value
of a repeated flag), so a run is: preset flags, then the TOML ``[base]`` table, then its
``[[run]]`` entry, then its grid values, then the flags given on the command line.

A grid key names one flag (``seed``) or several tied with ``+`` that take the same value
together (``seed+training_seed+test_seed``).
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from ..cli.parser import ArgumentParser, flag_action, flag_words
from ..errors import UsageError

TIE = "+"


def table_words(parser: ArgumentParser, table: Mapping[str, Any]) -> list[str]:
    words: list[str] = []
    for key, value in table.items():
        for name in key.split(TIE):
            words += flag_words(parser, name.strip(), value)
    return words


def parse_grid_option(text: str) -> tuple[str, list[str]]:
    """``task_name=banking77,clinic150`` -> ("task_name", ["banking77", "clinic150"])."""
    key, eq, values = text.partition("=")
    key = key.strip().lstrip("-")
    items = [v.strip() for v in values.split(",")] if eq else []
    if not key or not items or any(v == "" for v in items):
        raise UsageError(f"--grid {text!r}: write FLAG=VALUE1,VALUE2 (e.g. --grid seed=100,101)")
    return key, items


def load_toml(path: str) -> dict[str, Any]:
    """A sweep file: optional ``name``, ``[base]`` flags, ``[grid]`` lists, ``[[run]]`` entries."""
    import tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise UsageError(f"--config {path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"--config {path}: cannot read it ({exc.strerror or exc})") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"--config {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:  # a binary file
        raise UsageError(f"--config {path} is not a text (TOML) file") from None
    unknown = sorted(set(data) - {"name", "base", "grid", "run"})
    if unknown:
        raise UsageError(f"--config {path}: unknown keys {', '.join(unknown)} (use name, [base], [grid], [[run]])")
    if not isinstance(data.get("base", {}), dict) or not isinstance(data.get("grid", {}), dict):
        raise UsageError(f"--config {path}: [base] and [grid] must be tables")
    for key, values in data.get("grid", {}).items():
        if not isinstance(values, list) or not values:
            raise UsageError(f"--config {path}: grid entry {key!r} must be a non-empty list of values")
    runs = data.get("run", [])
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise UsageError(f"--config {path}: [[run]] entries must be tables of flags")
    return data


def expand(parser: ArgumentParser, *, preset: Optional[Sequence[Sequence[str]]] = None,
           config: Optional[Mapping[str, Any]] = None, grid: Iterable[tuple[str, Sequence[Any]]] = (),
           extra: Sequence[str] = ()) -> list[list[str]]:
    """Every run's argument list, in a fixed order (runs of the preset / file, then the grid,
    last key varying fastest)."""
    config = config or {}
    base = table_words(parser, config.get("base", {}))
    runs = [list(words) for words in (preset or [[]])]
    file_runs = [table_words(parser, table) for table in config.get("run", [])] or [[]]
    runs = [r + base + f for r in runs for f in file_runs]
    axes = list(config.get("grid", {}).items()) + list(grid)
    seen: dict[str, str] = {}
    for key, _ in axes:
        for name in key.split(TIE):
            flag_action(parser, name.strip())
            if name in seen:
                raise UsageError(f"flag --{name} is in the grid twice; give all its values in one --grid")
            seen[name] = key
    given = {w[2:].split("=", 1)[0] for w in extra if w.startswith("--")}
    clash = sorted(n for n in seen if n in given or f"no-{n}" in given)
    if clash:
        raise UsageError(f"--{clash[0]} is both in the grid and given as a flag; drop one")
    out = []
    for run in runs:
        for combo in itertools.product(*[values for _, values in axes]):
            words = list(run)
            for (key, _), value in zip(axes, combo):
                words += table_words(parser, {key: value})
            out.append(words + list(extra))
    return out


def parse_shard(text: Optional[str]) -> Optional[tuple[int, int]]:
    """``I/N`` (1-based: 1/4 ... 4/4) -> (I, N)."""
    if text is None:
        return None
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r}: write I/N, e.g. --shard 2/4 (I from 1 to N)") from None
    if n < 1 or not 1 <= i <= n:
        raise UsageError(f"--shard {text!r}: I must be between 1 and N (e.g. 1/4 ... 4/4)")
    return i, n


def shard_indices(count: int, shard: Optional[tuple[int, int]]) -> list[int]:
    """Indices of the runs in shard I of N: those with index % N == I - 1 (0-based indices).
    The N shards are disjoint and together hold every run."""
    if shard is None:
        return list(range(count))
    i, n = shard
    return [k for k in range(count) if k % n == i - 1]


def default_name(preset: Optional[str], config_path: Optional[str],
                 config: Optional[Mapping[str, Any]]) -> Optional[str]:
    if config and isinstance(config.get("name"), str) and config["name"].strip():
        return config["name"].strip()
    if config_path:
        return Path(config_path).stem
    return preset
