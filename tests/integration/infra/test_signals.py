"""Unattended runs: signals during start-up, under nohup, detached, twice;
the stop message on its own line. Runs use the openai backend against a stdlib server on
127.0.0.1 (icrl/standin/openai_server.py), so no model loads."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icrl.standin.openai_server import MODEL, FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[3]
RUN = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
       "--training_seed", "1", "--test_seed", "1", "--backend", "openai", "--model_name", MODEL,
       "--max_context_examples", "2", "--test_k", "2", "--test_every", "4"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def start(out: Path, server, *extra, prefix=(), **popen):
    return subprocess.Popen([*prefix, sys.executable, "run_experiment.py", *RUN, "--base_url", server.base_url,
                             "--output_dir", str(out), *extra], cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **popen)


def wait_for_steps(out: Path, proc, n: int = 1, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and proc.poll() is None:
        lines = sum(len(p.read_text().splitlines()) for p in out.rglob("train.jsonl"))
        if lines >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"no {n} steps: {proc.poll()} {proc.stderr.read() if proc.poll() is not None else ''}")


def results(out: Path) -> dict:
    (path,) = list(out.rglob("results.json"))
    return json.loads(path.read_text())


@pytest.mark.parametrize("how", ["nohup", "setsid"])
def test_sighup_does_not_stop_a_run_under_nohup_or_detached(tmp_path, how):
    out = tmp_path / "out"
    with FakeOpenAIServer(mode="slow") as server:
        if how == "nohup":
            proc = start(out, server, "--train_k", "8", "--no-progress", prefix=("nohup",))
        else:
            proc = start(out, server, "--train_k", "8", "--no-progress", start_new_session=True)
        wait_for_steps(out, proc)
        proc.send_signal(signal.SIGHUP)
        stdout, stderr = proc.communicate(timeout=180)
    assert proc.returncode == 0, stderr
    assert results(out)["finished"] and results(out)["steps_completed"] == 8


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_start_up_is_honoured_without_a_traceback(tmp_path, signum):
    """Sent at several moments of the start (interpreter, imports, parsing, claiming the run).
    The server answers in 0.3 s, so that no run can finish before the last signal."""
    with FakeOpenAIServer(mode="slow") as server:
        for i, delay in enumerate((0.15, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.6)):
            out = tmp_path / f"out{i}"
            proc = start(out, server, "--train_k", "4", "--no-progress")
            time.sleep(delay)
            proc.send_signal(signum)
            stdout, stderr = proc.communicate(timeout=120)
            assert proc.returncode in (128 + signum, -signum), (delay, proc.returncode, stderr)
            assert "Traceback" not in stderr, (delay, stderr)
            assert len(stderr.strip().splitlines()) <= 1, (delay, stderr)
            if proc.returncode == 128 + signum:
                assert stderr.strip().startswith("interrupted"), (delay, stderr)
            assert not list(out.rglob("train.jsonl")) or not results(out)["finished"], delay


def test_a_second_ctrl_c_prints_no_traceback(tmp_path):
    out = tmp_path / "out"
    with FakeOpenAIServer(mode="slow") as server:
        proc = start(out, server, "--train_k", "20", "--no-progress")
        wait_for_steps(out, proc, 2)
        for _ in range(30):
            if proc.poll() is not None:
                break
            proc.send_signal(signal.SIGINT)
            time.sleep(0.01)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    assert stderr.strip().splitlines()[-1].startswith("interrupted at step ")


def test_the_stop_message_is_on_its_own_line_after_the_progress_bar(tmp_path):
    out = tmp_path / "out"
    with FakeOpenAIServer(mode="slow") as server:
        proc = start(out, server, "--train_k", "20", "--progress")
        wait_for_steps(out, proc, 2)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, stderr
    last = stderr.rstrip("\n").split("\n")[-1]
    assert last.startswith("interrupted at step ") and "\r" not in last, repr(stderr[-300:])


# -- the openai backend against servers that misbehave --------------------------------
def test_a_silent_server_is_said_within_seconds_then_fails_in_one_line_at_the_limit(tmp_path):
    import threading

    from icrl.standin.openai_server import SilentServer

    lines: list = []
    with SilentServer() as server:
        proc = start(tmp_path / "out", server, "--train_k", "3", "--no-progress", "--timeout", "12",
                     "--max_retries", "0")

        def read():
            for line in proc.stderr:
                lines.append((time.monotonic(), line.rstrip("\n")))
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        proc.wait(timeout=90)
        reader.join(5)
    assert server.accepted, lines
    lines = [(t - server.accepted[0], line) for t, line in lines]  # from the first request on
    said = [(t, line) for t, line in lines if server.base_url in line]
    assert said and said[0][0] < 10 and "waiting" in said[0][1], lines  # on screen within 10 s
    assert proc.returncode == 2 and lines[-1][1].startswith("error: ") and server.base_url in lines[-1][1], lines
    assert "Traceback" not in "\n".join(line for _, line in lines)
    assert lines[-1][0] < 12 + 15, lines  # fails at its limit, not after minutes


@pytest.mark.parametrize("mode", ["garbage", "invalid_json", "empty_choices", "nonlabel", "404", "wrongpath"])
def test_a_server_answering_something_else_is_one_line_naming_it(tmp_path, capsys, mode):
    from icrl.cli.run import main

    with FakeOpenAIServer(mode=mode) as server:
        url = server.base_url if mode != "wrongpath" else server.base_url.replace("/v1", "/api")
        code = main([*RUN, "--train_k", "3", "--no-progress", "--base_url", url, "--output_dir", str(tmp_path / "o"),
                     "--max_retries", "1"])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("error: ") and url in err, err
    assert not (tmp_path / "o").exists() or not list((tmp_path / "o").rglob("train.jsonl")), "a step was written"
    if mode in ("404", "wrongpath"):
        assert "--base_url" in err and "retries" not in err, err


# -- the lock --------------------------------------------------------------------------
def test_deleting_the_lock_file_does_not_let_a_second_writer_in(tmp_path):
    out = tmp_path / "out"
    with FakeOpenAIServer(mode="slow") as server:
        first = start(out, server, "--train_k", "12", "--no-progress")
        wait_for_steps(out, first, 1)
        for lock in out.rglob(".lock"):
            lock.unlink()
        second = subprocess.run([sys.executable, "run_experiment.py", *RUN, "--base_url", server.base_url,
                                 "--output_dir", str(out), "--train_k", "12", "--no-progress"], cwd=ROOT, env=ENV,
                                capture_output=True, text=True, timeout=120)
        stdout, stderr = first.communicate(timeout=180)
    assert first.returncode == 0, stderr
    assert second.returncode == 2 and "in use" in second.stderr and len(second.stderr.strip().splitlines()) == 1, \
        second.stderr
    (train,) = list(out.rglob("train.jsonl"))
    steps = [json.loads(line)["step"] for line in train.read_text().splitlines()]
    assert steps == list(range(12))  # no step written twice


def test_a_directory_lock_refuses_a_second_holder_even_without_its_file(tmp_path):
    from icrl.infra.lock import DirectoryLock, Locked

    held = DirectoryLock(tmp_path).acquire()
    try:
        (tmp_path / ".lock").unlink()
        with pytest.raises(Locked):
            DirectoryLock(tmp_path).acquire()
    finally:
        held.release()
    DirectoryLock(tmp_path).acquire().release()  # free again once released
