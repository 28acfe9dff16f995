"""The viewer's data (icrl/viewer/data.py): its diagnostic curves are the windows of
diagnostics.csv and diagnostics.png, so the page and the figure show the same points of a run."""

from __future__ import annotations

from icrl.analysis.diagnostics import diagnostics, load_states
from icrl.analysis.synthetic import synthesize_run
from icrl.tasks import Example, Task
from icrl.viewer.data import curves

LABELS = ["apple", "banana", "cherry", "damson"]


def test_the_viewer_and_the_diagnostics_figure_use_one_window(tmp_path):
    train = [Example(i, f"question {i} about {LABELS[i % 4]}", i % 4) for i in range(300)]
    test = [Example(i, f"test item {i}", i % 4) for i in range(20)]
    task = Task("toy", LABELS, "Input: {text}", "Label:", train, test)
    synthesize_run(tmp_path, task, steps=120, strategy="random_unbiased_only_positive", p_keep=0.1,
                   max_examples=8, test_every=40, test_k=10, p_correct=lambda t: 0.3 + t / 240)
    state = load_states(tmp_path)[0]
    windows, _, _ = diagnostics(tmp_path)
    drawn = curves(state)
    assert drawn["window"] == int(windows["steps"].max()) == 5  # 120 steps: about 25 windows
    assert drawn["step"] == windows["window_end"].astype(int).tolist()
    assert drawn["accuracy"] == [round(x, 4) for x in windows["accuracy"]]


def test_each_declared_calls_answers_reach_the_page_under_its_kind():
    """A guide (written text) is sent by its index in the string table, a verdict as it is; a
    run without a call's answers has no entry for it."""
    from icrl.records.schema import TrainLine
    from icrl.viewer.data import StringTable, beyond_paper_fields

    def line(step, **answers):
        return TrainLine(step, step, "Q", "a", 1, "a", 1, 0, [], {}, answers=answers)

    strings = StringTable()
    got = beyond_paper_fields([line(0, judge="yes"), line(1, reflection="be brief", judge="no")], strings)
    assert got == {"verdict": ["yes", "no"], "guide": [-1, strings.index("be brief")]}
    assert strings.strings[got["guide"][1]] == "be brief"
    assert beyond_paper_fields([line(0)], StringTable()) == {}


def test_a_summary_runs_steps_carry_the_summary_each_prompt_showed(tmp_path, monkeypatch):
    """The summary is in no record, but rebuilt exactly from them (through resets of the
    history, --prob_reset); each step's text is the one in the prompt the model was sent."""
    from helpers import TOY
    from icrl.backends.fake import FakeBackend
    from icrl.cli.run import main
    from icrl.viewer.data import decode_preambles, viewer_data

    sent: list = []
    original = FakeBackend.predict

    def predict(self, prompts, labels, temperature, seed, progress=None):
        sent.append(list(prompts))
        return original(self, prompts, labels, temperature, seed, progress)

    monkeypatch.setattr(FakeBackend, "predict", predict)
    assert main([*TOY, "--icrl", "--train_k", "12", "--test_every", "100", "--test_k", "3", "--context_strategy_name",
                 "summary", "--prob_reset", "0.2", "--output_dir", str(tmp_path / "summary")]) == 0
    data = viewer_data(tmp_path / "summary")
    (run,) = data["runs"]
    shown = decode_preambles(run["train"]["preamble"], data["strings"])
    training_calls = [calls[0] for calls in sent if len(calls) == 1][:12]
    assert len(shown) == len(training_calls) == 12
    assert shown[0] == "Your answers so far: none yet."
    assert any(text.startswith("Your answers so far (label:") for text in shown)
    for text, prompt in zip(shown, training_calls):
        assert text + "<|end|>" in prompt  # the end of the system prompt: what the model read
    resets = [t for t, line in enumerate((tmp_path / "summary").rglob("train.jsonl").__next__().read_text()
                                         .splitlines()) if '"reset": true' in line]
    assert resets and all(shown[t] == "Your answers so far: none yet." for t in resets)


def test_a_strategy_without_text_of_its_own_has_no_preamble(tmp_path):
    from helpers import TOY
    from icrl.cli.run import main
    from icrl.viewer.data import viewer_data

    assert main([*TOY, "--icrl", "--train_k", "4", "--test_every", "2", "--test_k", "3", "--context_strategy_name",
                 "random_unbiased", "--max_context_examples", "2", "--output_dir", str(tmp_path)]) == 0
    assert "preamble" not in viewer_data(tmp_path)["runs"][0]["train"]
