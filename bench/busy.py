"""A bounded load generator for the benchmarks: a busy machine, made on purpose.

``busy(n)`` starts n processes that each spin a pure-Python loop (one core's worth of work each,
no torch, no memory), for the duration of a ``with`` block. Bounded three times: each process
ends by itself after ``limit_s`` seconds or as soon as the process that started it is gone (a
benchmark killed by a timeout), and the block stops them (by their own process ids) when it
ends. ``busy(0)`` starts nothing.

    with busy(6):
        ...  # timed under six competing busy processes

Where they run matters on Linux. With the kernel's autogroup scheduling (on where
/proc/sys/kernel/sched_autogroup_enabled is 1), the CPU is shared between sessions first and then
between the processes of each session. ``busy(n)`` starts its processes in the benchmark's own
session: every thread competes with every other, the harness's worst case (a user's own jobs
started from one terminal, or autogroup off). ``busy(n, apart=True)`` starts them as one job of a
session of their own, as another terminal's or another user's work would run; there the block
stops the job, and its loops end as soon as their parent (the job) is gone.

``load_text()``: the machine's load average and CPU count, printed beside every figure.

Run as a script, it shows what the two mean on this machine: a pure-Python loop of 20 million
additions timed alone, beside N busy processes of its own session, and beside N of another session
(each twice, alternated; "0 busy processes" is alone):

    python bench/busy.py [--load 6]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time

# Spins until its time is up or the process that started it is gone (killed before it could stop them).
LOOP = ("import os, time\nend = time.monotonic() + {limit}\nparent = {parent}\n"
        "while time.monotonic() < end and os.getppid() == parent:\n    pass\n")
# A job of its own session: starts the loops as its children and waits until its time is up or the
# process that started it is gone; its loops end by themselves as soon as the job is gone.
JOB = ("import os, subprocess, sys, time\nend = time.monotonic() + {limit}\nparent = {parent}\n"
       "loop = {loop!r}.replace('PARENT', str(os.getpid()))\n"
       "procs = [subprocess.Popen([sys.executable, '-c', loop]) for _ in range({n})]\n"
       "while time.monotonic() < end and os.getppid() == parent:\n    time.sleep(0.5)\n")


def load_text() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


def add_apart_flag(parser) -> None:
    parser.add_argument("--apart", action="store_true",
                        help="with --load: the busy processes run as one job of a session of their own, as another "
                             "terminal's or user's work would (default: in this run's session)")


def busy_text(n: int, apart: bool) -> str:
    """What ``busy(n, apart)`` started, for the line beside a figure."""
    if n == 0:
        return "0 busy processes of ours"
    where = "one job of another session" if apart else "in this session"
    return f"{n} busy processes of ours ({where}; {autogroup_text()})"


def autogroup_text() -> str:
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled") as f:
            return "autogroup " + ("on" if f.read().strip() == "1" else "off")
    except OSError:
        return "autogroup unknown"


@contextlib.contextmanager
def busy(n: int, limit_s: float = 1800.0, apart: bool = False):
    procs = []
    env = {"PATH": os.environ.get("PATH", "")}
    try:
        if apart and n > 0:
            loop = LOOP.format(limit=float(limit_s), parent="PARENT")
            job = JOB.format(limit=float(limit_s), parent=os.getpid(), loop=loop, n=n)
            procs.append(subprocess.Popen([sys.executable, "-c", job], stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True))
        else:
            for _ in range(n):
                procs.append(subprocess.Popen([sys.executable, "-c", LOOP.format(limit=float(limit_s),
                                                                                  parent=os.getpid())],
                                              stdin=subprocess.DEVNULL, env=env))
        yield procs
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _loop_seconds() -> float:
    start, total = time.perf_counter(), 0
    for i in range(20_000_000):
        total += i
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--load", type=int, default=6, metavar="N", help="busy processes (default: 6)")
    args = parser.parse_args()
    print(f"{autogroup_text()}; {load_text()}")
    for _ in range(2):
        for n, apart in ((0, False), (args.load, False), (args.load, True)):
            with busy(n, apart=apart):
                time.sleep(1.0 if n else 0.0)  # the loops are running
                seconds = _loop_seconds()
            print(f"20 M additions: {seconds:.2f} s, {busy_text(n, apart)}; {load_text()}", flush=True)


if __name__ == "__main__":
    main()
