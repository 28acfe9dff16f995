"""run_sweep.py --estimate (icrl/sweep/estimate.py): each run played through its own loop in
memory, at an assumed share of rewarded episodes, and counted as run_count_tokens.py counts
finished runs; nothing written, no model loaded. On the fake backend (its word "tokens")."""

from __future__ import annotations

import json

import pytest

from helpers import typed_run
from icrl.backends import load_backend
from icrl.sweep import estimate, runner

TINY = ["--model_name", "smollm2-135m", "--backend", "fake", "--task_name", "trec_coarse", "--train_k", "24",
        "--test_k", "6", "--test_every", "8", "--max_context_examples", "6", "--icrl", "--seed", "100",
        "--training_seed", "100", "--test_seed", "5", "--temperature", "1.0"]
METHODS = ["--grid", "context_strategy_name=random_biased_end,random_biased_end_only_positive,"
           "random_unbiased_only_positive,approximate_only_positive", "--context_p_keep", "0.5", "--max_contexts", "4",
           "--approximate_context_sampling_method", "uniform"]


class Recorded:
    """The rewards a finished run got, step by step (in place of the assumed draw)."""

    same_as_accuracy = True

    def __init__(self, train):
        self.feedback = [r.feedback for r in train]

    def bind(self, task):
        return self

    def __call__(self, prediction, answer, *, seed, step, prompt=""):
        return self.feedback[step], self.feedback[step]

    def fields(self):
        return {}


def test_the_played_loop_is_the_run_given_its_rewards(data_dir, tmp_path, monkeypatch):
    """Given the rewards a finished run got, the estimate plays exactly its steps: the same
    contexts at every step, the same test steps, the same calls."""
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    _, runs = runner.plan([*METHODS, *TINY, "--output_dir", str(tmp_path)])
    outcomes = runner.execute(runs, backend=load_backend("smollm2-135m", backend="fake"), progress=False)
    assert [o.status for o in outcomes] == ["finished"] * 4
    chat = estimate.Tokenizers().chat(runs[0].args)
    for run in runs:
        config, train, test = typed_run(run.out_dir)
        record, played_train, played_test = estimate.play(run.args, chat, 0.5, Recorded(train))
        assert [r.context for r in played_train] == [r.context for r in train], run.label()
        assert [(r.step, r.context) for r in played_test] == [(r.step, r.context) for r in test]
        real = estimate.count(config, train, test, chat)
        guess = estimate.count(record, played_train, played_test, chat)
        assert (guess.train_calls, guess.test_calls, guess.steps) == (real.train_calls, real.test_calls, real.steps)
        # Only the model's answers differ (the stand-in's labels): their tokens, a few percent.
        assert guess.prompt_tokens == pytest.approx(real.prompt_tokens, rel=0.1)


