"""The openai backend against a real `vllm serve` (CPU engine, SmolLM2-135M, float32).

Marked `vllm` and skipped where vLLM is not installed. One server for the session (this module
runs on one xdist worker: group `vllm` of tests/conftest.py's SHARED), started on 127.0.0.1 and a
free port, waited for on /health and stopped (its whole process group) at the end; the
kill-and-resume test kills it mid-run and starts it again, cold (what it tests). Parity is
checked against the in-process engine of conftest.py (the same engine settings).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import reasoning_run_resumes, VLLM_PAPER_STYLE as PAPER_STYLE, icrl_prompts, untimed_records

from icrl.tasks import load_task

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed (make setup-vllm installs the CPU engine)"),
    pytest.mark.skipif(importlib.util.find_spec("openai") is None, reason="the openai package is not installed"),
]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from icrl.backends.vllm_serve import VLLMServer

    # 1 GiB of KV cache (23k tokens), not the 4 GiB of a run: the server runs beside the session's
    # in-process engine and a run's engine in a subprocess (two servers and two engines of 4 GiB
    # each outgrew this machine's 24 GiB: the kernel killed an engine).
    srv = VLLMServer("smollm2-135m", kv_cache_memory_bytes=2**30,
                     log_path=tmp_path_factory.mktemp("serve") / "vllm-serve.log")
    srv.start()
    yield srv
    srv.stop()
    assert srv.proc is None


@pytest.fixture(scope="module")
def client(server):
    """The openai backend in completions mode (auto finds it) on the module's server."""
    from icrl.backends import load_backend

    backend = load_backend("smollm2-135m", backend="openai", base_url=server.base_url)
    yield backend
    backend.close()


@pytest.fixture
def banking(data_dir):
    return load_task("banking77", data_dir=data_dir)


def test_both_constraint_modes_return_only_labels(server, client, banking):
    from icrl.backends import load_backend

    assert client.describe()["api_mode"] == "completions" and client.constraint == "structured_outputs"
    prompts = icrl_prompts(client, banking, n_context=8, n_queries=10)
    out = client.predict(prompts, banking.labels, temperature=1.0, seed=3)
    assert len(out) == 10 and set(out) <= set(banking.labels)
    assert client.stats["token_mismatches"] == 0  # the server's usage agrees with the local tokenizer
    chat = load_backend("smollm2-135m", backend="openai", base_url=server.base_url, api_mode="chat")
    try:
        rendered = icrl_prompts(chat, banking, n_context=8, n_queries=10)
        first = chat.predict(rendered, banking.labels, temperature=1.0, seed=3)
        assert len(first) == 10 and set(first) <= set(banking.labels)
        assert chat.predict(rendered, banking.labels, temperature=1.0, seed=3) == first
        assert chat.describe()["api_mode"] == "chat"
    finally:
        chat.close()


def test_same_seed_same_outputs(client, banking):
    prompts = icrl_prompts(client, banking, n_context=6, n_queries=8, seed=1)
    first = client.predict(prompts, banking.labels, temperature=1.0, seed=11)
    assert client.predict(prompts, banking.labels, temperature=1.0, seed=11) == first
    assert client.predict(prompts[::-1], banking.labels, temperature=1.0, seed=11)[::-1] == first
    assert client.predict(prompts, banking.labels, temperature=1.0, seed=12) != first, \
        "the seed should change what is sampled at temperature 1"


def test_predictions_equal_the_in_process_engine(client, engine, banking):
    """Same rendered prompts, same seeds: the server and the in-process engine agree."""
    prompts = icrl_prompts(engine, banking, n_context=16, n_queries=16, seed=2)
    assert client.predict(prompts, banking.labels, 0.0, 0) == engine.predict(prompts, banking.labels, 0.0, 0)
    assert client.predict(prompts, banking.labels, 1.0, 5) == engine.predict(prompts, banking.labels, 1.0, 5)


def test_paper_style_run_end_to_end_server_killed_and_resumed(server, paper_style_on_engine, data_dir, tmp_path):
    """`run_experiment.py --backend openai` on real data; the server is killed mid-run: one-line
    error, exit 2; the server restarts (a cold engine) and the same command resumes and finishes
    with the records of the same run on the in-process engine."""
    args = [*PAPER_STYLE, "--data_dir", str(data_dir)]
    args[args.index("vllm")] = "openai"
    command = [sys.executable, str(REPO / "run_experiment.py"), *args, "--base_url", server.base_url,
               "--max_retries", "1", "--output_dir", str(tmp_path / "served")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline, train = time.time() + 400, None
    try:
        while time.time() < deadline and proc.poll() is None:
            found = list((tmp_path / "served").rglob("train.jsonl"))
            if found and len(found[0].read_text().splitlines()) >= 6:
                train = found[0]
                server.kill()
                break
            time.sleep(0.05)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert train is not None, f"the run never got to step 6: {proc.returncode} {err[-2000:]}"
    # one error line, after at most the notices that the server went silent
    lines = [line for line in err.strip().splitlines() if not line.startswith("waiting ")]
    assert proc.returncode == 2 and len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"error: the server at {server.base_url} failed") and "rerun" in lines[0]
    assert 6 <= len(train.read_text().splitlines()) < 16

    server.start()
    resumed = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming" in resumed.stderr and "Traceback" not in resumed.stderr
    run = train.parent
    assert json.loads((run / "results.json").read_text())["finished"] is True
    config = json.loads((run / "config.json").read_text())
    assert config["backend"]["api_mode"] == "completions" and config["backend"]["base_url"] == server.base_url

    # The same command on the in-process engine: the same records, less the usage the server
    # reports on every line (an in-process engine has no API to report it).
    served = untimed_records(run)
    assert all(line["usage"]["requests"] >= 1 for line in served["train"])
    clean = paper_style_on_engine
    unmetered = {name: [{k: v for k, v in line.items() if k != "usage"} for line in lines]
                 for name, lines in served.items()}
    assert unmetered == untimed_records(clean)


def test_a_reasoning_run_against_the_server(client, server, tmp_path):
    """--reasoning through vllm serve: completions continue the rendered prompt up to the answer
    marker, then the constrained label; a resumed run writes the same records; chat mode
    generates too."""
    from icrl.backends import load_backend

    whole, resumed = reasoning_run_resumes(client, tmp_path)
    assert resumed == whole
    assert all(isinstance(r["reasoning"], str) and r["reasoning_tokens"] >= 1 for r in whole["train"])
    chat = load_backend("smollm2-135m", backend="openai", base_url=server.base_url, api_mode="chat")
    try:
        frame = chat.reasoning_frame([{"role": "user", "content": "Message: my refund never arrived"}], "Intent:")
        (written,) = chat.generate([frame.prompt], 8, 0.0, 1, stop=[frame.stop])
        assert written.tokens >= 1 and '"Now give your answer (Intent:)."' in frame.answer_prompt(written.text)
    finally:
        chat.close()
