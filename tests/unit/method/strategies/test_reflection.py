"""Written reflections (icrl.method.strategies.reflection): when a guide is written, what the
writer is asked, where the guide stands in later prompts, what the records keep, another writer
model, refusals, and a resumed run that reads the guides back."""

from __future__ import annotations

import pytest

from helpers import TOY, files_under, one_error_line, run_and_resume, untimed_records
from icrl.backends.fake import FakeBackend
from icrl.cli.run import main
from icrl.method.episode import Episode
from icrl.method.strategies.reflection import reflection_messages
from icrl.records import read_jsonl
from icrl.tasks import load_task

RUN = [*TOY, "--icrl", "--context_strategy_name", "reflection", "--max_context_examples", "2", "--train_k", "12",
       "--test_every", "6", "--test_k", "3", "--reflect_every", "4", "--reflection_tokens", "10"]


def test_the_writer_is_asked_with_this_text():
    task = load_task(str(TOY[TOY.index("--task_name") + 1]))
    episodes = [Episode("Q: where is my parcel?", "delivery", 1, None, None, 0),
                Episode("Q: refund me", "billing", 0, None, None, 1)]
    system, user = reflection_messages(task, episodes, window=1)
    assert system == {"role": "system", "content": "You help a classifier that learns only from feedback on its answers."}
    assert user["content"] == (
        f"{task.description}\nLabels: billing, refund, delivery, account.\n\n"
        "Your answers so far (label: times you gave it, times it was rewarded):\n"
        "- billing: 1 given, 0 rewarded\n- refund: 0 given, 0 rewarded\n- delivery: 1 given, 1 rewarded\n"
        "- account: 0 given, 0 rewarded\n\n"
        "Recent answers:\nQ: refund me -> billing (wrong)\n\n"
        "Write a short guide (a few sentences) for answering the next inputs.")


def sent_prompts(monkeypatch) -> list:
    sent: list = []
    original = FakeBackend.predict

    def predict(self, prompts, labels, temperature, seed, progress=None):
        sent.extend((p, len(prompts)) for p in prompts)
        return original(self, prompts, labels, temperature, seed, progress)

    monkeypatch.setattr(FakeBackend, "predict", predict)
    return sent


def test_a_guide_every_k_steps_is_recorded_and_stands_in_the_prompts_until_the_next(tmp_path, monkeypatch):
    sent = sent_prompts(monkeypatch)
    assert main([*RUN, "--test_every", "100", "--output_dir", str(tmp_path)]) == 0
    train = read_jsonl(next(tmp_path.rglob("train.jsonl")))
    written = {r["step"]: r["reflection"] for r in train if "reflection" in r}
    assert sorted(written) == [4, 8]  # none before step K
    assert all(isinstance(g, str) and g for g in written.values())
    training = [p for p, n in sent if n == 1]
    for r, prompt in zip(train, training):
        shown = max((s for s in written if s <= r["step"]), default=None)
        if shown is None:
            assert "A guide you wrote" not in prompt and "reflection_step" not in r["metrics"]
        else:
            assert f"A guide you wrote from your earlier answers:\n{written[shown].strip()}<|end|>" in prompt
            assert r["metrics"]["reflection_step"] == shown
        assert r["context"] == list(range(max(r["step"] - 2, 0), r["step"]))  # the most recent episodes


def test_another_model_can_write_the_guides(tmp_path):
    assert main([*RUN, "--output_dir", str(tmp_path / "self")]) == 0
    assert main([*RUN, "--reflection_model", "fake-writer", "--output_dir", str(tmp_path / "other")]) == 0
    own = read_jsonl(next((tmp_path / "self").rglob("train.jsonl")))
    other_dir = next((tmp_path / "other").rglob("train.jsonl")).parent
    assert "_refmodelfake-writer" in other_dir.name
    other = read_jsonl(other_dir / "train.jsonl")
    assert [r["step"] for r in other if "reflection" in r] == [4, 8]
    assert [r["prompt"] for r in other] == [r["prompt"] for r in own]


@pytest.mark.parametrize("flags, message", [
    (["--reflect_every", "0"], "--reflect_every must be a number of steps >= 1"),
    (["--context_p_keep", "0.5"], "--context_p_keep keeps or drops episodes; reflection shows the most recent"),
    (["--summary_episodes", "2"], "--summary_episodes only applies to --context_strategy_name summary"),
])
def test_bad_settings_are_refused_in_one_line(flags, message, tmp_path, capsys):
    assert main([*RUN, *flags, "--output_dir", str(tmp_path / "out")]) == 2
    assert message in one_error_line(capsys)
    assert files_under(tmp_path / "out") == []


@pytest.mark.parametrize("at_call", [5, 9, 13])  # before, at and after a guide's call
def test_a_resumed_reflection_run_equals_an_uninterrupted_one(at_call, tmp_path, monkeypatch):
    whole, cut = run_and_resume(tmp_path, monkeypatch, RUN, at_call=at_call)
    assert untimed_records(cut) == untimed_records(whole)
