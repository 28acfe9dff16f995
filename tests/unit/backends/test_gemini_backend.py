"""The gemini backend through the real google-genai SDK against the protocol stand-in
(icrl/standin/gemini_server.py, 127.0.0.1): the request on the wire, retries, the window, token counts,
usage, and one line for each thing that cannot go on."""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import time

import pytest

from icrl.standin.gemini_server import HARMS, KEY, MODEL, GeminiServer

from icrl.backends import gemini_backend as gb
from icrl.backends import load_backend
from icrl.backends.usage import ReportsUsage, Usage
from icrl.errors import UsageError
from icrl.method.episode import Episode
from icrl.method.prompts import build_messages

pytest.importorskip("google.genai")
TASK = SimpleNamespace(prediction_prefix="Intent:", description="Classify.")
LABELS = ["billing", "refund", "delivery"]
CONTEXT = [Episode("Message: q1", "billing", 1, "billing", 1), Episode("Message: q2", "refund", 0, "delivery", 0)]


@pytest.fixture(autouse=True)
def no_key_in_env(monkeypatch):
    for name in gb.KEY_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def _load(server, **options):
    return load_backend(MODEL, "gemini", base_url=server.base_url, api_key=options.pop("api_key", KEY), **options)


def _prompt(backend, query="Message: q3", context=CONTEXT):
    return backend.render(*build_messages(TASK, context, query, "icrl"))


def test_predict_sends_the_published_request_and_reports_usage():
    with GeminiServer(window=32768) as server:
        backend = _load(server)
        try:
            assert isinstance(backend, ReportsUsage) and backend.max_model_len == 32768
            prompts = [_prompt(backend), _prompt(backend, "Message: q4", CONTEXT[:1])]
            labels = backend.predict(prompts, LABELS, 0.5, 11)
            assert all(label in LABELS for label in labels) and len(labels) == 2
            assert backend.predict(prompts, LABELS, 0.5, 11) == labels  # the stand-in answers by request
            assert server.faults == []
            body = next(b for b in server.requests if b["contents"][-1]["parts"][0]["text"].endswith("q3"))
            assert body["contents"] == [
                {"role": "user", "parts": [{"text": "Message: q1"}]},
                {"role": "model", "parts": [{"text": "Intent: billing"}]},
                {"role": "user", "parts": [{"text": "'billing' is the correct answer! Good job!\n\nMessage: q2"}]},
                {"role": "model", "parts": [{"text": "Intent: refund"}]},
                {"role": "user", "parts": [{"text": "The answer 'refund' is wrong! You can do better!"
                                                    "\n\nMessage: q3"}]}]
            assert body["systemInstruction"]["parts"][0]["text"].endswith("\nClassify.")
            assert body["generationConfig"] == {
                "candidateCount": 1, "temperature": 0.5, "seed": 11, "responseMimeType": "text/x.enum",
                "responseSchema": {"type": "STRING", "enum": ["Intent: billing", "Intent: refund", "Intent: delivery"]}}
            assert body["safetySettings"] == [{"category": c, "threshold": "BLOCK_NONE"} for c in HARMS]
            usage = backend.usage()
            assert usage.requests == 4 and usage.output_tokens == 8 and usage.cached_prompt_tokens == 0
            assert usage.prompt_tokens == sum(_words(b) for b in server.requests)
            assert server.created == []  # a context below cache_min_tokens is not cached
            described = backend.describe()
            assert described["base_url"] == f"{server.base_url}/v1beta" and KEY not in str(described)
        finally:
            backend.close()


def _words(body) -> int:
    turns = body["contents"] + [body["systemInstruction"]]
    return sum(len(part["text"].split()) for turn in turns for part in turn["parts"])


