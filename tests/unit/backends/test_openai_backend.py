"""The OpenAI-compatible backend against a fake server (a real HTTP server on 127.0.0.1, no network):
retries, errors, concurrency and secrets."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers import TOY_TASK

from icrl.backends import Call
from icrl.backends import openai_backend as ob
from icrl.backends.usage import ReportsCallUsage, ReportsUsage, Usage
from icrl.errors import UsageError

openai = pytest.importorskip("openai")
LABELS = ["card_lost", "card_arrival", "refund"]


class FakeServer:
    """An OpenAI-compatible server on 127.0.0.1 (stdlib http.server in a thread, an ephemeral
    port): GET /v1/models, POST /v1/completions and /v1/chat/completions. The backend reaches
    it through --base_url like any server, so the test depends on no client internals.

    `failures`: status codes answered (in order) before real answers; `answer(body)`: the text.
    Every answer reports 3 prompt tokens, ``cached`` of them served by its prompt cache, and 2
    completion tokens.
    ``handle(method, path, body)`` returns (status, JSON body, headers); subclasses override it."""

    def __init__(self, models=("smollm2-135m",), failures=(), answer=None, delay=0.0, constrain=True, cached=1):
        self.models, self.failures, self.delay, self.constrain = list(models), list(failures), delay, constrain
        self.cached = cached
        self.answer = answer
        self.requests: list[tuple[str, dict]] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        self._httpd = None

    @property
    def url(self) -> str:
        """Start serving (once) and return the base URL, http://127.0.0.1:PORT/v1."""
        if self._httpd is None:
            self._httpd = _serve(self)
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def handle(self, method: str, path: str, body: dict):
        with self.lock:
            self.requests.append((path, body))
        if method == "GET" and path.endswith("/models"):
            return 200, {"object": "list", "data": [
                {"id": m, "object": "model", "created": 0, "owned_by": "x"} for m in self.models]}, {}
        with self.lock:
            status = self.failures.pop(0) if self.failures else None
        if status is not None:
            return status, {"error": {"message": f"fake {status}"}}, {"retry-after-ms": "1"}
        with self.lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay)
        finally:
            with self.lock:
                self.in_flight -= 1
        usage = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5,
                 "prompt_tokens_details": {"cached_tokens": self.cached}}
        if path.endswith("/chat/completions"):
            enum = body["response_format"]["json_schema"]["schema"]["properties"]["label"]["enum"]
            content = json.dumps({"label": self.answer(body) if self.answer else enum[body["seed"] % len(enum)]})
            return 200, {
                "id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "usage": usage,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}]}, {}
        if not path.endswith("/completions"):
            return 404, {"error": {"message": f"no route {path}"}}, {}
        options = (body.get("structured_outputs") or {}).get("choice") or body.get("guided_choice")
        if options and self.constrain:
            text = self.answer(body) if self.answer else options[body.get("seed", 0) % len(options)]
        else:
            text = " I think it is"
        return 200, {
            "id": "c", "object": "text_completion", "created": 0, "model": body["model"], "usage": usage,
            "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}]}, {}


_SERVERS: list[FakeServer] = []


def _serve(fake: FakeServer) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else {}
            status, payload, headers = fake.handle(method, self.path.split("?")[0], body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server's names)
            self._answer("GET")

        def do_POST(self):  # noqa: N802
            self._answer("POST")

        def log_message(self, *args):  # quiet
            pass

    class Quiet(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            """A client that went away (a request cancelled by a stop) is no error of the server;
            said on stderr it would land in whichever test runs next in this process."""
            if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                super().handle_error(request, client_address)

    httpd = Quiet(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    _SERVERS.append(fake)
    return httpd


@pytest.fixture(autouse=True)
def _stop_servers():
    yield
    while _SERVERS:
        _SERVERS.pop().stop()


def make_backend(monkeypatch, server: FakeServer, model="smollm2-135m", **options):
    """An OpenAIBackend pointed at `server` by --base_url (the tokenizer of smollm2 when present)."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return ob.OpenAIBackend(model, base_url=server.url, **options)


def messages_for(i):
    return [{"role": "system", "content": "You classify.\nIntents: card_lost, card_arrival, refund"},
            {"role": "user", "content": f"Query: question number {i}"}]


def test_completions_mode_sends_rendered_prompts_concurrently(monkeypatch):
    server = FakeServer(delay=0.2, answer=lambda body: " card_arrival")
    backend = make_backend(monkeypatch, server, api_mode="completions", max_concurrency=4)
    assert backend.api_mode == "completions" and backend.chat is not None
    prompts = [backend.render(messages_for(i), "Intent:") for i in range(12)]
    assert backend.predict(prompts, LABELS, 0.0, 9) == ["card_arrival"] * 12
    assert server.max_in_flight == 4  # concurrent (each request waits 0.2 s at the server), and bounded
    calls = [b for p, b in server.requests if p.endswith("/completions")]
    sent = {b["prompt"] for b in calls if "structured_outputs" in b}
    assert sent == set(prompts) and all(b["seed"] == 9 for b in calls if "structured_outputs" in b)
    assert backend.stats["requests"] == len(calls) and backend.stats["prompt_tokens"] == 3 * len(calls)
    assert backend.stats["token_mismatches"] > 0  # the fake counts 3 tokens: flagged
    assert backend.usage() == Usage(3 * len(calls), len(calls), 2 * len(calls), len(calls))  # probe included
    described = backend.describe()
    assert described["api_mode"] == "completions" and described["constraint"] == "structured_outputs"
    backend.close()


@pytest.mark.waits
def test_auto_mode_falls_back_to_guided_choice_then_chat(monkeypatch):
    class OldServer(FakeServer):
        """A server that ignores structured_outputs (older vLLM): it answers free text."""

        def handle(self, method, path, body):
            if path.endswith("/completions") and not path.endswith("/chat/completions") \
                    and "structured_outputs" in body:
                with self.lock:
                    self.requests.append((path, body))
                return 200, {"id": "c", "object": "text_completion", "created": 0, "model": "m",
                             "choices": [{"index": 0, "text": " maybe", "finish_reason": "stop"}]}, {}
            return super().handle(method, path, body)

    backend = make_backend(monkeypatch, OldServer())
    assert backend.api_mode == "completions" and backend.constraint == "guided_choice"
    backend.close()
    backend = make_backend(monkeypatch, FakeServer(constrain=False))
    assert backend.api_mode == "chat"
    backend.close()


def test_chat_mode_for_a_hosted_model_without_a_local_tokenizer(monkeypatch):
    server = FakeServer(models=("gpt-4o-mini", "other"))
    backend = make_backend(monkeypatch, server, model="gpt-4o-mini", api_key="sk-SECRET")
    assert backend.api_mode == "chat" and backend.chat is None and backend.supports_system_role
    rendered = [backend.render(messages_for(i), "Intent:") for i in range(3)]
    out = backend.predict(rendered, LABELS, 1.0, 4)
    assert out == [LABELS[4 % 3]] * 3
    bodies = [b for p, b in server.requests if p.endswith("/chat/completions")]
    assert [b["messages"] for b in bodies] and all(b["messages"] in [messages_for(i) for i in range(3)] for b in bodies)
    assert "SECRET" not in json.dumps(backend.describe())
    with pytest.raises(UsageError, match="--max_context_examples"):
        backend.max_model_len
    backend.close()
    with pytest.raises(UsageError, match="tokenizer"):
        make_backend(monkeypatch, server, model="gpt-4o-mini", api_mode="completions")


def test_retries_on_429_and_5xx_then_succeeds(monkeypatch):
    server = FakeServer(failures=[429, 503, 500], answer=lambda body: " refund")
    backend = make_backend(monkeypatch, server, api_mode="completions", max_retries=3)
    backend.warm_shared_prefix = False
    prompt = backend.render(messages_for(0), "Intent:")
    assert backend.predict([prompt], LABELS, 0.0, 0) == ["refund"]
    assert len([p for p, _ in server.requests if p.endswith("/completions")]) == 4
    backend.close()


def test_persistent_failure_is_one_line_naming_the_url(monkeypatch):
    server = FakeServer(failures=[503] * 10)
    backend = make_backend(monkeypatch, server, api_mode="completions", max_retries=1)
    prompts = [backend.render(messages_for(i), "Intent:") for i in range(3)]
    with pytest.raises(UsageError) as info:
        backend.predict(prompts, LABELS, 0.0, 0)
    message = str(info.value)
    assert server.url in message and "503" in message and "rerun" in message and "\n" not in message
    backend.close()


def test_answers_outside_the_labels_are_an_error(monkeypatch):
    backend = make_backend(monkeypatch, FakeServer(answer=lambda body: " nonsense"), api_mode="completions")
    with pytest.raises(UsageError, match="not one of the 3 labels"):
        backend.predict([backend.render(messages_for(0), "Intent:")], LABELS, 0.0, 0)
    backend.close()


def test_unknown_model_and_absent_server(monkeypatch):
    with pytest.raises(UsageError, match="does not serve 'smollm2-135m'.*--api_model"):
        make_backend(monkeypatch, FakeServer(models=("Qwen/Qwen2.5-7B",)))
    monkeypatch.undo()
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    with pytest.raises(UsageError) as info:
        ob.OpenAIBackend("smollm2-135m", base_url=url, max_retries=0, timeout=5)
    assert url in str(info.value) and "\n" not in str(info.value)


def test_run_experiment_exits_2_when_no_server_and_keeps_the_key_secret(tmp_path, capsys, monkeypatch):
    import socket

    from icrl.cli.run import main

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    code = main(["--backend", "openai", "--base_url", url, "--api_key", "sk-SECRET", "--max_retries", "0",
                 "--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl",
                 "--max_context_examples", "2", "--train_k", "2", "--test_k", "2", "--seed", "1",
                 "--training_seed", "1", "--test_seed", "1",
                 "--output_dir", str(tmp_path), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: no server answers at " + url)
    assert not any(tmp_path.rglob("config.json"))


def test_config_and_identity_never_hold_the_key():
    from icrl.cli import parse_args

    args = parse_args(["--backend", "openai", "--api_key", "sk-SECRET", "--task_name", "trec_coarse",
                       "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
                       "--training_seed", "1", "--test_seed", "1", "--train_k", "2", "--test_k", "2"])
    assert args.secrets.api_key == "sk-SECRET" and "SECRET" not in json.dumps(args.spec.as_record())
    assert args.options.max_concurrency == 32 and args.spec.api_mode == "auto"
    with pytest.raises(UsageError):
        parse_args(["--backend", "openai", "--max_concurrency", "0", "--task_name", "trec_coarse",
                    "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
                    "--training_seed", "1", "--test_seed", "1", "--train_k", "2", "--test_k", "2"])


def test_the_lock_file_hides_the_key(monkeypatch):
    from icrl.infra import lock

    monkeypatch.setattr(lock.sys, "argv", ["run_experiment.py", "--api_key", "sk-SECRET", "--api_key=sk-SECRET2"])
    assert lock._command() == "run_experiment.py --api_key *** --api_key=***"


def test_openai_backend_sends_every_call_at_once(monkeypatch):
    """predict_calls on the openai backend (a fake server): every call's requests in flight
    together, at most --max_concurrency overall, each with its call's labels and seed."""
    pytest.importorskip("openai")
    from icrl.backends import Call

    server = FakeServer(delay=0.05)
    backend = make_backend(monkeypatch, server, api_mode="completions", max_concurrency=6)
    prompts = [backend.render(messages_for(i), "Intent:") for i in range(8)]
    calls = [Call(prompts[:4], ["card_lost", "refund"], 1.0, 3, key=0), Call(prompts[4:], ["a", "b", "c"], 0.0, 4, key=1),
             Call([], ["a"], 0.0, 5, key=2)]
    out = backend.predict_calls(calls)
    assert out == [["refund"] * 4, ["b"] * 4, []]  # the fake answers choice[seed % number of choices]
    assert server.max_in_flight == 6, "both calls' requests in flight together, bounded"
    backend.close()


# -- which line a misbehaving server gets (run_experiment.py, a model with a local tokenizer) -----------
@pytest.fixture(autouse=True)
def _console_handlers():
    """run_experiment.py's main adds a console handler per call: each test keeps its own."""
    import logging

    logger = logging.getLogger("icrl")
    before = list(logger.handlers)
    yield
    for handler in [h for h in logger.handlers if h not in before]:
        logger.removeHandler(handler)


def _run_against(server_url, tmp_path, *extra):
    from icrl.cli.run import main

    return main(["--backend", "openai", "--model_name", "smollm2-135m", "--base_url", server_url,
                 "--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl",
                 "--max_context_examples", "2", "--train_k", "2", "--test_k", "2", "--seed", "1", "--training_seed",
                 "1", "--test_seed", "1", "--output_dir", str(tmp_path / "out"), "--no-progress", "--max_retries", "0",
                 *extra])


class NotFoundServer(FakeServer):
    """Answers 404 to everything (a wrong --base_url path)."""

    def handle(self, method, path, body):
        with self.lock:
            self.requests.append((path, body))
        return 404, {"error": {"message": f"no route {path}"}}, {}


class ChatOnlyServer(FakeServer):
    """Serves chat completions only (many hosted APIs)."""

    def handle(self, method, path, body):
        if path.endswith("/completions") and not path.endswith("/chat/completions"):
            return 404, {"error": {"message": "no completions"}}, {}
        return super().handle(method, path, body)


def test_a_server_answering_404_gets_the_404_line_and_no_word_about_modes(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = NotFoundServer()
    assert _run_against(server.url, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "HTTP 404" in err and "--base_url" in err, err
    assert "chat completions:" not in err and not (tmp_path / "out").exists()


def test_a_server_answering_non_labels_everywhere_is_one_line_and_no_word_about_modes(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = FakeServer(answer=lambda body: " nonsense")
    assert _run_against(server.url, tmp_path) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "nonsense" in err, err


def test_a_chat_only_server_is_used_in_chat_mode_and_the_warning_says_why(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    backend = make_backend(monkeypatch, ChatOnlyServer())
    if backend.chat is None:
        pytest.skip("no local tokenizer for smollm2-135m: auto mode needs none to decide")
    assert backend.api_mode == "chat"
    backend.close()
    assert _run_against(ChatOnlyServer().url, tmp_path) == 0
    err = capsys.readouterr().err
    assert "has no completions endpoint for 'smollm2-135m': using chat completions" in err, err


# -- a server that never answers -------------------------------------------------------------------
@pytest.mark.waits
def test_a_silent_server_is_given_up_on_and_a_busy_one_is_not():
    """SilenceWatch: no answer and no model list for dead_s: cancelled (dead); a model list that
    answers keeps a slow request waiting."""
    from icrl.backends.server_watch import SilenceWatch

    for alive in (False, True):
        cancelled = threading.Event()
        watch = SilenceWatch("http://127.0.0.1:9/v1", timeout=600, retries=5, notice_s=0.1, dead_s=0.5,
                             probe=lambda: alive)
        with watch.watching(cancelled.set):
            cancelled.wait(1.5)  # three times the bound
        assert cancelled.is_set() is (not alive) and watch.dead is (not alive), alive
        assert watch.dead_s == 0.5
    assert SilenceWatch("u", timeout=20, retries=5).dead_s == 20  # --timeout, when shorter, bounds it
    assert SilenceWatch("u", timeout=600, retries=5).dead_s == 120


@pytest.mark.waits
def test_a_silent_server_fails_in_one_line_at_its_bound_not_the_timeout_times_the_tries(tmp_path, capsys, monkeypatch):
    from icrl.standin.openai_server import SilentServer

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with SilentServer() as server:
        tic = time.monotonic()
        code = _run_against(server.base_url, tmp_path, "--timeout", "2", "--max_retries", "5")
        seconds = time.monotonic() - tic
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("waiting ")]
    assert code == 2 and len(err) == 1 and err[0].startswith("error: the server at " + server.base_url), err
    assert "answered nothing for 2 s" in err[0]
    assert seconds < 2 + 10, seconds  # not 6 tries of 2 s with backoff


class PlainChatServer(FakeServer):
    """Answers chat requests with the label as plain text, not the JSON object the schema asks."""

    def handle(self, method, path, body):
        status, payload, headers = super().handle(method, path, body)
        if path.endswith("/chat/completions") and status == 200:
            message = payload["choices"][0]["message"]
            message["content"] = json.loads(message["content"])["label"]
        return status, payload, headers


def test_a_chat_answer_that_is_a_label_as_plain_text_is_that_label(monkeypatch):
    backend = make_backend(monkeypatch, PlainChatServer(), api_mode="chat")
    prompts = [backend.render(messages_for(i), "Intent:") for i in range(3)]
    assert backend.predict(prompts, LABELS, 0.0, 0) == [LABELS[0]] * 3  # the fake answers label seed mod 3
    assert backend.predict(prompts, LABELS, 0.0, 2) == [LABELS[2]] * 3
    backend.close()


class StuckServer(FakeServer):
    """Answers its model list at once and never a completion (in time: each waits ``delay``)."""

    def __init__(self, delay=30.0):
        super().__init__(delay=delay)
        self.asked: list = []  # time.monotonic() of each completion request

    def handle(self, method, path, body):
        if path.endswith("completions"):
            self.asked.append(time.monotonic())
        return super().handle(method, path, body)


@pytest.mark.waits
def test_a_server_that_answers_its_model_list_but_no_completion_is_given_up_on_after_two_timeouts(
        tmp_path, capsys, monkeypatch):
    """A request that timed out is tried once more, not --max_retries more times; the line says
    the server is up (it answers its model list), not that it is hung."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = StuckServer()
    code = _run_against(server.url, tmp_path, "--api_mode", "chat", "--timeout", "2", "--max_retries", "5")
    seconds = time.monotonic() - server.asked[0]  # from the first completion request to the line
    lines = capsys.readouterr().err.strip().splitlines()
    err = [line for line in lines if not line.startswith("waiting ")]
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: the server at {server.url} gave no answer to "
                                                             f"a request in 4 s"), lines
    assert "it answers its model list" in err[0] and "not even its model list" not in err[0]
    assert len([p for p, _ in server.requests if p.endswith("/chat/completions")]) == 2  # the request, once more
    assert seconds < 4 + 3, seconds  # not 6 tries of 2 s with backoff
    waiting = [line for line in lines if line.startswith("waiting ")]
    assert waiting and f"for a completion from {server.url}; it answers its model list" in waiting[0], lines
    assert not (tmp_path / "out").exists()


@pytest.mark.waits
def test_the_waiting_line_says_whether_the_model_list_answers(capsys):
    from icrl.backends.server_watch import SilenceWatch

    for alive, said in ((True, "it answers its model list"), (False, "it does not answer its model list either")):
        for heard, bound in ((False, "it has answered no request yet: given up on after 60 s (--first_answer_timeout)"),
                             (True, "given up on after 1200 s")):
            watch = SilenceWatch("http://127.0.0.1:9/v1", timeout=600, retries=5, notice_s=0.2, probe=lambda: alive)
            watch.heard = heard
            with watch.watching(lambda: None, "token counts"):
                time.sleep(0.4)
            err = capsys.readouterr().err
            assert re.match(r"waiting [01] s for token counts from http://127\.0\.0\.1:9/v1; " + said, err), err
            assert bound in err


def test_a_stop_while_requests_are_in_flight_cancels_them(monkeypatch, caplog):
    """Ctrl-C during a call: the stop goes on up, and the requests in flight are cancelled, not
    left pending for asyncio to report ('Task was destroyed but it is pending!') at the exit."""
    import asyncio

    server = FakeServer(delay=2.0)
    backend = make_backend(monkeypatch, server, api_mode="chat")

    def stop():
        raise KeyboardInterrupt

    backend._loop.call_later(0.3, stop)
    with caplog.at_level("ERROR", logger="asyncio"):
        with pytest.raises(KeyboardInterrupt):
            backend.predict([backend.render(messages_for(0), "Intent:")], LABELS, 0.0, 1)
        assert not [task for task in asyncio.all_tasks(backend._loop) if not task.done()]
    assert not caplog.records, caplog.text


def test_usage_is_what_the_server_reported_and_told_apart_by_caller(monkeypatch):
    server = FakeServer(models=("gpt-4o-mini",), cached=2)
    backend = make_backend(monkeypatch, server, model="gpt-4o-mini")
    assert isinstance(backend, ReportsUsage) and isinstance(backend, ReportsCallUsage)
    before = backend.usage()
    rendered = [backend.render(messages_for(i), "Intent:") for i in range(3)]
    backend.predict_calls([Call(rendered, LABELS, 0.0, 1, key="a"), Call(rendered[:1], LABELS, 0.0, 1, key="b")])
    assert backend.usage() - before == Usage(prompt_tokens=12, cached_prompt_tokens=8, output_tokens=8, requests=4)
    assert backend.usage_of("a") == Usage(9, 6, 6, 3) and backend.usage_of("b") == Usage(3, 2, 2, 1)
    backend.close()


def test_a_run_on_the_server_records_what_it_reported_per_step(tmp_path, monkeypatch):
    from icrl.cli.run import main

    server = FakeServer(models=("gpt-4o-mini",), cached=2)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert main(["--backend", "openai", "--model_name", "gpt-4o-mini", "--base_url", server.url, "--task_name",
                 TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl", "--max_context_examples", "2",
                 "--train_k", "4", "--test_every", "2", "--test_k", "3", "--output_dir", str(tmp_path),
                 "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--no-progress"]) == 0
    run = next(p.parent for p in tmp_path.rglob("config.json"))
    train = [json.loads(x) for x in (run / "train.jsonl").read_text().splitlines()]
    test = [json.loads(x) for x in (run / "test.jsonl").read_text().splitlines()]
    assert [r["usage"] for r in train] == [{"prompt_tokens": 3, "cached_prompt_tokens": 2, "output_tokens": 2,
                                            "requests": 1}] * 4
    assert [r["usage"]["requests"] for r in test] == [3] * len(test)  # one request per test input
    results = json.loads((run / "results.json").read_text())
    requests = 4 + 3 * len(test)
    assert results["usage"] == {"prompt_tokens": 3 * requests, "cached_prompt_tokens": 2 * requests,
                                "output_tokens": 2 * requests, "requests": requests}
