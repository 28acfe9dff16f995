"""bench/cpu_engines.py at tiny size, so that the three-engine comparison does not rot: torch
(and llama.cpp at q8_0 where llama-cpp-python is installed; vLLM's start alone would take minutes
here) on a few recorded calls, each engine in a process of its own; the figures come back and
the engines' labels are compared item by item."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

pytestmark = pytest.mark.model


def calls_file(path: Path, data_dir) -> Path:
    """Two training calls (one prompt each) and a test call of three prompts, each prompt with
    its own context, as the demo's retrieval run makes them."""
    from prefix_reuse import icrl_context, test_prompts

    from icrl.backends.chat import load_chat_tokenizer
    from icrl.backends import ChatBackend
    from icrl.tasks import load_task

    task = load_task("banking77_top10", data_dir)
    chat = ChatBackend("smollm2-135m", load_chat_tokenizer("smollm2-135m"))
    prompts = [test_prompts(task, chat, icrl_context(task, chat, size, seed=size), 1)[0]
               for size in (60, 120, 90, 150, 40)]
    calls = [{"prompts": [p], "labels": task.labels, "temperature": 1.0, "seed": 100 + i}
             for i, p in enumerate(prompts[:2])]
    calls.append({"prompts": prompts[2:], "labels": task.labels, "temperature": 1.0, "seed": 100})
    path.write_text(json.dumps({"calls": calls}))
    return path


def test_the_engines_run_the_same_calls_and_their_labels_are_compared(data_dir, tmp_path):
    engines = ["torch"] + (["llamacpp-q8_0"] if importlib.util.find_spec("llama_cpp") else [])
    out = tmp_path / "engines.json"
    env = {**os.environ, "ICRL_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(
        [sys.executable, str(REPO / "bench" / "cpu_engines.py"), "--engines", *engines, "--rounds", "1", "--reps", "1",
         "--lengths", "32", "64", "--calls", str(calls_file(tmp_path / "calls.json", data_dir)),
         "--greedy_prompts", "3", "--shared_prompts", "3", "--context_tokens", "200", "--out", str(out)],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    (results,) = json.loads(out.read_text())
    assert list(results) == engines
    for r in results.values():
        assert r["retrieval"]["calls"] == 3 and r["retrieval"]["prompts"] == 5
        assert [len(x) for x in r["retrieval"]["labels"]] == [1, 1, 3]
        assert len(r["greedy"]["labels"]) == 3 and len(r["shared"]["labels"]) == 3
        assert all(len(row) == 8 for row in r["greedy"]["logprobs"])  # banking77_top10's 8 first tokens
        assert all(x < 0 for row in r["greedy"]["logprobs"] for x in row)
        assert set(r["prefill"]) == {"32", "64"} and all(t > 0 for ts in r["prefill"].values() for t in ts)
    assert "retrieval s" in result.stdout and "x torch" in result.stdout
    if "llamacpp-q8_0" in results:
        assert "llamacpp-q8_0 vs torch: greedy labels" in result.stdout
