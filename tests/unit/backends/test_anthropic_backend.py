"""The anthropic backend on the real SDK against the Messages API stand-in (icrl/standin/anthropic_server.py,
127.0.0.1, no network): the requests' shape, the usage with cached tokens, retries, and one line
for each way the API or the user can go wrong, the key never shown."""

from __future__ import annotations

import json
import sys
import time

import pytest

from icrl.standin.anthropic_server import KEY, MODEL, FakeAnthropicServer
from helpers import TOY_TASK

from icrl.backends import load_backend
from icrl.backends import anthropic_backend as ab
from icrl.backends import anthropic_requests
from icrl.backends.usage import ReportsUsage, Usage
from icrl.errors import UsageError

pytest.importorskip("anthropic")
LABELS = ["billing", "refund", "delivery", "account"]
CONTEXT = [{"role": "system", "content": "You are an useful assistant."}, {"role": "user", "content": "Message: a"},
           {"role": "assistant", "content": "Intent: refund"}]


@pytest.fixture(autouse=True)
def _no_key_in_the_environment(monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def backend(server, **options):
    return load_backend(MODEL, "anthropic", base_url=server.base_url, **{"api_key": KEY, **options})


def step_prompts(b, n=3):
    """A test step: ``n`` queries after one shared context."""
    return [b.render([*CONTEXT, {"role": "user", "content": f"Good.\n\nMessage: q{i}"}], "Intent:") for i in range(n)]


@pytest.mark.parametrize("mode", ["chat", "completions"])
def test_every_answer_is_a_label_and_every_request_has_the_protocol_shape(mode):
    with FakeAnthropicServer(LABELS) as server:
        b = backend(server, api_mode=mode)
        prompts = step_prompts(b)
        first = b.predict(prompts, LABELS, 0.0, 1)
        assert set(first) <= set(LABELS) and b.predict(prompts, LABELS, 1.0, 2) == first  # the stand-in: per query
        b.close()
    assert not server.problems
    for body in server.messages:
        assert body["model"] == MODEL and body["system"] == "You are an useful assistant."
        assert [t["role"] for t in body["messages"]][:3] == ["user", "assistant", "user"]
        assert body["messages"][1]["content"][0]["cache_control"] == {"type": "ephemeral"}
        if mode == "chat":
            assert body["tool_choice"]["type"] == "tool" and body["messages"][-1]["role"] == "user"
        else:
            assert body["messages"][-1] == {"role": "assistant", "content": "Intent:"} and "tools" not in body


def test_usage_sums_what_the_api_reported_and_the_test_step_reads_its_context_from_the_cache():
    with FakeAnthropicServer(LABELS) as server:
        b = backend(server)
        assert isinstance(b, ReportsUsage) and b.usage() == Usage()
        b.predict(step_prompts(b, 4), LABELS, 0.0, 1)
        used = b.usage()
        b.close()
    assert used.requests == 4 and used.output_tokens == 12
    assert 0 < used.cached_prompt_tokens < used.prompt_tokens  # the first writes the context, three read it
    assert server.cached  # the stand-in saw the breakpoint's prefix


def test_the_stand_in_refuses_what_the_api_would_refuse():
    """Its checks can fail: a seed, a prefill beside a tool, two breakpoints are 400s, named."""
    with FakeAnthropicServer(LABELS) as server:
        b = backend(server, max_retries=0)
        messages = json.loads(step_prompts(b, 1)[0])["messages"]
        body = anthropic_requests.message_request(MODEL, messages, "Intent:", LABELS, "chat")
        twice = [{**t, "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}
                 for t in body["messages"][:2]] + body["messages"][2:]
        for bad in ({**body, "extra_body": {"seed": 1}},
                    {**body, "messages": [*body["messages"], {"role": "assistant", "content": "Intent:"}]},
                    {**body, "messages": twice}):
            with pytest.raises(UsageError, match="HTTP 400"):
                b._guarded(b._create(bad))
        b.close()
    assert len(server.problems) == 3 and "seed" in server.problems[0] and "prefill" in server.problems[1]
    assert "breakpoints" in server.problems[2]


def test_429_and_500_are_retried_with_backoff_and_the_labels_still_come():
    with FakeAnthropicServer(LABELS, fail=["429", "500", "429"]) as server:
        b = backend(server, max_retries=3)
        assert b.predict(step_prompts(b, 1), LABELS, 0.0, 1)[0] in LABELS
        b.close()
    assert len(server.messages) == 4


@pytest.mark.parametrize("cue, words", [
    ("500", ["HTTP 500", "after 0 retries", "rerun the same command"]),
    ("malformed", ["not a valid Anthropic messages response", "is --base_url the Anthropic API "
                                                                 "(https://api.anthropic.com, or a proxy of it)?"]),
    ("nonlabel", ["'not-a-label'", "not one of the 4 labels", "--api_mode completions"]),
    ("empty", ["no content"]),
])
def test_a_misbehaving_api_is_one_line(cue, words):
    with FakeAnthropicServer(LABELS, fail_all=cue) as server:
        b = backend(server, max_retries=0)
        with pytest.raises(UsageError) as info:
            b.predict(step_prompts(b, 2), LABELS, 0.0, 1)
        b.close()
    message = str(info.value)
    assert "\n" not in message and server.base_url in message and all(w in message for w in words), message
    assert "OpenAI" not in message and "/v1)" not in message  # its own advice, not the OpenAI-compatible server's


@pytest.mark.waits
def test_a_hanging_request_is_one_line_after_the_timeout_not_a_wait_for_ever():
    with FakeAnthropicServer(LABELS, fail=["hang"]) as server:
        b = backend(server, max_retries=0, timeout=1.0)
        tic = time.monotonic()
        with pytest.raises(UsageError) as info:
            b.predict(step_prompts(b, 1), LABELS, 0.0, 1)
        seconds = time.monotonic() - tic
        b.close()
    message = str(info.value)  # the SDK's timeout, or the silence watch's bound (--timeout, when shorter)
    assert "\n" not in message and ("APITimeoutError" in message or "answered nothing for 1 s" in message), message
    assert server.base_url in message and seconds < 10


@pytest.mark.waits
def test_a_request_that_keeps_timing_out_is_given_up_on_after_two_timeouts_not_max_retries():
    """--max_retries 5 and a server that answers its model list but never a message: the
    request is tried once more after its timeout, then one line, 2 x --timeout after it was sent."""
    with FakeAnthropicServer(LABELS, fail_all="hang") as server:
        b = backend(server, max_retries=5, timeout=1.5)
        tic = time.monotonic()
        with pytest.raises(UsageError) as info:
            b.predict(step_prompts(b, 1), LABELS, 0.0, 1)
        seconds = time.monotonic() - tic
        sent = len(server.messages)
        b.close()
    message = str(info.value)
    assert message.startswith(f"the server at {server.base_url} gave no answer to a request in 3 s"), message
    assert sent == 2 and seconds < 3 + 3, (sent, seconds)  # not 6 tries of 1.5 s with backoff


def test_no_key_a_wrong_key_and_an_unknown_model_are_one_line_each_without_the_key(monkeypatch):
    with FakeAnthropicServer(LABELS) as server:
        with pytest.raises(UsageError, match="^no Anthropic API key: set ANTHROPIC_API_KEY or pass --api_key$"):
            load_backend(MODEL, "anthropic", base_url=server.base_url)
        with pytest.raises(UsageError) as wrong:
            backend(server, api_key="sk-ant-WRONG-KEY")
        with pytest.raises(UsageError) as unknown:
            backend(server, api_model="claude-nonexistent")
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        load_backend(MODEL, "anthropic", base_url=server.base_url).close()  # the key from the environment
    assert "HTTP 401" in str(wrong.value) and "ANTHROPIC_API_KEY" in str(wrong.value)
    assert "WRONG" not in str(wrong.value)
    assert "does not know the model 'claude-nonexistent' (HTTP 404)" in str(unknown.value)


def test_without_the_sdk_the_backend_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "anthropic", None)  # import anthropic raises ImportError
    with pytest.raises(UsageError, match=r"pip install -e \.\[anthropic\]"):
        ab.AnthropicBackend(MODEL, api_key=KEY, base_url="http://127.0.0.1:9")


def test_tokens_are_counted_by_the_api_once_per_text_and_nothing_records_the_key():
    with FakeAnthropicServer(LABELS) as server:
        b = backend(server)
        prompt = step_prompts(b, 1)[0]
        assert b.count_tokens(prompt) == b.count_tokens(prompt) > 0
        described = json.dumps(b.describe())
        b.close()
    counted = [body for path, body in server.requests if path == "/v1/messages/count_tokens"]
    assert len(counted) == 1 and counted[0]["messages"][-1] == {"role": "assistant", "content": "Intent:"}
    assert KEY not in described and "SECRET" not in described
    assert json.loads(described)["seed"] == "not supported by the API"
    assert json.loads(described)["max_input_tokens"] == 200000  # the model's window, as the API gave it


def test_reasoning_is_written_as_text_then_answered_after_it():
    with FakeAnthropicServer(LABELS) as server:
        b = backend(server, api_mode="completions")
        frame = b.reasoning_frame([*CONTEXT, {"role": "user", "content": "Good.\n\nMessage: q"}], "Intent:")
        (written,) = b.generate([frame.prompt], 50, 1.0, 0, stop=[frame.stop])
        label = b.predict([frame.answer_prompt(written.text)], LABELS, 1.0, 0)
        b.close()
    assert written.text.startswith("It reads like") and "Intent:" not in written.text and written.tokens == 3
    assert label[0] in LABELS and not server.problems
    assert server.messages[0]["stop_sequences"] == ["Intent:"] and server.messages[0]["max_tokens"] == 50
    answer = server.messages[1]["messages"]  # the breakpoint stays after the context, not on the reasoning
    assert [t["content"][0]["text"] for t in answer if isinstance(t["content"], list)] == ["Intent: refund"]
    assert answer[-3]["content"] == written.text.strip() and answer[-1] == {"role": "assistant", "content": "Intent:"}


# -- run_experiment.py: bad input is one line, exit 2, nothing written, the key never shown -------------
@pytest.fixture(autouse=True)
def _console_handlers():
    """run_experiment.py's main adds a console handler per call: each test keeps its own."""
    import logging

    logger = logging.getLogger("icrl")
    before = list(logger.handlers)
    yield
    for handler in [h for h in logger.handlers if h not in before]:
        logger.removeHandler(handler)


def run(tmp_path, server, *extra):
    from icrl.cli.run import main

    return main(["--backend", "anthropic", "--model_name", MODEL, "--base_url", server.base_url,
                 "--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl",
                 "--max_context_examples", "2", "--train_k", "3", "--test_k", "3", "--test_every", "2", "--seed", "1",
                 "--training_seed", "1", "--test_seed", "1", "--output_dir", str(tmp_path / "out"), "--no-progress",
                 "--max_retries", "0", *extra])


@pytest.mark.parametrize("extra, words", [
    ((), ["no Anthropic API key"]),
    (("--api_key", "sk-ant-WRONG-KEY"), ["HTTP 401"]),
    (("--api_key", KEY, "--api_model", "claude-nonexistent"), ["HTTP 404", "claude-nonexistent"]),
])
def test_a_run_that_cannot_start_is_one_line_exit_2_and_writes_nothing(tmp_path, capsys, extra, words):
    with FakeAnthropicServer(LABELS) as server:
        code = run(tmp_path, server, *extra)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and err[0].startswith("error: ") and all(w in err[0] for w in words), err
    assert "WRONG-KEY" not in err[0] and not list((tmp_path / "out").rglob("*.jsonl"))


def test_an_answer_outside_the_labels_mid_run_is_one_line_and_keeps_the_finished_steps(tmp_path, capsys):
    with FakeAnthropicServer(LABELS) as server:
        assert run(tmp_path, server, "--api_key", KEY) == 0
        server.fail_all = "nonlabel"
        code = run(tmp_path, server, "--api_key", KEY, "--train_k", "6")  # extends the finished run
    out = capsys.readouterr().err
    err = [line for line in out.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(err) == 1 and "not one of the 4 labels" in err[0], err
    assert "; finished steps are saved: rerun the same command, or try --api_mode completions" in err[0], err
    assert KEY not in out
    (train,) = list((tmp_path / "out").rglob("train.jsonl"))
    assert len(train.read_text().splitlines()) == 3


@pytest.mark.parametrize("cue, said", [("nonlabel", "not one of the 4 labels"), ("500", "failed (HTTP 500")])
def test_a_failure_before_any_step_says_no_step_ran_not_that_steps_are_saved(tmp_path, capsys, cue, said):
    with FakeAnthropicServer(LABELS, fail_all=cue) as server:
        assert run(tmp_path, server, "--api_key", KEY) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(err) == 1 and said in err[0] and "; no step ran: rerun the same command" in err[0], err
    assert "saved" not in err[0] and not list((tmp_path / "out").rglob("*.jsonl"))


def test_a_run_without_a_context_size_or_a_window_is_one_line_naming_the_flag(tmp_path, capsys):
    """No --max_context_examples, no --max_model_len, and an API that does not say the window."""
    from icrl.cli.run import main

    with FakeAnthropicServer(LABELS, window=None) as server:
        code = main(["--backend", "anthropic", "--model_name", MODEL, "--base_url", server.base_url, "--api_key", KEY,
                     "--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl", "--train_k", "2",
                     "--test_k", "2", "--seed", "1", "--training_seed", "1", "--test_seed", "1",
                     "--output_dir", str(tmp_path / "out"), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "pass --max_model_len" in err[0] and "or --max_context_examples" in err[0]
    assert not list((tmp_path / "out").rglob("*.jsonl"))


def test_the_automatic_context_size_is_searched_with_the_api_counter_as_the_window_tool_does(tmp_path, capsys,
                                                                                             monkeypatch):
    """No --max_context_examples: the run's context size is the published search's in the window
    the API gives (max_input_tokens), with the API's token counter (the stand-in counts words),
    and find_max_examples_given_max_window.py --backend anthropic prints the same number; where
    the API gives no window, the tool asks for --max_window_tokens in one line."""
    from icrl.cli.run import main
    from icrl.cli.window import main as window_main
    from icrl.records import find_runs, read_json

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with FakeAnthropicServer(LABELS, window=300) as server:
        args = ["--backend", "anthropic", "--model_name", MODEL, "--base_url", server.base_url, "--task_name", TOY_TASK]
        assert window_main(args) == 0
        printed = int(capsys.readouterr().out.strip())
        counted = len([p for p, _ in server.requests if p.endswith("count_tokens")])
        assert main([*args, "--context_strategy_name", "random_unbiased", "--icrl", "--train_k", "2", "--test_k", "2",
                     "--test_every", "2", "--seed", "1", "--training_seed", "1", "--test_seed", "1",
                     "--output_dir", str(tmp_path / "out"), "--no-progress"]) == 0
    capsys.readouterr()  # the run's own lines
    (run_dir,) = find_runs(tmp_path / "out")
    assert counted > 0 and 1 < printed < 115  # a search in 300 tokens, not every episode of the toy task
    assert read_json(run_dir / "config.json")["resolved"]["max_context_examples"] == printed
    with FakeAnthropicServer(LABELS, window=None) as server:
        args[args.index("--base_url") + 1] = server.base_url
        assert window_main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "give --max_window_tokens" in err[0], err
        assert window_main([*args, "--max_window_tokens", "300"]) == 0
        assert int(capsys.readouterr().out.strip()) == printed
