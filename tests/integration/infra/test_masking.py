"""No secret reaches a file or the terminal: every spelling argparse accepts
for --hf_token / --api_key, and user:password@ in --base_url, planted and grepped for in all
that a run (killed, then resumed) and a sweep write and print."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icrl.standin.openai_server import MODEL, FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[3]
TOKEN, KEY, PASSWORD = "hf_PLANTEDtoken123", "sk-PLANTEDkey456", "PLANTEDpass789"
PLANTED = (TOKEN, KEY, PASSWORD)
RUN = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
       "--training_seed", "1", "--test_seed", "1", "--backend", "openai", "--model_name", MODEL,
       "--max_context_examples", "2", "--test_k", "3", "--test_every", "2", "--no-progress"]


def env() -> dict:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": ""}


def url_with_password(server) -> str:
    return server.base_url.replace("http://", f"http://alice:{PASSWORD}@")


def leaks(root: Path, *texts: str) -> list[str]:
    """Where a planted secret appears: files under root (any name, hidden ones too) and texts."""
    found = []
    for path in [p for p in root.rglob("*") if p.is_file()]:
        data = path.read_bytes()
        found += [f"{path}: {s}" for s in PLANTED if s.encode() in data]
    for i, text in enumerate(texts):
        found += [f"output {i}: {s}" for s in PLANTED if s in text]
    return found


@pytest.mark.parametrize("spelling", [
    ["--hf_token", TOKEN, "--api_key", KEY], ["--hf_token=" + TOKEN, "--api_key=" + KEY],
    ["--hf_tok", TOKEN, "--api_k=" + KEY], ["--hf=" + TOKEN, "--api_ke", KEY], ["--hf_t", TOKEN, "--api_key=" + KEY]])
def test_lock_file_command_masks_every_spelling(monkeypatch, tmp_path, spelling):
    from icrl.infra.lock import DirectoryLock

    monkeypatch.setattr(sys, "argv", ["run_experiment.py", *spelling, "--base_url",
                                      f"http://alice:{PASSWORD}@127.0.0.1:1/v1"])
    lock = DirectoryLock(tmp_path).acquire()
    try:
        text = (tmp_path / ".lock").read_text()
    finally:
        lock.release()
    assert not leaks(tmp_path, text) and "127.0.0.1:1/v1" in text


def test_a_killed_then_resumed_run_writes_and_prints_no_secret(tmp_path):
    out = tmp_path / "out"
    with FakeOpenAIServer(mode="slow") as server:
        words = [*RUN, "--train_k", "8", "--output_dir", str(out), "--base_url", url_with_password(server),
                 "--verbose", "--debug_k", "3"]
        first = subprocess.Popen([sys.executable, "run_experiment.py", *words, "--hf_tok", TOKEN, "--api_k=" + KEY],
                                 cwd=ROOT, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(p.stat().st_size for p in out.rglob("train.jsonl")):
            time.sleep(0.1)
        lock_text = "".join(p.read_text() for p in out.rglob(".lock"))  # the kill leaves it as it is
        first.send_signal(signal.SIGKILL)
        out1, err1 = first.communicate(timeout=30)
        assert lock_text and not leaks(out, out1, err1, lock_text)
        second = subprocess.run([sys.executable, "run_experiment.py", *words, "--hf_token=" + TOKEN, "--api_key", KEY],
                                cwd=ROOT, env=env(), capture_output=True, text=True, timeout=180)
    assert second.returncode == 0, second.stderr
    assert not leaks(out, second.stdout, second.stderr)
    assert any(s.encode() in b"".join(p.read_bytes() for p in out.rglob("*") if p.is_file())
               for s in ("127.0.0.1",))  # the URL itself is recorded, only its password is not


def test_a_sweep_and_its_dry_run_write_and_print_no_secret(tmp_path):
    out = tmp_path / "out"
    with FakeOpenAIServer() as server:
        run = [w for w in RUN]
        del run[run.index("--training_seed"):run.index("--training_seed") + 2]
        words = [*run, "--train_k", "3", "--output_dir", str(out), "--base_url", url_with_password(server),
                 "--grid", "training_seed=1,2", "--hf_tok", TOKEN, "--api_k=" + KEY]
        dry = subprocess.run([sys.executable, "run_sweep.py", "--dry_run", *words], cwd=ROOT, env=env(),
                             capture_output=True, text=True, timeout=120)
        assert dry.returncode == 0, dry.stderr
        assert "***" in dry.stdout and not leaks(tmp_path, dry.stdout, dry.stderr)
        real = subprocess.run([sys.executable, "run_sweep.py", *words, "--name", "planted"], cwd=ROOT, env=env(),
                              capture_output=True, text=True, timeout=180)
    assert real.returncode == 0, real.stderr
    assert (out / "sweeps" / "planted.csv").is_file()
    assert not leaks(tmp_path, real.stdout, real.stderr)


def test_server_errors_name_the_server_without_its_password(tmp_path):
    from icrl.errors import UsageError
    from icrl.backends.openai_backend import OpenAIBackend

    with pytest.raises(UsageError) as info:
        OpenAIBackend(MODEL, base_url=f"http://alice:{PASSWORD}@127.0.0.1:9/v1", api_key=KEY, max_retries=0,
                      timeout=5)
    assert "127.0.0.1:9" in str(info.value) and PASSWORD not in str(info.value) and KEY not in str(info.value)
