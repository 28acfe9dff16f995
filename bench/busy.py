"""A bounded load generator for the benchmarks: a busy machine, made on purpose.

``busy(n)`` starts n processes that each spin a pure-Python loop (one core's worth of work each,
no torch, no memory), for the duration of a ``with`` block. Bounded three times: each process
ends by itself after ``limit_s`` seconds or as soon as the process that started it is gone (a
benchmark killed by a timeout), and the block stops them (by their own process ids) when it
ends. ``busy(0)`` starts nothing.

    with busy(6):
        ...  # timed under six competing busy processes

``load_text()``: the machine's load average and CPU count, printed beside every figure.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

# Spins until its time is up or the process that started it is gone (killed before it could stop them).
LOOP = ("import os, time\nend = time.monotonic() + {limit}\nparent = {parent}\n"
        "while time.monotonic() < end and os.getppid() == parent:\n    pass\n")


def load_text() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


@contextlib.contextmanager
def busy(n: int, limit_s: float = 1800.0):
    procs = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", LOOP.format(limit=float(limit_s), parent=os.getpid())],
                                          stdin=subprocess.DEVNULL, env={"PATH": os.environ.get("PATH", "")}))
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
