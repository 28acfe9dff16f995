"""How torch's CPU threads wait, and how many there are: set before torch loads.

torch computes on the CPU with OpenMP threads (GNU libgomp in its Linux wheels). By OpenMP's
default a thread that has finished its share of a kernel spins on its core for a while before it
sleeps, ready for the next kernel. On a quiet machine that saves a wake-up; on a busy one (other
jobs, other runs, a CI runner) the spinning threads take the cores from the threads that still
have work, and a forward pass gets several times slower. With the passive policy a waiting thread
sleeps at once. And on a busy machine every parallel kernel waits for its slowest thread, which
the other jobs hold up: one thread is then faster than two. Measured in docs/benchmarks.md
("Threads on a busy machine").

``configure(environ)`` puts the harness's choices into ``environ`` (``os.environ`` by default)
and returns a one-line description of what is in effect. The wait policy:

- a policy the user chose is kept: ``OMP_WAIT_POLICY`` or ``GOMP_SPINCOUNT`` already set are
  left as they are, and nothing is added;
- else ``ICRL_OMP_WAIT_POLICY`` picks: ``passive`` (the default: ``OMP_WAIT_POLICY=PASSIVE``),
  ``active`` (``OMP_WAIT_POLICY=ACTIVE``: always spin) or ``openmp`` (set nothing: OpenMP's own
  default, spin a while then sleep).

The thread count:

- ``OMP_NUM_THREADS`` already set is kept;
- else ``ICRL_THREADS`` picks: ``auto`` (the default), ``torch`` (set nothing: torch's default,
  one thread per core) or a positive number N in ASCII digits (``OMP_NUM_THREADS=N``; an N above
  the CPUs this process may use is clamped to them, as more threads than CPUs only wait for
  each other: ``ICRL_THREADS=64`` on 2 CPUs sets ``OMP_NUM_THREADS=2``). ``auto`` looks at the
  machine once, at the start: when other work keeps at least half of the CPUs this process may
  use busy right now (the CPU time the kernel counts in ``/proc/stat`` over a quarter of a
  second, while this process sleeps; the 1-minute load average where there is no
  ``/proc/stat``), it sets ``OMP_NUM_THREADS`` to the CPUs left idle, rounded, at least 1; else
  it sets nothing. A load average would count this user's own work of the last minute too (the
  run that just finished), and give the next run one thread on an idle machine. The count does
  not change what a run computes (the same logits, bit for bit, with 1 and 2 threads), only how
  fast.

Any other value of the two ``ICRL_`` variables is a ``UsageError``. libgomp reads the
environment once, when torch loads it, so the entry points (the ``run_*.py`` scripts,
``find_max_examples_given_max_window.py``, the benchmarks and the test suite) call ``apply()``
before anything imports torch. In a process where torch is already loaded the variables still
reach the processes it starts (a sweep's Ray workers), but not torch's threads in this one.

``apply()`` is ``configure()`` for a script's first lines: a bad value is one line on stderr and
exit code 2, before anything else happens.
"""

from __future__ import annotations

import os
import sys
import time
from typing import MutableMapping, Optional

from ..errors import UsageError

CHOICE = "ICRL_OMP_WAIT_POLICY"
DEFAULT = "passive"
POLICIES: dict[str, Optional[str]] = {"passive": "PASSIVE", "active": "ACTIVE", "openmp": None}
USER_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
THREADS_CHOICE = "ICRL_THREADS"


def configure(environ: Optional[MutableMapping[str, str]] = None, load: Optional[float] = None,
              cpus: Optional[int] = None) -> str:
    """Set OMP_WAIT_POLICY and OMP_NUM_THREADS in ``environ`` unless the user chose (see module);
    ``load`` and ``cpus`` stand for the machine's (1-minute load average, usable CPUs)."""
    environ = os.environ if environ is None else environ
    _set_threads(environ, load, cpus)
    if not any(environ.get(name) for name in USER_VARIABLES):
        choice = (environ.get(CHOICE) or DEFAULT).strip().lower()
        if choice not in POLICIES:
            raise UsageError(f"{CHOICE}={environ.get(CHOICE)!r}: use one of {', '.join(POLICIES)} "
                             f"(or set OMP_WAIT_POLICY yourself)")
        policy = POLICIES[choice]
        if policy:
            environ["OMP_WAIT_POLICY"] = policy
    return describe(environ)


def _set_threads(environ: MutableMapping[str, str], load: Optional[float], cpus: Optional[int]) -> None:
    if environ.get("OMP_NUM_THREADS"):
        return
    choice = (environ.get(THREADS_CHOICE) or "auto").strip().lower()
    if choice.isascii() and choice.isdigit() and choice.strip("0"):  # not '²' nor '٣': int() takes those too
        cpus = cpus or usable_cpus()
        environ["OMP_NUM_THREADS"] = str(min(int(choice), cpus) if len(choice) <= 6 else cpus)
        return
    if choice not in ("auto", "torch"):
        raise UsageError(f"{THREADS_CHOICE}={environ.get(THREADS_CHOICE)!r}: use auto, torch or a number of "
                         f"threads in digits 0-9 (or set OMP_NUM_THREADS yourself)")
    if choice == "auto":
        threads = auto_threads(busy_cpus() if load is None else load, cpus or usable_cpus())
        if threads is not None:
            environ["OMP_NUM_THREADS"] = str(threads)


def busy_cpus(interval: float = 0.25) -> float:
    """How many CPUs other work keeps busy now: the share of CPU time the kernel counted as busy
    over ``interval`` seconds (this process sleeps meanwhile) times the CPUs; the 1-minute load
    average where /proc/stat cannot be read."""
    first = _cpu_times()
    if first is None:
        return os.getloadavg()[0]
    time.sleep(interval)
    second = _cpu_times()
    if second is None:
        return os.getloadavg()[0]
    busy, total = second[0] - first[0], second[1] - first[1]
    return (os.cpu_count() or 1) * busy / total if total > 0 else 0.0


def _cpu_times() -> Optional[tuple[int, int]]:
    """(busy, total) clock ticks of all CPUs since boot, from /proc/stat's ``cpu`` line."""
    try:
        with open("/proc/stat", encoding="ascii") as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 5:
        return None
    ticks = [int(x) for x in fields[1:9]]  # user nice system idle iowait irq softirq steal
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return sum(ticks) - idle, sum(ticks)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def auto_threads(load: float, cpus: int) -> Optional[int]:
    """The CPUs other work leaves idle when it keeps at least half of them busy, else None
    (torch's default)."""
    if load < cpus / 2:
        return None
    return max(1, round(cpus - load))


def describe(environ: Optional[MutableMapping[str, str]] = None) -> str:
    """The wait policy and thread count in ``environ``, in words, e.g.
    'OMP_WAIT_POLICY=PASSIVE, OMP_NUM_THREADS=1'."""
    environ = os.environ if environ is None else environ
    chosen = [f"{name}={environ[name]}" for name in USER_VARIABLES if environ.get(name)]
    policy = ", ".join(chosen) or "OpenMP's default wait policy (spin a while, then sleep)"
    threads = environ.get("OMP_NUM_THREADS")
    count = f"OMP_NUM_THREADS={threads}" if threads else "torch's thread count"
    return f"{policy}, {count}"


def apply() -> str:
    """configure() at a script's start: a bad ICRL_ variable is one line, exit 2."""
    try:
        return configure()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