def test_the_reward_share_sizes_positive_only_contexts_and_nothing_else(data_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    _, runs = runner.plan([*METHODS, *TINY, "--output_dir", str(tmp_path)])
    at = {share: estimate.estimate_runs(runs, share) for share in (0.0, 0.5, 1.0)}
    naive, naive_plus, explorative, approximate = (run.index for run in runs)
    tokens = {share: {i: e.train_prompt_tokens for i, e in out.items()} for share, out in at.items()}
    for i in (naive_plus, explorative, approximate):
        assert tokens[0.0][i] < tokens[0.5][i] < tokens[1.0][i]
    # Naive keeps every episode whatever its reward; only the shown feedback's words change.
    assert tokens[0.0][naive] == pytest.approx(tokens[1.0][naive], rel=0.05)
    assert not (tmp_path / "smollm2-135m").exists(), "an estimate writes nothing"


def test_estimate_prints_each_run_the_total_and_gpu_hours(data_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    argv = [*METHODS, *TINY, "--output_dir", str(tmp_path / "out"), "--estimate", "--reward_share", "0.25",
            "--tokens_per_s", "2"]
    assert runner.main(argv) == 0
    out = capsys.readouterr().out
    assert "assuming 25% of training episodes rewarded" in out
    rows = [line.split() for line in out.splitlines() if line.lstrip().startswith(("#0 ", "#1 ", "#2 ", "#3 ", "total"))]
    rows = [r for r in rows if r[1].isdigit()]  # the table, not the commands
    total = [r for r in rows if r[0] == "total"][0]
    per_run = [r for r in rows if r[0] != "total"]
    assert len(per_run) == 4
    as_int = lambda text: int(text.replace(",", ""))
    for column in range(1, 7):
        assert sum(as_int(r[column]) for r in per_run) == as_int(total[column])
    sent = as_int(total[3]) + as_int(total[6])
    assert f"{sent / 2 / 3600:,.2f} GPU-hours" in out
    assert not (tmp_path / "out").exists()


def test_rewarded_steps_are_the_share_evenly_spread():
    for share, steps in ((0.0, 10), (0.25, 8), (0.5, 7), (1 / 3, 30), (1.0, 5)):
        right = estimate.rewarded_steps(share, steps)
        assert sum(right) == int(steps * share + 0.5)
        assert all(sum(right[:t]) == int(t * share + 0.5) for t in range(steps + 1))


@pytest.mark.parametrize("argv, message", [
    (["--reward_share", "1.5"], "--reward_share is a share of episodes, from 0 to 1"),
    (["--tokens_per_s", "0"], "--tokens_per_s must be a positive finite number"),
])
def test_bad_estimate_flags_are_one_line_errors(argv, message, capsys):
    assert runner.main([*TINY, "--context_strategy_name", "random_unbiased", *argv]) == 2
    assert message in capsys.readouterr().err


def test_a_run_that_cannot_be_estimated_is_named_and_left_out_of_the_total(data_dir, tmp_path, capsys):
    import shutil

    only_trec = tmp_path / "data"
    shutil.copytree(data_dir / "trec", only_trec / "trec")  # banking77's files are missing
    flags = [w for i, w in enumerate(TINY) if "--task_name" not in (w, TINY[i - 1])]
    argv = [*flags, "--grid", "task_name=trec_coarse,banking77", "--context_strategy_name", "random_unbiased",
            "--data_dir", str(only_trec), "--output_dir", str(tmp_path / "out"), "--estimate"]
    alone = [*TINY, "--context_strategy_name", "random_unbiased", "--data_dir", str(only_trec),
             "--output_dir", str(tmp_path / "out"), "--estimate"]
    assert runner.main(argv) == 1
    captured = capsys.readouterr()
    assert "   #1 not estimated (left out of the total): dataset file not found" in captured.out
    assert "error: 1 runs could not be estimated (#1); the total leaves them out" in captured.err
    total = [line for line in captured.out.splitlines() if line.startswith("total")]
    assert runner.main(alone) == 0
    assert total == [line for line in capsys.readouterr().out.splitlines() if line.startswith("total")]


def test_shared_contexts_is_the_longest_run_of_first_episodes_seen_before():
    contexts = [[], [0], [0, 1], [0, 1], [2, 0], [0, 2, 5], [2, 0, 1], [1]]
    assert estimate.shared_contexts(contexts) == [0, 0, 1, 2, 0, 1, 2, 0]


def test_a_long_run_is_counted_from_a_sample_close_to_the_full_count(data_dir, tmp_path, monkeypatch):
    """Beyond SAMPLED_CALLS calls a run is counted from one call in k: its figures stay close to
    the full count (here 600 steps, one call in 4)."""
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    long = [w if w != "24" else "600" for w in TINY]
    _, runs = runner.plan([*METHODS, *long, "--test_every", "100", "--output_dir", str(tmp_path)])
    chat = estimate.Tokenizers().chat(runs[0].args)
    for run in runs:
        played = estimate.play(run.args, chat, 0.3)
        full = estimate.count(*played, chat)
        sample = estimate.sampled_count(*played, chat, 150)
        assert sample.note == "sampled: one training call in 4"
        assert (sample.train_calls, sample.test_calls) == (full.train_calls, full.test_calls)
        assert sample.train_prompt_tokens == pytest.approx(full.train_prompt_tokens, rel=0.03), run.label()
        assert sample.test_prompt_tokens == pytest.approx(full.test_prompt_tokens, rel=0.03), run.label()
        assert sample.processed_tokens == pytest.approx(full.processed_tokens, rel=0.15), run.label()
        # Every call rendered: the same count, less the words an input shares with another
        # episode's input after the shared episodes (the sample sees only the previous call's).
        every = estimate.sampled_count(*played, chat, 10_000)
        assert every.train_prompt_tokens == full.train_prompt_tokens
        assert full.processed_tokens <= every.processed_tokens <= 1.1 * full.processed_tokens, run.label()


def test_the_calls_a_run_declares_beyond_its_labels_are_counted_apart(tmp_path, capsys):
    """A guide-writing strategy and a judged reward: the guides' budgets are generated tokens, the
    verdicts are calls of their own, in the run's row and in the total (not in the GPU-hours)."""
    from helpers import TOY_TASK

    toy = ["--model_name", "fake", "--backend", "fake", "--task_name", TOY_TASK, "--train_k", "12", "--test_k", "3",
           "--test_every", "6", "--max_context_examples", "3", "--icrl", "--seed", "100", "--training_seed", "100",
           "--test_seed", "5", "--context_strategy_name", "reflection", "--reflect_every", "4",
           "--reflection_tokens", "20", "--reward", "judge", "--output_dir", str(tmp_path / "out")]
    _, runs = runner.plan(toy)
    (e,) = estimate.estimate_runs(runs, 0.5).values()
    assert e.generated_tokens == 2 * 20  # guides at steps 4 and 8, each at its budget
    assert e.other_calls == {"judge calls": 12}  # a verdict a training step
    assert runner.main([*toy, "--estimate"]) == 0
    out = capsys.readouterr().out
    assert "(+ 40 tokens generated at budget, 12 judge calls)" in out
    assert "besides: 40 tokens generated (reasoning and guides, at their budgets) and 12 judge calls" in out
    assert not (tmp_path / "out").exists()


def test_a_gemini_run_is_not_estimated_and_says_why(tmp_path, capsys):
    flags = TINY[4:]  # less the model and the backend
    assert TINY[:4] == ["--model_name", "smollm2-135m", "--backend", "fake"]
    argv = [*flags, "--model_name", "gemini-1.5-flash-8b", "--backend", "gemini", "--context_strategy_name",
            "random_unbiased", "--output_dir", str(tmp_path / "out"), "--estimate"]
    assert runner.main(argv) == 2  # the only run is not estimated: no totals
    out = capsys.readouterr().out
    assert "not estimated (left out of the total): the Gemini API gives token counts only, not token ids: there is " \
           "no tokenizer of gemini-1.5-flash-8b to load here; give a local model of similar size as --model_name and " \
           "the Gemini model as --api_model" in out


# -- the cost of a study before its model is here: a tokenizer is all the estimate needs ----------
LLAMA = "meta-llama/Meta-Llama-3.1-8B-Instruct"
REAL = [w for i, w in enumerate(TINY) if "--backend" not in (w, TINY[i - 1]) and "--model_name" not in (w, TINY[i - 1])]


@pytest.fixture
def llama(monkeypatch, tmp_path) -> Path:
    """The Llama 3.1 tokenizer files (no weights) under $ICRL_TOKENIZERS_DIR, offline, with an
    empty Hugging Face cache: the model is nowhere but its tokenizer."""
    from helpers import LLAMA_TOKENIZER

    if not (LLAMA_TOKENIZER / "tokenizer.json").is_file():
        pytest.skip("Llama 3.1 tokenizer files not found: set ICRL_TOKENIZERS_DIR")
    monkeypatch.setenv("ICRL_TOKENIZERS_DIR", str(LLAMA_TOKENIZER.parent))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub-cache"))
    return LLAMA_TOKENIZER


@pytest.mark.parametrize("model", ["hub id", "folder"])
def test_a_model_with_only_its_tokenizer_here_is_estimated_offline(llama, data_dir, tmp_path, capsys, model):
    name = LLAMA if model == "hub id" else str(llama)
    argv = [*REAL, "--model_name", name, "--context_strategy_name", "random_unbiased", "--output_dir",
            str(tmp_path / "out"), "--estimate", "--tokens_per_s", "1000"]
    assert runner.main(argv) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    total = [line.split() for line in out.splitlines() if line.startswith("total")][0]
    steps, train_tokens, test_tokens = int(total[1]), int(total[3].replace(",", "")), int(total[6].replace(",", ""))
    assert steps == 24 and train_tokens > 24 * 6 * 20 and test_tokens > 0  # six episodes of Llama tokens a step
    assert f"{(train_tokens + test_tokens) / 1000 / 3600:,.2f} GPU-hours" in out
    assert "1 runs, 0 invalid; dry run, no model loaded" in out
    assert not (tmp_path / "out").exists()


def test_the_same_folder_is_still_refused_for_a_run_that_loads_the_model(llama, data_dir, tmp_path, capsys):
    argv = [*REAL, "--model_name", str(llama), "--context_strategy_name", "random_unbiased", "--output_dir",
            str(tmp_path / "out"), "--dry_run"]
    assert runner.main(argv) == 1
    assert "has no weights" in capsys.readouterr().out


def test_a_sweep_whose_runs_are_all_invalid_is_one_line_and_no_totals(tmp_path, capsys):
    (tmp_path / "model").mkdir()  # a folder with neither weights nor a tokenizer
    argv = [*REAL, "--model_name", str(tmp_path / "model"), "--grid", "context_strategy_name=random_unbiased,"
            "random_biased_end", "--output_dir", str(tmp_path / "out"), "--estimate"]
    assert runner.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("error: nothing to estimate: all 2 runs are invalid: --model_name ")
    assert "has no tokenizer" in captured.err and len(captured.err.splitlines()) == 1


def test_a_sweep_with_no_run_estimated_prints_no_totals(data_dir, tmp_path, capsys):
    flags = [w for i, w in enumerate(TINY) if "--task_name" not in (w, TINY[i - 1])]
    argv = [*flags, "--task_name", "banking77", "--context_strategy_name", "random_unbiased",
            "--data_dir", str(tmp_path / "no-data"), "--output_dir", str(tmp_path / "out"), "--estimate"]
    assert runner.main(argv) == 2
    captured = capsys.readouterr()
    assert "   #0 not estimated (left out of the total)" in captured.out
    assert not [line for line in captured.out.splitlines() if line.startswith(("total", "prompt tokens sent"))]
    assert captured.err == "error: none of the 1 valid runs could be estimated (each says why above); no totals\n"


def test_the_estimate_sizes_a_run_from_the_cache_a_run_keeps_and_writes_none(tmp_path):
    """Without --max_context_examples the estimate takes the size cached for the run's model,
    task and window as the run reads it (an entry that is not a size is none) and otherwise
    searches it, writing nothing."""
    from helpers import TOY_TASK
    from icrl.records import max_context_path

    toy = ["--model_name", "fake", "--backend", "fake", "--task_name", TOY_TASK, "--train_k", "4", "--test_k", "2",
           "--test_every", "2", "--icrl", "--seed", "1", "--training_seed", "1", "--test_seed", "1",
           "--context_strategy_name", "random_unbiased", "--output_dir", str(tmp_path / "out")]
    _, (run,) = runner.plan(toy)
    chat = estimate.Tokenizers().chat(run.args)

    def size() -> int:
        return estimate.play(run.args, chat, 0.5)[0].resolved.max_context_examples

    searched = size()
    cache = max_context_path(tmp_path / "out", "fake", TOY_TASK)
    assert searched > 3 and not cache.exists()
    cache.parent.mkdir(parents=True)
    key = f"icrl@{chat.max_model_len}"
    for sizes, expected in (({key: 3}, 3), ({key: True}, searched), ({key: "3"}, searched), ([3], searched)):
        cache.write_text(json.dumps({"sizes": sizes}))
        assert size() == expected, sizes
        assert json.loads(cache.read_text()) == {"sizes": sizes}
