"""bench/timings.py, which measures README's and docs' timings again: every documented figure is
where the script reads it, and a quick timing is measured and printed beside its documented
figure, with the machine and the load."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def timings(*argv) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "bench" / "timings.py"), *argv], capture_output=True, text=True,
                          cwd=REPO, timeout=300)


def test_every_documented_timing_is_where_the_script_reads_it():
    done = timings("--check")
    assert done.returncode == 0, done.stdout + done.stderr
    listed = timings("--list").stdout.splitlines()
    assert [line.split(":")[0] for line in listed] == ["refusal", "estimate", "test-fast", "test-fast-busy",
                                                              "demo", "ci"]


def test_a_timing_is_printed_beside_the_documented_one_with_the_machine_and_the_load():
    done = timings("--only", "refusal")
    assert done.returncode == 0, done.stderr
    machine, measured, *documented = done.stdout.splitlines()[:3]
    assert machine.startswith("machine: ") and " cores, " in machine and " UTC" in machine
    assert measured.startswith("refusal: `python run_draw_plots.py --data_dir no_such_folder` in this checkout: ")
    assert "(median of 5: " in measured and "exit 2; load " in measured and " -> " in measured
    assert documented and documented[0].startswith("    documented in docs/development.md: ")
    assert "NOT FOUND" not in done.stdout


def test_an_unknown_timing_is_refused():
    done = timings("--only", "no_such_timing")
    assert done.returncode == 2 and "unknown timing 'no_such_timing'" in done.stderr


sys.path.insert(0, str(REPO / "bench"))
# A busy loop of bench/busy.py, found by a phrase of its code; written in two pieces here, so that
# the command that looks for it does not find itself.
PHRASE = "getppid() == parent"
FIND_BUSY = ("python -c \"import pathlib, sys; sys.exit(0 if any(b'getppid() ==' + b' parent' in p.read_bytes() "
             "for p in pathlib.Path('/proc').glob('[0-9]*/cmdline') if p.exists()) else 1)\"")


def _busy_pids() -> list:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if PHRASE.encode() in cmdline.read_bytes():
                pids.append(cmdline.parent.name)
        except OSError:
            pass
    return pids


def test_a_timing_under_load_runs_its_command_beside_a_busy_process_and_stops_it_after():
    import timings

    before = _busy_pids()
    result = timings.measure(timings.Timing("busy", FIND_BUSY, (), cost="a second", busy=1))
    assert result["exit"] == [0]  # the command saw the busy process beside it
    assert _busy_pids() == before  # and it is gone
    quiet = timings.measure(timings.Timing("quiet", FIND_BUSY, (), cost="a second"))
    assert quiet["exit"] == [1] or before  # none beside a timing without one