def test_prompts_that_share_their_context_share_a_context_cache_deleted_after():
    queries = ["Message: q3", "Message: q4", "Message: q5"]
    with GeminiServer() as server:
        plain = _load(server, cache_min_tokens=0)
        try:
            expected = plain.predict([_prompt(plain, q) for q in queries], LABELS, 1.0, 5)
            sent = list(server.requests)
        finally:
            plain.close()
        backend = _load(server, cache_min_tokens=10)
        try:
            labels = backend.predict([_prompt(backend, q) for q in queries], LABELS, 1.0, 5)
            usage = backend.usage()
        finally:
            backend.close()
        cached = server.requests[len(sent):]
        assert server.faults == [] and labels == expected  # the same requests, the context sent once
        assert len(server.created) == 1 and server.caches == {}  # deleted when the call ended
        assert all(b["cachedContent"] == server.created[0] and len(b["contents"]) == 1 and
                   "systemInstruction" not in b for b in cached)
        in_order = lambda turns: sorted(json.dumps(t, sort_keys=True) for t in turns)  # requests run concurrently
        assert in_order(b["contents"][0] for b in cached) == in_order(b["contents"][-1] for b in sent)
        head = _words(sent[0]) - len(sent[0]["contents"][-1]["parts"][0]["text"].split())
        assert usage.cached_prompt_tokens == 3 * head and usage.requests == 4  # the cache's writing, then 3
        assert usage.prompt_tokens == head + sum(_words(b) for b in sent)


def test_a_cache_the_api_refuses_leaves_the_requests_whole():
    with GeminiServer(cache_floor=10 ** 6) as server:
        backend = _load(server, cache_min_tokens=10)
        try:
            backend.predict([_prompt(backend, "Message: q3"), _prompt(backend, "Message: q4")], LABELS, 0.0, 0)
            assert backend.cache_min_tokens > 10  # not offered again for a head as small
        finally:
            backend.close()
        assert server.created == [] and server.faults == []
        assert all("cachedContent" not in b and len(b["contents"]) == 5 for b in server.requests)


def test_tokens_are_counted_by_the_api_once_per_text():
    with GeminiServer() as server:
        backend = _load(server, max_model_len=4096)
        try:
            assert backend.max_model_len == 4096 and backend.chat is backend
            assert backend.count_tokens("one two three") == 3
            prompt = _prompt(backend)
            system = build_messages(TASK, CONTEXT, "Message: q3", "icrl")[0][0]["content"]
            words = len(system.split())  # the stand-in counts words
            assert backend.count_many([prompt, "one two three"]) == [backend.count_tokens(prompt), 3]
            assert backend.count_tokens(prompt) > words  # the instruction and the turns
            assert len(server.counted) == 2  # each text asked once
            assert server.counted[-1]["contents"][0]["role"] == "user"
        finally:
            backend.close()


@pytest.mark.waits
def test_a_429_is_retried_with_backoff():
    with GeminiServer(mode="429", failures=1) as server:
        backend = _load(server, max_retries=2)
        try:
            assert backend.predict([_prompt(backend)], LABELS, 0.0, 0)[0] in LABELS
            assert len(server.requests) == 2
        finally:
            backend.close()


@pytest.mark.parametrize("mode, options, line", [
    ("500", {"max_retries": 0}, "failed (HTTP 500 INTERNAL: cue 500) after 0 retries; rerun the same command"),
    # a request that hangs: the client's timeout (or the silent-server rule, whichever ends first)
    ("hang", {"max_retries": 0, "timeout": 1.0}, ("(ReadTimeout; ", "answered nothing for 1 s")),
    ("garbage", {}, "not a Gemini API response"),
    ("outside", {}, "answered 'Intent: not-a-label', which is not one of the 3 answers"),
    ("blocked", {}, "no answer for a prompt of 'gemini-1.5-flash-8b': the prompt was blocked (PROHIBITED_CONTENT)"),
    ("empty", {}, "the candidate is empty (finish reason SAFETY)"),
])
@pytest.mark.waits
def test_what_cannot_go_on_is_one_line(mode, options, line):
    with GeminiServer(mode=mode) as server:
        backend = _load(server, **options)
        try:
            with pytest.raises(UsageError) as caught:
                backend.predict([_prompt(backend)], LABELS, 0.0, 0)
        finally:
            backend.close()
    message = str(caught.value)
    assert any(one in message for one in ((line,) if isinstance(line, str) else line)), message
    assert "\n" not in message and KEY not in message


