"""Measure again the timings README.md and docs/ give, and print each beside the documented one.

    python bench/timings.py                  # the quick ones (a few minutes in all)
    python bench/timings.py --only demo ci   # these, by name (--list: every name, its command, its cost)
    python bench/timings.py --all            # every one (about an hour on 2 cores: the demo, CI, ...)
    python bench/timings.py --check          # only that every documented figure is where this script reads it

Each timing is a command run as a user runs it and timed on the wall clock, with the machine
(cores, CPU model, memory) and the load average (``/proc/loadavg``) before and after it. A
timing "from a fresh clone" runs in a ``git clone`` of this checkout's HEAD in a temporary
folder (``.ci/run`` there installs its own ``.venv``; ``make demo`` runs after an untimed
``make setup``). The documented figure is read from the doc where it stands (a pattern per
place), so the printout shows both; ``--check`` fails when a pattern finds nothing, so that the
docs and this script do not drift apart (tests/bench/test_timings.py runs it).

Compare a measured figure with a documented one only at a like load: on a shared machine the
load of other sessions' work changes a timing several times over (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from busy import busy  # bench/, on sys.path as this script's folder

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"  # a fresh clone in a temporary folder has no ../shared: named by the environment
TOKENIZERS = SHARED / "tokenizers"


@dataclass(frozen=True)
class Timing:
    """One documented timing: how to measure it again, and where the docs give it (file,
    pattern whose first group is the documented figure)."""

    name: str
    command: str
    where: tuple
    cost: str                # about how long one measurement takes here
    quick: bool = False      # measured by default (without --only or --all)
    clone: str = ""          # "": in this checkout; "bare": a fresh clone; "setup": a fresh clone after make setup
    repeat: int = 1          # measured this many times; the median is the figure
    env: tuple = ()          # (name, value) set for the command
    busy: int = 0            # busy processes beside the command (bench/busy.py: another job's load)


TIMINGS = (
    Timing("refusal", "python run_draw_plots.py --data_dir no_such_folder",
           (("docs/development.md", r"\| `refusal` \| [^|]+\| ([^|]+) \|"),),
           cost="a second", quick=True, repeat=5),
    Timing("estimate", "python run_sweep.py --preset icrl_bench --model_name meta-llama/Meta-Llama-3.1-8B-Instruct "
                       "--estimate --tokens_per_s 20000",
           (("docs/development.md", r"\| `estimate` \| [^|]+\| ([^|]+) \|"),
            ("docs/tools.md", r"It took (\d[^(]*?) (?:on|here)")),
           cost="1-2 min", quick=True, env=(("ICRL_TOKENIZERS_DIR", str(TOKENIZERS)), ("HF_HUB_OFFLINE", "1"))),
    Timing("test-fast", "make test-fast",
           (("docs/development.md", r"\| `test-fast` \| [^|]+\| ([^|]+) \|"),),
           cost="2-4 min"),
    Timing("test-fast-busy", "make test-fast",
           (("docs/development.md", r"\| `test-fast-busy` \| [^|]+\| ([^|]+) \|"),),
           cost="2-4 min", busy=1),
    Timing("demo", "make demo",
           (("docs/development.md", r"\| `demo` \| [^|]+\| ([^|]+) \|"),
            ("README.md", r"Time: `make demo` from a fresh clone, its `\.venv` already set up, took ([^(]+?) in all")),
           cost="5-7 min, and a fresh clone's make setup", clone="setup"),
    Timing("ci", ".ci/run",
           (("docs/development.md", r"\| `ci` \| [^|]+\| ([^|]+) \|"),),
           cost="20 min or more", clone="bare"),
)


def machine() -> str:
    """Cores, CPU model and memory, as /proc gives them (Linux)."""
    model = "CPU model unknown"
    memory = ""
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
        kib = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                       if line.startswith("MemTotal:")))
        memory = f", {kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    return f"{os.cpu_count()} cores, {model}{memory}"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def duration(seconds: float) -> str:
    """1 min 31 s, 52.3 s, 0.41 s: as the docs write a time."""
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s"


def documented(timing: Timing) -> list:
    """(file, the documented figure or None) for each place the docs give it."""
    found = []
    for name, pattern in timing.where:
        hits = re.findall(pattern, (REPO / name).read_text(encoding="utf-8"))
        found.append((name, hits[0].strip() if len(hits) == 1 else None))
    return found


def fresh_clone(into: Path) -> Path:
    """A clone of this checkout's HEAD (what is committed, nothing else)."""
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(into)], check=True)
    return into


