"""run_experiment.py --backend gemini against the protocol stand-in (icrl/standin/gemini_server.py):
the paper's command at small sizes, a run killed mid-way and resumed to the records of an
uninterrupted one, and bad input in one line (exit 2) with the key never shown or written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icrl.standin.gemini_server import KEY, MODEL, GeminiServer
from helpers import REPO, SUBPROCESS_ENV, TOY_TASK, run_records

pytest.importorskip("google.genai")
ARGS = ["--backend", "gemini", "--model_name", MODEL, "--task_name", TOY_TASK, "--icrl",
        "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.5",
        "--max_context_examples", "4", "--train_k", "6", "--test_every", "3", "--test_k", "4", "--temperature", "1.0",
        "--no-progress", "--seed", "100", "--training_seed", "100", "--test_seed", "100"]
ENV = {k: v for k, v in SUBPROCESS_ENV.items() if k not in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "API_KEY")}


def _words(server, out, *extra) -> list:
    return [sys.executable, "run_experiment.py", *ARGS, "--base_url", server.base_url, "--output_dir", str(out), *extra]


def _run(server, out, *extra, env=None):
    return subprocess.run(_words(server, out, *extra), cwd=REPO, env={**ENV, "GEMINI_API_KEY": KEY} if env is None
                          else env, capture_output=True, text=True, timeout=300)


def _run_dir(out: Path) -> Path:
    (config,) = list(Path(out).rglob("config.json"))
    return config.parent


def _no_key_anywhere(out: Path, *texts: str) -> None:
    for text in texts:
        assert KEY not in text
    for path in Path(out).rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(encoding="utf-8", errors="replace"), path


def test_a_killed_run_resumes_to_the_records_of_an_uninterrupted_one(tmp_path):
    with GeminiServer(delay=0.3) as server:
        whole = _run(server, tmp_path / "whole")
        assert whole.returncode == 0, whole.stderr
        assert server.faults == []
        first = subprocess.Popen(_words(server, tmp_path / "killed"), cwd=REPO, env={**ENV, "GEMINI_API_KEY": KEY},
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and first.poll() is None:
            train = list((tmp_path / "killed").rglob("train.jsonl"))
            if train and len(train[0].read_text().splitlines()) >= 2:
                break
            time.sleep(0.1)
        assert first.poll() is None, "the run ended before it could be killed"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        killed = (_run_dir(tmp_path / "killed") / "train.jsonl").read_text().splitlines()
        assert len(killed) < len((_run_dir(tmp_path / "whole") / "train.jsonl").read_text().splitlines())
        resumed = _run(server, tmp_path / "killed", env={**ENV, "API_KEY": KEY})  # the published variable
        assert resumed.returncode == 0, resumed.stderr
    assert run_records(_run_dir(tmp_path / "killed")) == run_records(_run_dir(tmp_path / "whole"))
    _no_key_anywhere(tmp_path, whole.stdout, whole.stderr, resumed.stdout, resumed.stderr)


@pytest.mark.parametrize("mode, extra, env, line", [
    ("ok", [], ENV, "error: no Gemini API key: set GEMINI_API_KEY, GOOGLE_API_KEY or API_KEY, or pass --api_key"),
    ("ok", ["--model_name", "gemini-0"], None, "does not know the model 'gemini-0' (HTTP 404)"),
    ("blocked", [], None, "the prompt was blocked (PROHIBITED_CONTENT)"),
    ("ok", ["--reasoning", "32"], None, "the gemini backend sends the published protocol (one enum answer per "
                                        "request): drop --reasoning"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, mode, extra, env, line):
    with GeminiServer(mode=mode) as server:
        done = _run(server, tmp_path, *extra, env=env)
    assert done.returncode == 2, done.stderr
    errors = [text for text in done.stderr.splitlines() if text.startswith("error:")]
    assert len(errors) == 1 and line in errors[0] and "Traceback" not in done.stderr
    _no_key_anywhere(tmp_path, done.stdout, done.stderr)


def test_a_wrong_key_is_refused_without_showing_it(tmp_path):
    wrong = "wrong-gemini-key-9876543210"
    with GeminiServer() as server:
        done = _run(server, tmp_path, "--api_key", wrong, env=ENV)
    assert done.returncode == 2 and "refused the API key" in done.stderr
    assert wrong not in done.stdout + done.stderr
    for path in Path(tmp_path).rglob("*"):
        assert not path.is_file() or wrong not in path.read_text(encoding="utf-8", errors="replace")


def test_the_context_size_comes_from_the_models_window_and_the_api_counter(tmp_path):
    """No --max_context_examples: the published search over the model's input token limit with
    the API's countTokens, as the window tool finds it."""
    from icrl.backends import load_backend
    from icrl.run.window import find_max_examples
    from icrl.tasks import load_task

    with GeminiServer(window=600) as server:
        argv = _words(server, tmp_path)
        cut = argv.index("--max_context_examples")
        del argv[cut:cut + 2]
        done = subprocess.run(argv, cwd=REPO, env={**ENV, "GOOGLE_API_KEY": KEY}, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        backend = load_backend(MODEL, "gemini", base_url=server.base_url, api_key=KEY)
        try:
            expected = find_max_examples(backend.chat, load_task(TOY_TASK), backend.max_model_len)
        finally:
            backend.close()
    config = __import__("json").loads((_run_dir(tmp_path) / "config.json").read_text())
    assert config["resolved"]["max_context_examples"] == expected and expected > 1
    assert config["backend"]["max_model_len"] == 600


def test_test_steps_share_a_context_cache_and_get_the_records_of_whole_requests(tmp_path):
    """Above the cache minimum (1,024 tokens: the stand-in counts 40 a word here) each test step's
    shared context goes into one cache, deleted after the step; the records equal those of a
    run whose caches the API refuses (whole requests)."""
    with GeminiServer(per_word=40) as server:
        cached = _run(server, tmp_path / "cached")
        assert cached.returncode == 0, cached.stderr
        assert server.faults == [] and server.created and server.caches == {}  # step 0 has no context
        assert any("cachedContent" in body for body in server.requests)
    with GeminiServer(per_word=40, cache_floor=10 ** 9) as server:
        whole = _run(server, tmp_path / "whole")
        assert whole.returncode == 0, whole.stderr
        assert server.created == [] and not any("cachedContent" in body for body in server.requests)
    cached_records, whole_records = run_records(_run_dir(tmp_path / "cached")), run_records(_run_dir(tmp_path / "whole"))
    assert cached_records["results"]["usage"]["cached_prompt_tokens"] > 0  # the usage says what the cache served
    assert whole_records["results"]["usage"]["cached_prompt_tokens"] == 0
    assert unmetered(cached_records) == unmetered(whole_records)  # and nothing else differs


def unmetered(records: dict) -> dict:
    """Records less the API's usage (what differs between a run with caches and one without)."""
    lines = {name: [{k: v for k, v in line.items() if k != "usage"} for line in records[name]]
             for name in ("train.jsonl", "test.jsonl")}
    return {**lines, "results": {k: v for k, v in records["results"].items() if k != "usage"}}
