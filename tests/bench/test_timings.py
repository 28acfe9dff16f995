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
    assert [line.split(":")[0] for line in listed] == ["refusal", "estimate", "test-fast", "demo", "ci"]


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
