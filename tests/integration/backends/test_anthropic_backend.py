"""``run_experiment.py --backend anthropic`` end to end, in a process of its own, against the Messages
API stand-in (icrl/standin/anthropic_server.py; the real SDK through --base_url): a paper-style
explorative ICRL run killed mid-run and rerun gives the records of the uninterrupted run, and
the key, read from ANTHROPIC_API_KEY, is in no file the runs wrote."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icrl.standin.anthropic_server import KEY, MODEL, FakeAnthropicServer
from helpers import TOY_TASK, untimed_records

pytest.importorskip("anthropic")
ROOT = Path(__file__).resolve().parents[3]
LABELS = ["billing", "refund", "delivery", "account"]
PAPER_STYLE = ["--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased_only_positive",
               "--context_p_keep", "0.5", "--temperature", "1.0", "--icrl", "--max_context_examples", "8",
               "--train_k", "24", "--test_every", "8", "--test_k", "6", "--seed", "100", "--training_seed", "100",
               "--test_seed", "100", "--backend", "anthropic", "--model_name", MODEL, "--no-progress"]


def command(server, out: Path, *extra) -> list:
    return [sys.executable, "run_experiment.py", *PAPER_STYLE, "--base_url", server.base_url,
            "--output_dir", str(out), *extra]


def env() -> dict:
    return {**{k: v for k, v in os.environ.items() if not k.startswith("ANTHROPIC_")}, "ANTHROPIC_API_KEY": KEY,
            "HF_HUB_OFFLINE": "1"}


def records(out: Path) -> dict:
    """The run's records less their timings and what a prompt cache served (the stand-in's cache
    outlives a killed run, so a resumed step may read what the first run wrote)."""
    (run,) = [p.parent for p in out.rglob("config.json")]
    recs = untimed_records(run)
    return {name: [{k: v for k, v in row.items() if "usage" not in k} for row in rows] for name, rows in recs.items()}


def test_a_paper_style_run_killed_and_rerun_gives_the_uninterrupted_records(tmp_path):
    with FakeAnthropicServer(LABELS, delay=0.05) as server:
        whole = subprocess.run(command(server, tmp_path / "whole"), cwd=ROOT, env=env(), capture_output=True,
                               text=True, timeout=600)
        assert whole.returncode == 0, whole.stderr[-2000:]
        proc = subprocess.Popen(command(server, tmp_path / "killed"), cwd=ROOT, env=env(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        deadline, killed = time.monotonic() + 300, False
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                found = list((tmp_path / "killed").rglob("train.jsonl"))
                if found and len(found[0].read_text().splitlines()) >= 10:
                    proc.send_signal(signal.SIGKILL)
                    killed = True
                    break
                time.sleep(0.02)
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert killed, "the run ended before it could be killed"
        assert not json.loads(next((tmp_path / "killed").rglob("results.json")).read_text()).get("finished")
        resumed = subprocess.run(command(server, tmp_path / "killed"), cwd=ROOT, env=env(), capture_output=True,
                                 text=True, timeout=600)
        assert resumed.returncode == 0 and "Traceback" not in resumed.stderr, resumed.stderr[-2000:]
        assert not server.problems, server.problems
        marked = {turn["content"][0]["text"] for body in server.messages for turn in body["messages"]
                  if isinstance(turn["content"], list)}
        assert len(marked) > 1  # breakpoints after the last episode of many contexts
    assert records(tmp_path / "killed") == records(tmp_path / "whole")
    (config,) = list((tmp_path / "whole").rglob("config.json"))
    backend = json.loads(config.read_text())["backend"]
    assert backend["backend"] == "anthropic" and backend["api_mode"] == "chat"
    assert backend["base_url"] == server.base_url
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path