@pytest.mark.waits
def test_a_request_that_keeps_timing_out_is_given_up_on_after_two_timeouts_not_max_retries():
    """--max_retries 5 and a server that answers its model but never generateContent: the
    request is given up on 2 x --timeout after it was sent (the SDK's backoff of 1 s before its
    second try leaves that try less than a whole --timeout), in one line."""
    with GeminiServer(mode="hang") as server:
        backend = _load(server, max_retries=5, timeout=1.5)
        tic = time.monotonic()
        try:
            with pytest.raises(UsageError) as caught:
                backend.predict([_prompt(backend)], LABELS, 0.0, 0)
        finally:
            seconds = time.monotonic() - tic
            backend.close()
        sent = len(server.requests)
    message = str(caught.value)
    assert message.startswith(f"the server at {server.base_url}/v1beta gave no answer to a request in 3 s"), message
    assert sent <= 2 and 3 <= seconds < 3 + 3, (sent, seconds)  # not 6 tries of 1.5 s with backoff


def test_a_wrong_key_is_said_without_the_key():
    with GeminiServer() as server, pytest.raises(UsageError, match="refused the API key") as caught:
        _load(server, api_key="wrong-key-abcdef")
    assert "wrong-key-abcdef" not in str(caught.value)


def test_an_unknown_model_is_said_at_load():
    with GeminiServer() as server, pytest.raises(UsageError, match=r"does not know the model 'gemini-0' \(HTTP 404\)"):
        load_backend("gemini-0", "gemini", base_url=server.base_url, api_key=KEY)


def test_the_key_comes_from_the_environment_in_order(monkeypatch):
    with pytest.raises(UsageError, match="^no Gemini API key: set GEMINI_API_KEY, GOOGLE_API_KEY or API_KEY, or pass"):
        load_backend(MODEL, "gemini")
    monkeypatch.setenv("API_KEY", KEY)  # the published variable
    with GeminiServer() as server:
        _load(server, api_key=None).close()


def test_a_missing_sdk_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "google.genai", None)
    with pytest.raises(UsageError, match=r"pip install -e \.\[gemini\]"):
        load_backend(MODEL, "gemini", api_key=KEY)


def test_reasoning_is_refused():
    with GeminiServer() as server:
        backend = _load(server)
        try:
            with pytest.raises(UsageError, match="drop --reasoning"):
                backend.reasoning_frame([], "Intent:")
        finally:
            backend.close()


def test_a_base_url_may_name_its_api_version():
    assert gb.split_version("https://proxy.example/gemini/v1beta/") == ("https://proxy.example/gemini", "v1beta")
    assert gb.split_version("http://127.0.0.1:8000") == ("http://127.0.0.1:8000", "v1beta")
    assert gb.split_version("https://x.example/v1") == ("https://x.example", "v1")


def test_usage_adds_up_per_request():
    backend = object.__new__(gb.GeminiBackend)
    backend._usage = Usage()
    backend._count(SimpleNamespace(prompt_token_count=10, cached_content_token_count=None, candidates_token_count=2))
    backend._count(None)
    assert backend.usage() == Usage(10, 0, 2, 2)


def test_no_server_at_the_url_is_one_line():
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    line = r"no answer from the Gemini API at http://127\.0\.0\.1:\d+/v1beta \(ConnectError: .*; tried 0 more times\)"
    with pytest.raises(UsageError, match=line):
        load_backend(MODEL, "gemini", base_url=f"http://127.0.0.1:{port}", api_key=KEY, max_retries=0)


@pytest.mark.waits
def test_no_network_is_one_line_in_seconds_saying_no_step_ran_and_no_wait_for_a_completion(tmp_path, capsys):
    """An API that cannot be reached (a host that does not resolve, as with no network): the model
    lookup is tried once more, not --max_retries times with backoff (38 s), and the line says that
    no step ran; no 'waiting for a completion' while only the model was looked up."""
    from helpers import TOY_TASK

    from icrl.cli.run import main

    tic = time.monotonic()
    code = main(["--backend", "gemini", "--model_name", MODEL, "--api_key", KEY, "--base_url",
                 "http://icrl-no-such-host.invalid", "--task_name", TOY_TASK, "--context_strategy_name",
                 "random_unbiased", "--icrl", "--max_context_examples", "2", "--train_k", "2", "--test_k", "2",
                 "--test_every", "2", "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--output_dir",
                 str(tmp_path / "out"), "--no-progress"])
    seconds = time.monotonic() - tic
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith("error: no answer from the Gemini API at http://icrl-no-such-host.invalid/v1beta "
                             "(ConnectError") and "tried 1 more time); no step ran: check --base_url and the network" \
        in err[0], err
    assert seconds < 15, seconds
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.jsonl"))
