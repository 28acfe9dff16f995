"""The LLM agent (icrl.method.agents.llm) with --reasoning, on the fake backend and the toy task:
each call's reasoning and its token count are recorded, train and test; the label is chosen
after the reasoning; later contexts show the episodes without it; a resumed run equals an
uninterrupted one, and another budget for the same run is refused in one line."""

from __future__ import annotations

import json

import pytest

from helpers import TOY, untimed_records
from icrl.backends.fake import INTERRUPT_ENV, FakeBackend
from icrl.cli.run import main
from icrl.method.prompts import REASONING_INSTRUCTION
from icrl.records import find_runs

RUN = [*TOY, "--icrl", "--context_strategy_name", "random_biased_end", "--max_context_examples", "3",
       "--train_k", "8", "--test_every", "4", "--test_k", "3"]


def run(out, *extra) -> int:
    return main([*RUN, "--output_dir", str(out), *extra])


def test_a_reasoning_run_records_each_calls_reasoning(tmp_path):
    assert run(tmp_path, "--reasoning", "6", "--debug_k", "3") == 0
    (run_dir,) = find_runs(tmp_path)
    assert run_dir.name.endswith("_reasoning")  # the budget is in config.json, not the folder's name
    assert json.loads((run_dir / "config.json").read_text())["args"]["reasoning"] == 6
    records = untimed_records(run_dir)
    for line in records["train"]:
        assert isinstance(line["reasoning"], str) and 1 <= line["reasoning_tokens"] <= 6
        assert list(line)[-2:] == ["reasoning", "reasoning_tokens"]
    for line in records["test"]:
        assert len(line["reasoning"]) == len(line["reasoning_tokens"]) == len(line["predictions"]) == 3
    log = (run_dir / "log.txt").read_text()
    # the first call's prompt: the instruction to think, the reasoning, then the answer marker
    assert REASONING_INSTRUCTION.format(prefix="Intent:") in log
    first = records["train"][0]["reasoning"]
    assert f"<|assistant|>\n{first}\nIntent:" in log


def test_later_contexts_show_the_episodes_without_their_reasoning(tmp_path):
    assert run(tmp_path, "--reasoning", "6", "--debug_k", "20") == 0
    (run_dir,) = find_runs(tmp_path)
    records = untimed_records(run_dir)
    reasoning = records["train"][0]["reasoning"]
    log = (run_dir / "log.txt").read_text()
    later = log.split("model call 4", 1)[1].split("model call 5", 1)[0]  # a call whose context holds step 0
    assert records["train"][0]["prompt"] in later and f"Intent: {records['train'][0]['prediction']}" in later
    assert reasoning not in later.split("<|assistant|>\n")[1]  # step 0's reasoning is not in the context


@pytest.mark.parametrize("cut", [3, 6])
def test_a_resumed_reasoning_run_equals_an_uninterrupted_one(tmp_path, monkeypatch, cut):
    assert run(tmp_path / "whole", "--reasoning", "6") == 0
    monkeypatch.setenv(INTERRUPT_ENV, str(cut))
    assert run(tmp_path / "cut", "--reasoning", "6") == 130
    monkeypatch.delenv(INTERRUPT_ENV)
    assert run(tmp_path / "cut", "--reasoning", "6") == 0
    (whole,), (cut_dir,) = find_runs(tmp_path / "whole"), find_runs(tmp_path / "cut")
    assert untimed_records(cut_dir) == untimed_records(whole)


def test_another_budget_for_the_same_run_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(INTERRUPT_ENV, "4")
    assert run(tmp_path, "--reasoning", "6") == 130
    monkeypatch.delenv(INTERRUPT_ENV)
    (run_dir,) = find_runs(tmp_path)
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    capsys.readouterr()
    assert run(tmp_path, "--reasoning", "12") == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "--reasoning: 6 there, 12 now" in err and "\n" not in err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_zero_shot_reasons_before_each_test_answer(tmp_path):
    assert main([*TOY, "--icrl", "--max_context_examples", "0", "--test_k", "4", "--reasoning", "5",
                 "--output_dir", str(tmp_path)]) == 0
    (run_dir,) = find_runs(tmp_path)
    (line,) = [json.loads(x) for x in (run_dir / "test.jsonl").read_text().splitlines()]
    assert len(line["reasoning"]) == 4 and all(1 <= n <= 5 for n in line["reasoning_tokens"])


def test_a_run_without_reasoning_records_what_it_always_did(tmp_path):
    assert run(tmp_path) == 0
    (run_dir,) = find_runs(tmp_path)
    records = untimed_records(run_dir, args=True)
    assert "reasoning" not in records["args"] and not run_dir.name.endswith("_reasoning")
    assert all("reasoning" not in line for line in records["train"] + records["test"])


def test_the_fake_backends_reasoning_is_a_pure_function_of_prompt_and_seed():
    fake = FakeBackend("fake")
    frame = fake.reasoning_frame([{"role": "user", "content": "Message: my refund is late"}], "Intent:")
    a = fake.generate([frame.prompt, frame.prompt], 8, 1.0, 3, stop=[frame.stop])
    assert a == fake.generate([frame.prompt, frame.prompt], 8, 1.0, 3, stop=[frame.stop])
    assert all(1 <= g.tokens <= 8 for g in a)
    assert frame.answer_prompt(a[0].text) == frame.prompt + a[0].text.rstrip() + "\nIntent:"
