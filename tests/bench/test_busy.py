"""bench/busy.py, the benchmarks' load generator: its busy processes run where they say (the
benchmark's own session, or one job of a session of their own with apart=True: on Linux with
autogroup the two load a run differently, docs/benchmarks.md) and are gone when the block ends."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from busy import busy, busy_text


def children_of(pid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def running(pid: int) -> bool:
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def gone(pids: list[int], within_s: float = 10.0) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if not any(running(pid) for pid in pids):
            return True
        time.sleep(0.1)
    return False


def test_busy_runs_its_loops_in_the_benchmarks_session_and_stops_them():
    with busy(2) as procs:
        pids = [p.pid for p in procs]
        assert len(pids) == 2
        assert {os.getsid(pid) for pid in pids} == {os.getsid(0)}
    assert gone(pids)


def test_apart_runs_the_loops_as_one_job_of_a_session_of_its_own_and_stops_them():
    with busy(3, apart=True) as procs:
        job = procs[0].pid
        end = time.monotonic() + 20
        while len(children_of(job)) < 3 and time.monotonic() < end:
            time.sleep(0.1)
        loops = children_of(job)
        assert len(loops) == 3
        assert {os.getsid(pid) for pid in [job, *loops]} == {job} != {os.getsid(0)}
    assert gone([job, *loops])


def test_busy_text_says_where_the_load_runs():
    assert busy_text(0, True) == "0 busy processes of ours"
    assert busy_text(6, True).startswith("6 busy processes of ours (one job of another session; autogroup ")
    assert busy_text(6, False).startswith("6 busy processes of ours (in this session; autogroup ")
