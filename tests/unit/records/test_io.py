"""The record files (icrl.records.io): a kill inside an atomic write leaves nothing half-written
after the next run, the files follow the umask, and a record that is a folder or cannot be read
is one line that says so."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, SUBPROCESS_ENV, TOY_TASK, tiny_argv, train_test
from icrl.cli.run import main
from icrl.records import find_runs, write_json_atomic


KILL_IN_WRITE = ("import os, signal, sys; from icrl import records; "
                 "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL); "
                 "records.write_json_atomic(records.Path(sys.argv[1]), {'half': True})")


def test_kill_inside_each_atomic_write_leaves_nothing_after_the_next_run(finished, capsys):
    out, run_dir, before = finished
    results = (run_dir / "results.json").read_text()
    for name in ("config.json", "results.json"):
        proc = subprocess.run([sys.executable, "-c", KILL_IN_WRITE, str(run_dir / name)], cwd=REPO,
                              env=SUBPROCESS_ENV)
        assert proc.returncode == -signal.SIGKILL
    assert len(list(run_dir.glob(".config.json.*"))) == 1 and len(list(run_dir.glob(".results.json.*"))) == 1
    assert main(tiny_argv(out)) == 0
    assert "already finished" in capsys.readouterr().out
    assert not list(run_dir.glob(".*.json.*")) and (run_dir / "results.json").read_text() == results
    assert train_test(run_dir) == before


def test_json_records_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "results.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "results.json").stat().st_mode & 0o777 == 0o644


# -- a record that is a folder, or cannot be read -----------------------------------------------
FAKE = ["--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
        "--training_seed", "1", "--test_seed", "1", "--train_k", "3", "--test_k", "5", "--test_every", "2",
        "--no-progress", "--backend", "fake", "--model_name", "smollm2-135m"]


@pytest.fixture
def finished_here(in_tmp_path, tmp_path, capsys):
    """A finished tiny run under ./out (the test's folder)."""
    assert main(FAKE + ["--output_dir", "out"]) == 0
    capsys.readouterr()
    return find_runs(tmp_path / "out")[0]


@pytest.mark.parametrize("name", ["train.jsonl", "log.txt"])
def test_a_record_replaced_by_a_folder_is_one_line(name, finished_here, capsys):
    (finished_here / name).unlink()
    (finished_here / name).mkdir()
    assert main(FAKE + ["--output_dir", "out", "--train_k", "5"]) == 2
    err = capsys.readouterr().err.strip()  # an "extending ... (--train_k 5)" note may come first
    assert "Traceback" not in err and [line for line in err.splitlines() if "error" in line] == [err.splitlines()[-1]]
    assert err.splitlines()[-1].startswith("error: ") and f"{name} is a folder where a file belongs" in err, err


def cannot_run_as(prefix: list, cwd: Path) -> str:
    """Why ``prefix`` (dropping to another user) cannot run this checkout's package on the toy task,
    or "" when it can: a checkout in root's home or in a ``mktemp -d`` folder is closed to others."""
    probe = subprocess.run([*prefix, sys.executable, "-c", f"import icrl.cli.run; open({TOY_TASK!r}).close()"],
                           cwd=cwd, capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
    lines = (probe.stderr or probe.stdout).strip().splitlines()
    return "" if probe.returncode == 0 else (lines[-1] if lines else f"exit code {probe.returncode}")


def test_an_unreadable_record_is_reported_as_unreadable_not_unwritable(monkeypatch, capsys):
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("as root every file is readable, and setpriv (to drop to nobody) is missing")
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="icrl-unreadable-"))  # pytest's own tmp is closed to other users
    try:
        home.chmod(0o777)
        monkeypatch.chdir(home)
        assert main(FAKE + ["--output_dir", "out"]) == 0
        capsys.readouterr()
        run_dir = find_runs(home / "out")[0]
        (run_dir / "test.jsonl").chmod(0)
        log_before, config_before = (run_dir / "log.txt").read_bytes(), (run_dir / "config.json").read_bytes()
        prefix = []
        if os.geteuid() == 0:  # root reads any file: run as nobody, owning the records
            subprocess.run(["chown", "-R", "65534:65534", str(home / "out")], check=True)
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            why = cannot_run_as(prefix, home)
            if why:
                pytest.skip(f"user nobody cannot run the package from this checkout ({why}): a folder above "
                            f"{REPO} (or the Python at {sys.executable}) is closed to other users")
        proc = subprocess.run([*prefix, sys.executable, str(REPO / "run_experiment.py"), *FAKE, "--output_dir",
                               "out", "--train_k", "5"], cwd=home, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
        log_after, config_after = (run_dir / "log.txt").read_bytes(), (run_dir / "config.json").read_bytes()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "Traceback" not in err and "\n" not in err, err  # no "extending" or repair note
    assert err.startswith("error: cannot read ") and "test.jsonl" in err and "cannot write" not in err, err
    assert log_before == log_after and config_before == config_after  # a refusal writes nothing, the log included



def test_a_file_that_cannot_be_written_is_named_by_its_path_not_a_temporary_one(tmp_path, capsys):
    from icrl.errors import CannotWrite
    from icrl.infra.diskfull import os_error_line

    folder = tmp_path / "summary.csv"
    folder.mkdir()  # a folder where the file belongs
    with pytest.raises(CannotWrite) as info:
        write_json_atomic(folder, {"a": 1})
    line = os_error_line(info.value)
    assert line == f"error: {folder} is a folder where a file belongs; move it away, then rerun the same command"
    assert [p.name for p in tmp_path.iterdir()] == ["summary.csv"]  # no temporary file left
    with pytest.raises(CannotWrite) as info:
        write_json_atomic(Path("/proc/icrl-test.json"), {"a": 1})
    assert os_error_line(info.value).startswith("error: cannot write /proc/icrl-test.json: ")
