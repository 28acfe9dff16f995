"""Stopping a run (icrl.infra.signals): Ctrl-C, SIGTERM and SIGHUP each end it in one line with
its exit code, results.json current, and the same command resumes."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from helpers import REPO, SLOW_ENV, tiny_argv, tiny_run_dir
from icrl.records import read_jsonl


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signal_stops_with_one_line_and_results_current(tmp_path, signum, code):
    out = tmp_path / "out"
    args = tiny_argv(out, "--train_k", "40", "--test_every", "2", "--test_k", "2")
    proc = subprocess.Popen([sys.executable, str(REPO / "run_experiment.py"), *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=SLOW_ENV)
    run_dir = tiny_run_dir(out, "--train_k", "40", "--test_every", "2", "--test_k", "2")
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and len(read_jsonl(run_dir / "train.jsonl")) < 3:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted at step ") and last.endswith("rerun the same command to resume")
    assert "Traceback" not in stderr
    done = len(read_jsonl(run_dir / "train.jsonl"))
    assert last == f"interrupted at step {done}; rerun the same command to resume"
    summary = json.loads((run_dir / "results.json").read_text())
    assert summary["steps_completed"] == done and not summary["finished"]
    assert not list(run_dir.glob(".*.json.*"))



class _Signalling:
    """A descriptor whose ``__set_name__`` sends SIGTERM: the signal lands while a class is made,
    where Python wraps what the handler raises in a RuntimeError (a dataclass's fields, in CI)."""

    def __set_name__(self, owner, name):
        import os

        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)  # the handler runs before this ends


def _make_a_class(argv):
    type("Made", (), {"field": _Signalling()})


def test_a_sigterm_inside_a_class_creation_is_a_stop_not_a_traceback(monkeypatch, capsys):
    from icrl.cli import run
    from icrl.infra import signals

    with pytest.raises(RuntimeError) as caught:  # what reaches the caller
        previous = signals.install(signals.raise_interrupted)
        try:
            _make_a_class([])
        finally:
            signals.restore(previous)
    assert signals.stop_in(caught.value) == signal.SIGTERM
    assert signals.stop_in(RuntimeError("no stop here")) is None

    monkeypatch.setattr(run, "parse_args", _make_a_class)
    assert run.main(["--train_k", "4"]) == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == "interrupted at step 0; rerun the same command to resume"
    assert "Traceback" not in err


def test_a_ctrl_c_that_arrives_is_counted():
    """What tells a Ctrl-C the user pressed from a KeyboardInterrupt code raises itself: a
    handler of icrl's counts each that arrives, and Python's own handler is replaced by one that
    counts too (and raises KeyboardInterrupt as it does)."""
    import os

    from icrl.infra import signals

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        before = signals.arrivals()
        with pytest.raises(KeyboardInterrupt):
            raise KeyboardInterrupt  # raised, not sent
        assert signals.arrivals() == before
        signals.count_interrupts()
        assert signal.getsignal(signal.SIGINT) is not signal.default_int_handler
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        assert signals.arrivals() == before + 1
        installed = signals.install(signals.raise_interrupted)  # a run's handlers count too
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        signals.restore(installed)
        assert signals.arrivals() == before + 2
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signals.count_interrupts()  # a handler someone chose is kept
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


class _StopsWhenCollected:
    """SIGTERM sent while Python collects it: what the handler raises inside ``__del__`` cannot
    propagate (as inside a uvloop or pydantic-core callback) and goes to ``sys.unraisablehook``."""

    def __del__(self):
        import os

        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.3)  # the handler runs before this ends


def test_a_stop_a_c_callback_swallows_is_delivered_again_not_printed(capsys):
    from icrl.infra import signals

    hook = sys.unraisablehook
    previous = signals.install(signals.raise_interrupted)
    try:
        with pytest.raises(signals.Interrupted) as caught:
            _StopsWhenCollected()  # collected at once: the stop is swallowed there ...
            time.sleep(5)  # ... and raised again here, within 50 ms
        assert caught.value.signum == signal.SIGTERM
    finally:
        signals.restore(previous)
    assert sys.unraisablehook is hook
    err = capsys.readouterr().err
    assert "Exception ignored" not in err and "Traceback" not in err, err