def measure(timing: Timing) -> dict:
    """Run the command ``repeat`` times; its median wall time, the loads around it, its exit."""
    env = {**os.environ, **dict(timing.env)}
    for name, folder in (("ICRL_DATA_DIR", SHARED / "datasets"), ("ICRL_TOKENIZERS_DIR", TOKENIZERS)):
        if name not in env and folder.is_dir():
            env[name] = str(folder)
    with tempfile.TemporaryDirectory(prefix=f"icrl-timing-{timing.name}-") as tmp:
        where = REPO
        if timing.clone:
            where = fresh_clone(Path(tmp) / "clone")
            env.pop("VIRTUAL_ENV", None)
            if timing.clone == "setup":
                subprocess.run(["make", "setup"], cwd=where, check=True, stdout=subprocess.DEVNULL)
        python = str(where / ".venv" / "bin" / "python") if (where / ".venv").is_dir() else sys.executable
        command = re.sub(r"^python ", f"{python} ", timing.command)
        with busy(timing.busy):
            before, seconds, codes = load(), [], []
            for _ in range(timing.repeat):
                start = time.perf_counter()
                done = subprocess.run(command, shell=True, cwd=where, env=env, stdout=subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True)
                seconds.append(time.perf_counter() - start)
                codes.append(done.returncode)
        tail = done.stderr.strip().splitlines()[-1:] if done.stderr.strip() else []
    return {"seconds": statistics.median(seconds), "runs": seconds, "exit": codes, "load_before": before,
            "load_after": load(), "last_line": tail[0] if tail else ""}


def report(timing: Timing, result: dict) -> str:
    runs = f" (median of {len(result['runs'])}: {', '.join(duration(s) for s in result['runs'])})" \
        if len(result["runs"]) > 1 else ""
    place = "a fresh clone" if timing.clone else "this checkout"
    place += f", {timing.busy} busy process{'es' if timing.busy > 1 else ''} beside it" if timing.busy else ""
    lines = [f"{timing.name}: `{timing.command}` in {place}: {duration(result['seconds'])}{runs}, "
             f"exit {'/'.join(map(str, sorted(set(result['exit']))))}; load {result['load_before']} -> "
             f"{result['load_after']}"]
    lines += [f"    documented in {name}: {figure or 'NOT FOUND (update this script or the doc)'}"
              for name, figure in documented(timing)]
    if result["last_line"] and set(result["exit"]) != {0}:
        lines.append(f"    its last line: {result['last_line']}")
    return "\n".join(lines)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", default=None, metavar="NAME", help="measure these timings")
    parser.add_argument("--all", action="store_true", help="measure every timing (about an hour on 2 cores)")
    parser.add_argument("--list", action="store_true", help="list the timings, their commands and costs")
    parser.add_argument("--check", action="store_true",
                        help="measure nothing: exit 1 when a documented figure is not where this script reads it")
    args = parser.parse_args(argv)
    known = [t.name for t in TIMINGS]
    unknown = [n for n in args.only or () if n not in known]
    if unknown:
        parser.error(f"unknown timing {unknown[0]!r}; choose from: {', '.join(known)}")
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.list:
        for t in TIMINGS:
            print(f"{t.name}: `{t.command}`{' (fresh clone)' if t.clone else ''}"
                  f"{f' ({t.busy} busy process beside it)' if t.busy else ''}; {t.cost}"
                  f"{'; quick' if t.quick else ''}")
        return 0
    if args.check:
        missing = [(t.name, name) for t in TIMINGS for name, figure in documented(t) if figure is None]
        for name, where in missing:
            print(f"{name}: its figure is not found in {where} (exactly once)")
        return 1 if missing else 0
    chosen = [t for t in TIMINGS if args.all or (t.name in args.only if args.only else t.quick)]
    print(f"machine: {machine()}; {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC", flush=True)
    for timing in chosen:
        print(report(timing, measure(timing)), flush=True)
    return 0


if __name__ == "__main__":
    if shutil.which("git") is None:
        print("error: git is needed (the fresh clones)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
