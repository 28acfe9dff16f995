"""A dead or stuck server is noticed in seconds: under the default flags (--timeout 600), a run whose
server answers nothing, or answers its model list and never a completion, is given up on within
--first_answer_timeout (60 s by default) of its first request, in one line that says no step ran;
no 'waiting ... for a completion' is printed before a completion is asked; nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from helpers import REPO, TOY_TASK

from icrl.backends.server_watch import FIRST_ANSWER_S
from icrl.standin import STANDINS, start_standin
from icrl.standin import anthropic_server, gemini_server

pytest.importorskip("anthropic")
pytest.importorskip("google.genai")
MODELS = {"openai": "gpt-4o-mini", "anthropic": anthropic_server.MODEL, "gemini": gemini_server.MODEL}
RUN = ["--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl", "--max_context_examples", "2",
       "--train_k", "2", "--test_k", "2", "--test_every", "2", "--seed", "1", "--training_seed", "1", "--test_seed", "1",
       "--no-progress"]
CASES = {  # (api, how the stand-in misbehaves): what the run asked for first and was not answered
    ("openai", "silent"): "its model list",
    ("gemini", "silent"): "the model's details",
    ("openai", "stuck"): "a completion",
    ("anthropic", "stuck"): "a completion",
    ("gemini", "stuck"): "a completion",
}


def _first_request(server) -> float:
    """When the stand-in first got what it never answers (0.0: not yet)."""
    if hasattr(server, "accepted"):
        return server.accepted[0] if server.accepted else 0.0
    asked = [r for r in getattr(server, "messages", None) or server.requests if r]
    return time.monotonic() if asked else 0.0


def _read(stream, into: list, said: dict, case) -> None:
    """The lines of a run's stderr as they come; when its error line came (``said``)."""
    for line in stream:
        into.append(line)
        if line.startswith("error: "):
            said[case] = time.monotonic()


def test_a_server_that_never_answers_is_given_up_on_within_the_first_answer_bound_under_the_default_flags(tmp_path):
    """--backend openai, anthropic and gemini against stand-ins that answer nothing or answer their
    model list and no completion, all at once (a run each, in processes of their own)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_"))}
    servers, procs, asked, lines, said = {}, {}, {}, {}, {}
    try:
        for case in CASES:
            api, how = case
            servers[case] = start_standin(api, [MODELS[api]], silent=how == "silent", stuck=how == "stuck").__enter__()
            command = [sys.executable, "run_experiment.py", "--backend", api, "--model_name", MODELS[api], *RUN,
                       "--base_url", servers[case].base_url, "--output_dir", str(tmp_path / f"{api}-{how}")]
            procs[case] = subprocess.Popen(command, cwd=REPO, env={**env, "HF_HUB_OFFLINE": "1",
                                                                  STANDINS[api].key_variable: STANDINS[api].key},
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            lines[case] = []
            threading.Thread(target=_read, args=(procs[case].stderr, lines[case], said, case), daemon=True).start()
        deadline = time.monotonic() + FIRST_ANSWER_S + 240
        while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
            for case in procs:
                asked[case] = asked.get(case) or _first_request(servers[case])
            time.sleep(0.1)
        for proc in procs.values():
            proc.wait(timeout=30)
        time.sleep(0.5)  # the readers' last lines
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
        for server in servers.values():
            server.__exit__(None, None, None)
    for case, what in CASES.items():
        api, how = case
        err = "".join(lines[case])
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        url = servers[case].base_url + ("/v1beta" if api == "gemini" else "")
        assert procs[case].returncode == 2 and len(errors) == 1, (case, err[-2000:])
        assert errors[0].startswith(f"error: the server at {url} did not answer the run's first request for {what} "
                                    f"in 60 s") and "; no step ran: " in errors[0], (case, errors)
        assert "finished steps are saved" not in err and "Traceback" not in err
        if what != "a completion":  # no completion was asked: none is said to be awaited
            assert "for a completion" not in err, (case, err)
        waited = said[case] - asked[case]  # from the first request it never answered to the run's line
        assert asked[case] and FIRST_ANSWER_S - 5 <= waited <= FIRST_ANSWER_S + 15, (case, waited)
        assert not list((tmp_path / f"{api}-{how}").rglob("*.jsonl")), case
