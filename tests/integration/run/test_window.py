"""E1: how many ICRL episodes fit in a window (icrl/run/window.py and its top-level script).

Every answer is checked against renderings built here independently of the search: the
worst case (ranking, label, feedback) is recomputed with count_tokens one text at a time,
then n episodes must fit 95% of the window and n + 1 must not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from icrl.method.episode import Episode
from icrl.errors import UsageError
from icrl.run.window import WINDOW_FRACTION, _largest_fitting, find_max_examples, search_max_examples
from icrl.method.prompts import build_messages, feedback_message

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "find_max_examples_given_max_window.py"
TASKS = ("banking77", "clinic150")
WINDOWS = (4096, 8192)
LLAMA = "meta-llama__Meta-Llama-3.1-8B-Instruct"
# Llama 3.1 8B Instruct, published convention (n + 1), as the paper's README reports them:
# banking77 34 (4096) and 74 (8192), clinic150 60 and 126.
LLAMA_PUBLISHED = {("banking77", 4096): 34, ("banking77", 8192): 74,
                   ("clinic150", 4096): 60, ("clinic150", 8192): 126}


def _env():
    return {**os.environ, "HF_HUB_OFFLINE": "1"}


@pytest.fixture(scope="module")
def smollm():
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from icrl.backends.chat import load_chat_tokenizer

    return load_chat_tokenizer("smollm2-135m")


@pytest.fixture(scope="module")
def tasks():
    from icrl.tasks import load_task

    env = os.environ.get("ICRL_DATA_DIR")
    data = Path(env) if env else REPO.parent / "shared" / "datasets"
    if not data.is_dir():
        pytest.skip("raw dataset files not found: set ICRL_DATA_DIR to the datasets folder")
    return {name: load_task(name, data_dir=data) for name in TASKS}


@pytest.fixture(scope="module")
def llama():
    env = os.environ.get("ICRL_TOKENIZERS_DIR")
    folder = (Path(env) if env else REPO.parent / "shared" / "tokenizers") / LLAMA
    if not folder.is_dir():
        pytest.skip("Llama 3.1 tokenizer files not found: set ICRL_TOKENIZERS_DIR")
    from icrl.backends.chat import load_chat_tokenizer

    return load_chat_tokenizer(str(folder))


class Oracle:
    """The worst case recomputed the slow, obvious way, and renderings of it."""

    def __init__(self, chat, task):
        self.chat, self.task = chat, task
        prompts = task.all_prompts()
        counts = [chat.count_tokens(p) for p in prompts]
        self.ranked = [prompts[i] for i in sorted(range(len(prompts)), key=lambda i: (-counts[i], i))]
        prefix = task.prediction_prefix

        def episode_cost(label):
            return chat.count_tokens(f"{prefix} {label}") + max(
                chat.count_tokens(feedback_message(label, f)) for f in (0, 1))

        self.episode_cost = {label: episode_cost(label) for label in task.labels}

    def tokens(self, n, label, feedback):
        """The context of n episodes, the generation prompt and the prefix; no new query."""
        context = [Episode(p, label, feedback, label, feedback) for p in self.ranked[:n]]
        marker = "\x00QUERY\x00"
        messages, prefix = build_messages(self.task, context, marker, "icrl",
                                          supports_system_role=self.chat.supports_system_role)
        kept = []
        for m in messages:
            content = m["content"].replace("\n\n" + marker, "").replace(marker, "")
            if content or m["content"] != marker:
                kept.append({**m, "content": content})
        return self.chat.count_tokens(self.chat.render(kept, prefix))

    def check(self, result, window):
        """The result's worst case is the worst, n fits and n + 1 does not."""
        chat, label, feedback = self.chat, result.longest_label, result.longest_feedback
        assert self.episode_cost[label] == max(self.episode_cost.values())
        assert chat.count_tokens(feedback_message(label, feedback)) == max(
            chat.count_tokens(feedback_message(label, f)) for f in (0, 1))
        assert result.longest_prompt == self.ranked[0]
        bound = WINDOW_FRACTION * window
        n = result.max_examples
        assert n >= 1 and not result.capped
        assert self.tokens(n, label, feedback) == result.tokens <= bound
        assert self.tokens(n + 1, label, feedback) == result.tokens_next > bound
        assert result.published_convention == n + 1


@pytest.fixture(scope="module")
def smollm_oracles(smollm, tasks):
    return {name: Oracle(smollm, task) for name, task in tasks.items()}


