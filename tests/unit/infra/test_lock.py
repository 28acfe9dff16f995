"""One writer per run (icrl.infra.lock): a second writer is refused in one line naming the
holder, and a killed holder frees the run."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from helpers import REPO, SUBPROCESS_ENV, tiny_argv, tiny_run_dir
from icrl.cli.run import main
from icrl.infra.lock import DirectoryLock, Locked


HOLD = ("import sys, time; from icrl.infra.lock import DirectoryLock; DirectoryLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(120)")


def test_second_writer_is_refused_naming_the_holder_and_a_killed_holder_frees_the_run(tmp_path, capsys):
    run_dir = tiny_run_dir(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True, env=SUBPROCESS_ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Locked, match=f"pid {holder.pid} on "):
            DirectoryLock(run_dir).acquire()
        assert main(tiny_argv(tmp_path)) == 2  # refused at once: before data or model
        err = capsys.readouterr().err.strip()
        assert "in use by another run" in err and f"pid {holder.pid}" in err and "\n" not in err
        assert not (run_dir / "config.json").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert "--hf_token" not in DirectoryLock(run_dir).holder_text()
    sys_argv = sys.argv
    sys.argv = ["run_experiment.py", "--hf_token", "hf_SECRET", "--x", "--hf_token=hf_SECRET2"]
    try:
        with DirectoryLock(tmp_path / "other") as lock:
            assert "SECRET" not in (tmp_path / "other" / ".lock").read_text()
            assert "--hf_token *** --x --hf_token=***" in lock.holder_text()
    finally:
        sys.argv = sys_argv
    with DirectoryLock(run_dir) as lock:  # the kernel released it with the dead process
        assert lock.held
        with pytest.raises(Locked):  # one process, two locks on one run: still one writer
            DirectoryLock(run_dir).acquire()

