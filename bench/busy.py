"""A bounded load generator for the benchmarks: a busy machine, made on purpose.

``busy(n)`` starts n processes that each spin a pure-Python loop (one core's worth of work each,
no torch, no memory), for the duration of a ``with`` block. Bounded twice: each process ends by
itself after ``limit_s`` seconds, and the block stops them (by their own process ids) when it
ends, however it ends. ``busy(0)`` starts nothing.

    with busy(6):
        ...  # timed under six competing busy processes

``load_text()``: the machine's load average and CPU count, printed beside every figure.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

LOOP = "import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"


def load_text() -> str:
    return "load average " + ", ".join(f"{x:.2f}" for x in os.getloadavg()) + f" on {os.cpu_count()} CPUs"


@contextlib.contextmanager
def busy(n: int, limit_s: float = 1800.0):
    procs = []
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", LOOP.format(limit=float(limit_s))],
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