@pytest.fixture(scope="module")
def smollm_results(smollm, tasks):
    return {(name, w): search_max_examples(smollm, tasks[name], w) for name in TASKS for w in WINDOWS}


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("task_name", TASKS)
def test_answer_fits_and_one_more_does_not(smollm_oracles, smollm_results, task_name, window):
    result = smollm_results[task_name, window]
    smollm_oracles[task_name].check(result, window)
    assert result.window == window
    assert result.renders <= 12  # O(log n) full renderings (4 in practice)


def test_more_window_more_examples(smollm_results):
    for name in TASKS:
        small, large = (smollm_results[name, w].max_examples for w in WINDOWS)
        assert 0 < small < large


def test_default_window_is_the_model_maximum(smollm, tasks, smollm_results):
    assert smollm.max_model_len == 8192
    # As the published runner: one more than the largest fitting n (its search's left + 1).
    assert find_max_examples(smollm, tasks["banking77"]) == smollm_results["banking77", 8192].max_examples + 1


def test_small_window_by_linear_scan(smollm, tasks, smollm_oracles):
    """At 1024 tokens, scanning every n agrees with the search (and the count grows with n)."""
    for name in TASKS:
        result = search_max_examples(smollm, tasks[name], 1024)
        oracle = smollm_oracles[name]
        counts = [oracle.tokens(n, result.longest_label, result.longest_feedback)
                  for n in range(result.max_examples + 3)]
        assert counts == sorted(counts)
        assert max(n for n, c in enumerate(counts) if c <= 0.95 * 1024) == result.max_examples


def test_bad_windows(smollm, tasks):
    task = tasks["banking77"]
    for window in (0, -5, 2.5, True):
        with pytest.raises(UsageError, match="positive"):
            find_max_examples(smollm, task, window)
    with pytest.raises(UsageError, match="too small"):
        find_max_examples(smollm, task, 30)


@pytest.mark.parametrize("hi", range(0, 18))
def test_largest_fitting_finds_the_boundary_from_any_guess(hi):
    for answer in range(hi + 1):
        for guess in range(-1, hi + 3):
            calls = []

            def fits(k):
                assert 0 <= k <= hi
                calls.append(k)
                return k <= answer

            assert _largest_fitting(fits, hi, guess) == answer
            assert len(calls) <= 2 * (hi + 1).bit_length() + 2


def test_cli_prints_the_number(smollm_results):
    """By default the published number (n + 1), which the published runner uses."""
    expected = smollm_results["banking77", 4096].max_examples + 1
    done = subprocess.run([sys.executable, str(SCRIPT), "--model_name", "smollm2-135m", "--task_name",
                           "banking77", "--max_window_tokens", "4096", "--verbose"],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{expected}\n"
    assert "longest label:" in done.stderr and f"tokens at n={expected - 1}:" in done.stderr
    assert f"published convention (n + 1, the runner's default context size): {expected}" in done.stderr


@pytest.mark.parametrize("flags, extra", [([], 1), (["--published_convention"], 1), (["--largest_fitting"], 0)])
def test_largest_fitting_flag(capsys, monkeypatch, smollm, smollm_results, flags, extra):
    """In process (the tokenizer load is reused): --largest_fitting prints n, the default n + 1."""
    import icrl.cli.window as maxlen

    monkeypatch.setattr(maxlen, "_load_chat", lambda name, token, rope=None: smollm)
    monkeypatch.setattr(maxlen, "_quiet_transformers", lambda: None)
    code = maxlen.main(["--model_name", "smollm2-135m", "--task_name", "clinic150",
                        "--max_window_tokens", "8192", *flags])
    assert code == 0
    assert capsys.readouterr().out == f"{smollm_results['clinic150', 8192].max_examples + extra}\n"


def test_no_icrl_search_uses_the_icl_system_prompt(smollm, tasks, smollm_results):
    """--no-icrl: the published search renders the same episodes under the (shorter) ICL prompt."""
    from icrl.run.window import context_messages
    from icrl.method.prompts import SYSTEM_PROMPT_ICL, SYSTEM_PROMPT_ICRL

    task = tasks["clinic150"]
    episode = [Episode("q", "a", 1, "a", 1)]
    icrl_messages, _ = context_messages(task, episode, True)
    icl_messages, _ = context_messages(task, episode, True, icrl=False)
    assert icrl_messages[0]["content"].startswith(SYSTEM_PROMPT_ICRL + "\n")
    assert icl_messages[0]["content"] == SYSTEM_PROMPT_ICL + icrl_messages[0]["content"][len(SYSTEM_PROMPT_ICRL):]
    assert icl_messages[1:] == icrl_messages[1:]
    icl = search_max_examples(smollm, task, 8192, icrl=False)
    assert icl.max_examples >= smollm_results["clinic150", 8192].max_examples
    assert icl.tokens < smollm_results["clinic150", 8192].tokens or icl.max_examples > smollm_results["clinic150", 8192].max_examples


@pytest.mark.parametrize("args, message", [
    (["--task_name", "no_such_task"], "error: unknown task 'no_such_task'"),
    (["--task_name", "banking77", "--max_window_tokens", "0"], "error: --max_window_tokens must be positive"),
])
def test_cli_bad_input_is_one_line_exit_2(args, message):
    done = subprocess.run([sys.executable, str(SCRIPT), "--model_name", "smollm2-135m", *args],
                          capture_output=True, text=True, env=_env(), timeout=120)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(message) and done.stderr.count("\n") == 1


@pytest.fixture(scope="module")
def llama_oracles(llama, tasks):
    return {name: Oracle(llama, task) for name, task in tasks.items()}


@pytest.mark.parametrize("window", WINDOWS)
@pytest.mark.parametrize("task_name", TASKS)
def test_llama_31_against_the_paper(llama, tasks, llama_oracles, task_name, window):
    result = search_max_examples(llama, tasks[task_name], window)
    llama_oracles[task_name].check(result, window)
    assert result.published_convention == LLAMA_PUBLISHED[task_name, window]
    # The runner's automatic context size is the published number (was one fewer).
    assert find_max_examples(llama, tasks[task_name], window) == LLAMA_PUBLISHED[task_name, window]


def test_llama_31_no_icrl_clinic150(llama, tasks):
    """The published search under the ICL system prompt: 61 at 4096 tokens (59 before)."""
    assert find_max_examples(llama, tasks["clinic150"], 4096, icrl=False) == 61


# -- the automatic size's cache: by mode (default) or shared as published (--published_quirks) --
def _resolve_size(out, chat, window, *extra):
    """The automatic context size an Experiment with these arguments resolves (no model)."""
    from icrl.cli import parse_args
    from icrl.run.data import load_data
    from icrl.run.size import resolve_max_examples

    # the model name only names the folders; the size comes from the given tokenizer (chat)
    argv = ["--model_name", "smollm2-135m", "--task_name", "clinic150",
            "--context_strategy_name", "random_unbiased" + ("" if "--no-icrl" in extra else "_only_positive"),
            "--context_p_keep", "0.1",
            "--train_k", "4", "--test_k", "4", "--test_every", "2", "--temperature", "1.0",
            "--output_dir", str(out), "--seed", "1", "--training_seed", "1", "--test_seed", "1", *extra]
    config = parse_args(argv)
    backend = type("Backend", (), {"max_model_len": window, "chat": chat})()
    return resolve_max_examples(config, load_data(config), backend)


@pytest.mark.parametrize("flag", ["--published_quirks", "--published_tokenization"])
def test_published_quirks_share_the_first_runs_size_between_icrl_and_icl(tmp_path, llama, tasks, flag):
    """README order (an ICRL run, then the --no-icrl upper bound) in one data folder, clinic150 at
    4096 with Llama-3.1: as published the ICL run reuses the ICRL run's 60; by default it searches
    under the ICL prompt and gets 61, whatever ran before it."""
    ours, published = tmp_path / "ours", tmp_path / "published"
    assert _resolve_size(ours, llama, 4096, "--icrl") == 60
    assert _resolve_size(ours, llama, 4096, "--no-icrl") == 61
    assert _resolve_size(published, llama, 4096, "--icrl", flag) == 60
    assert _resolve_size(published, llama, 4096, "--no-icrl", flag) == 60
    # alone (or first), the ICL run gets its own search's size under the switch too
    assert _resolve_size(tmp_path / "icl_first", llama, 4096, "--no-icrl", flag) == 61
    assert _resolve_size(tmp_path / "icl_first", llama, 4096, "--icrl", flag) == 61


def test_cached_size_keys():
    from icrl.run.window import cached_size

    assert cached_size({}, True, 4096) == (None, ["icrl@4096"])
    assert cached_size({"icrl@4096": 60}, False, 4096) == (None, ["icl@4096"])
    assert cached_size({"icrl@4096": 60}, False, 4096, True) == (None, ["icl@4096", "published@4096"])
    assert cached_size({"published@4096": 60, "icl@4096": 61}, False, 4096, True) == (60, ["published@4096"])
    assert cached_size({"icl@4096": 61}, False, 4096, True) == (61, ["published@4096"])
    assert cached_size({"published@8192": 126}, True, 4096, True) == (None, ["icrl@4096", "published@4096"])
