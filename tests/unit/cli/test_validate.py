"""Bad input to run_experiment.py (icrl.cli.validate): each is one line, exit code 2, and nothing
is left behind; flags that cannot go together, a model folder that holds no model, a window too
small for the prompt."""

from __future__ import annotations

import json
from typing import Optional

import pytest

from helpers import TOY, TOY_TASK, files_under, one_error_line
from icrl import backends
from icrl.backends.fake import FakeBackend
from icrl.cli.run import main
from icrl.errors import UsageError

BASE = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
        "--training_seed", "1", "--test_seed", "1", "--model_name", "smollm2-135m", "--train_k", "3"]


def without(words, *flags):
    out = list(words)
    for flag in flags:
        if flag in out:
            del out[out.index(flag)]
    return out


CASES = {  # name: (argv, words the message must hold)
    "flip_prob_without_flip": (BASE + ["--icrl_flip_feedback_prob", "0.3"], "--icrl_flip_feedback"),
    "huge_max_model_len": (BASE + ["--max_model_len", "99999999999"], "--max_model_len"),
    "empty_output_dir": (BASE + ["--output_dir", ""], "--output_dir"),
    "omit_feedback_without_icrl": (without(BASE, "--icrl") + ["--no-icrl", "--icrl_omit_feedback"],
                                   "--icrl_omit_feedback"),
    "base_url_with_transformers": (BASE + ["--backend", "transformers", "--base_url", "http://127.0.0.1:1/v1"],
                                   "--base_url"),
    "zero_shot_unknown_strategy": (without(BASE, "random_unbiased", "--context_strategy_name")
                                   + ["--context_strategy_name", "no_such_strategy", "--max_context_examples", "0"],
                                   "--context_strategy_name"),
    "dtype_int8": (BASE + ["--dtype", "int8"], "--dtype"),
    "infinite_timeout": (BASE + ["--backend", "openai", "--timeout", "inf"], "--timeout a finite number"),
    "nan_timeout": (BASE + ["--backend", "openai", "--timeout", "nan"], "--timeout a finite number"),
    "zero_first_answer": (BASE + ["--backend", "openai", "--first_answer_timeout", "0"],
                          "--first_answer_timeout must be a finite number of seconds above 0, got 0.0"),
    "infinite_first_answer": (BASE + ["--backend", "gemini", "--first_answer_timeout", "inf"],
                              "--first_answer_timeout must be a finite number of seconds above 0, got inf"),
    # a flag a backend does not read, that would only rename the run's folder
    "api_mode_with_gemini": (BASE + ["--backend", "gemini", "--api_mode", "completions"],
                             "--api_mode completions is for --backend openai or anthropic, not gemini: it does nothing "
                             "there; drop it"),
    "api_mode_with_a_local_engine": (BASE + ["--api_mode", "chat"], "--api_mode chat is for --backend openai or "
                                                                     "anthropic, not auto (a local engine)"),
    "api_model_with_fake": (BASE + ["--backend", "fake", "--api_model", "x"],
                            "--api_model x is for --backend openai, anthropic or gemini, not fake"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_run_input_is_one_line(case):
    from icrl.cli import parse_args

    argv, needle = CASES[case]
    with pytest.raises(UsageError) as info:
        parse_args(argv)
    message = str(info.value)
    assert needle in message and "\n" not in message, message


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_run_input_exits_2_and_leaves_nothing(case, tmp_path, monkeypatch, capsys):
    from icrl.cli.run import main

    monkeypatch.chdir(tmp_path)
    argv, _ = CASES[case]
    if "--output_dir" not in argv:
        argv = argv + ["--output_dir", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert list(tmp_path.iterdir()) == [], list(tmp_path.rglob("*"))


def test_a_binary_sweep_config_is_one_line(tmp_path, capsys):
    from icrl.sweep.runner import main

    config = tmp_path / "sweep.toml"
    config.write_bytes(bytes(range(256)) * 4)
    assert main(["--config", str(config), "--dry_run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "--config" in err and len(err.strip().splitlines()) == 1, err


# -- a --model_name that holds no model, a window too small --------------------------------------
RUN = ["--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
       "--training_seed", "1", "--test_seed", "1", "--train_k", "3", "--test_k", "5", "--test_every", "2",
       "--no-progress"]


def _model_file(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    return tmp_path / "weights.bin", "is a file"


def _broken_config(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{broken")
    return tmp_path / "model", "config.json is not valid JSON"


def _config_only(tmp_path):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return tmp_path / "model", "has no tokenizer"


def _no_weights(tmp_path):
    path, _ = _config_only(tmp_path)
    (path / "tokenizer.json").write_text("{}")
    return path, "has no weights"


@pytest.mark.parametrize("make", [_model_file, _broken_config, _config_only, _no_weights], ids=lambda f: f.__name__)
def test_a_model_folder_without_a_model_is_one_line(in_tmp_path, make, tmp_path, capsys):
    model, needle = make(tmp_path)
    before = files_under(tmp_path)
    assert main(RUN + ["--backend", "transformers", "--model_name", str(model), "--output_dir", "out"]) == 2
    assert needle in one_error_line(capsys)
    assert files_under(tmp_path) == before


class Served(FakeBackend):
    """A plugin's backend of a served model: it takes --base_url and its model name is a label."""

    name = "served"
    local_model = False

    def __init__(self, model_name: str, *, base_url: Optional[str] = None, max_model_len: Optional[int] = None):
        super().__init__(model_name, max_model_len=max_model_len)
        self.base_url = base_url


class Local:
    """A plugin's backend that does not say ``local_model``: its model is a folder or Hub id."""

    name = "local"

    def __init__(self, model_name: str, *, base_url: Optional[str] = None):
        self.model_name, self.base_url = model_name, base_url


@pytest.fixture
def registered():
    for name, cls in (("served", Served), ("local", Local)):
        backends.register_backend(name, cls)
    yield
    for name in ("served", "local"):
        backends._unregister(name)


def test_a_registered_backend_takes_base_url_and_a_model_label_as_it_declares(registered, tmp_path):
    from icrl.cli import parse_args

    label = ["--model_name", "no-such-folder", "--base_url", "http://127.0.0.1:1/v1"]
    assert parse_args(RUN + ["--backend", "served", *label]).spec.backend == "served"
    with pytest.raises(UsageError, match=r"^--base_url is for --backend openai, anthropic, gemini, served or local, "
                                         r"not transformers; "):
        parse_args(RUN + ["--backend", "transformers", *label])
    model, needle = _model_file(tmp_path)
    with pytest.raises(UsageError, match=needle):
        parse_args(RUN + ["--backend", "local", "--model_name", str(model)])
    from icrl.cli import build_parser

    assert "server and API options (--backend openai, anthropic, gemini, served, local):" in build_parser().format_help()


@pytest.mark.parametrize("files, needle", [
    ({"config.json": '{"model_type": "llama"}', "tokenizer.json": "{}"}, None),
    ({"tokenizer.json": "{}"}, None),  # the window then comes from the tokenizer's files or --max_model_len
    ({"config.json": '{"model_type": "llama"}'}, "has no tokenizer"),
    ({"config.json": "{broken", "tokenizer.json": "{}"}, "config.json is not a JSON object"),
])
def test_a_planned_run_needs_of_its_model_folder_only_a_tokenizer(files, needle, tmp_path):
    """run_sweep.py --estimate plans runs (``weights=False``): a folder of tokenizer files (and
    its config.json) is model enough; without a tokenizer, or with a config.json that does not
    parse, it is one line."""
    from icrl.cli import parse_args

    model = tmp_path / "model"
    model.mkdir()
    for name, text in files.items():
        (model / name).write_text(text)
    argv = RUN + ["--backend", "transformers", "--model_name", str(model)]
    if needle is None:
        assert parse_args(argv, weights=False).spec.model_name == str(model)
        with pytest.raises(UsageError):
            parse_args(argv)  # a run that loads the model needs its weights
        return
    with pytest.raises(UsageError) as info:
        parse_args(argv, weights=False)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_planned_run_finds_a_hub_id_among_the_tokenizer_copies(tmp_path, monkeypatch):
    from icrl.cli import parse_args

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setenv("ICRL_TOKENIZERS_DIR", str(tmp_path / "tokenizers"))
    argv = RUN + ["--backend", "transformers", "--model_name", "some-org/some-model"]
    with pytest.raises(UsageError, match=r"or put its copy some-org__some-model/ under \$ICRL_TOKENIZERS_DIR"):
        parse_args(argv, weights=False)
    (tmp_path / "tokenizers" / "some-org__some-model").mkdir(parents=True)
    assert parse_args(argv, weights=False).spec.model_name == "some-org/some-model"
    with pytest.raises(UsageError, match="is not available offline"):
        parse_args(argv)  # a run that loads the model needs more than its tokenizer


def test_too_small_a_max_model_len_names_the_flag(in_tmp_path, tmp_path, capsys):
    assert main(RUN + ["--backend", "fake", "--model_name", "smollm2-135m", "--max_model_len", "10", "--output_dir", "out"]) == 2
    err = one_error_line(capsys)
    assert err.startswith("error: --max_model_len 10: ") and "too small" in err
    assert not (tmp_path / "out").exists()



# -- settings the method does not read: warned once, logged, the same run ----------------------------
TOY_RUN = ["--task_name", TOY_TASK, "--backend", "fake", "--icrl", "--seed", "1", "--training_seed", "1",
           "--test_seed", "1", "--train_k", "4", "--test_every", "2", "--test_k", "3", "--no-progress",
           "--max_context_examples", "2"]


@pytest.mark.parametrize("given, needle", [
    (["--context_strategy_name", "random_unbiased", "--max_contexts", "8"],
     "--max_contexts 8 does nothing for --context_strategy_name random_unbiased"),
    (["--context_strategy_name", "knn_lexical", "--approximate_context_sampling_method", "exact"],
     "--approximate_context_sampling_method exact does nothing for --context_strategy_name knn_lexical"),
    (["--context_strategy_name", "random_unbiased", "--max_context_examples", "0"],
     "--context_strategy_name random_unbiased does nothing for a zero-shot run"),
])
def test_a_published_setting_the_method_does_not_read_is_warned_once_and_logged(tmp_path, capsys, given, needle):
    out = tmp_path / "out"
    assert main(TOY_RUN + given + ["--output_dir", str(out)]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and needle in warnings[0] and warnings[0].endswith("ignored"), err
    (log,) = out.rglob("log.txt")
    assert needle in log.read_text()
    # the same run without the setting: it is the run the setting did not change
    plain = [w for w in TOY_RUN + given if w not in ("--max_contexts", "8", "--approximate_context_sampling_method",
                                                      "exact")]
    if "0" in given:
        plain = [w for w in plain if w not in ("--context_strategy_name", "random_unbiased")]
    assert main(plain + ["--output_dir", str(out)]) == 0
    captured = capsys.readouterr()
    assert "already finished" in captured.out and "warning" not in captured.err


@pytest.mark.parametrize("strategy", ["summary", "summary_knn"])
def test_a_window_given_to_a_summary_is_warned_once_and_changes_no_answer(strategy, tmp_path, capsys):
    from helpers import untimed_records

    out = tmp_path / "out"
    assert main(TOY_RUN + ["--context_strategy_name", strategy, "--summary_episodes", "1", "--output_dir", str(out)]) == 0
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert warnings == [f"warning: --max_context_examples 2 does nothing for --context_strategy_name {strategy} "
                        f"(its context: {'a per-label summary of the answers and rewards so far, then the'} "
                        f"--summary_episodes {'most recent' if strategy == 'summary' else 'most similar'} episodes): "
                        f"ignored"], warnings
    wider = [w if w != "2" or before != "--max_context_examples" else "5" for before, w in zip(["", *TOY_RUN], TOY_RUN)]
    assert main(wider + ["--context_strategy_name", strategy, "--summary_episodes", "1", "--output_dir", str(out)]) == 0
    runs = sorted(path.parent for path in out.rglob("train.jsonl"))
    assert len(runs) == 2 and untimed_records(runs[0]) == untimed_records(runs[1])


def test_the_approximate_settings_with_an_approximate_strategy_are_no_warning(tmp_path, capsys):
    assert main(TOY_RUN + ["--context_strategy_name", "approximate", "--max_contexts", "2",
                           "--approximate_context_sampling_method", "exact", "--output_dir", str(tmp_path)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_refused_run_with_a_setting_it_does_not_read_is_still_one_line(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert main(TOY_RUN + ["--context_strategy_name", "random_unbiased", "--max_contexts", "8",
                           "--output_dir", str(a_file)]) == 2
    one_error_line(capsys)


def test_a_backend_option_the_backend_does_not_take_is_said_once_when_the_run_goes_on(tmp_path, capsys):
    """--timeout (the openai backend's) and --tensor_parallel_size (vLLM's) with --backend fake:
    accepted, said once each, and the run is the one without them."""
    argv = [*TOY, "--context_strategy_name", "random_unbiased", "--icrl", "--max_context_examples", "2",
            "--train_k", "3", "--test_k", "2", "--output_dir", str(tmp_path / "out")]
    assert main([*argv, "--timeout", "30", "--first_answer_timeout", "5", "--tensor_parallel_size", "2"]) == 0
    err = capsys.readouterr().err
    said = ["warning: --timeout 30.0 does nothing for --backend fake (only the openai, anthropic and gemini backends "
            "read it): ignored",
            "warning: --first_answer_timeout 5.0 does nothing for --backend fake (only the openai, anthropic and gemini "
            "backends read it): ignored",
            "warning: --tensor_parallel_size 2 does nothing for --backend fake (only the vllm backend reads it): "
            "ignored"]
    assert [line for line in err.splitlines() if line.startswith("warning:")] == said, err
    assert main(argv) == 0
    assert "already finished" in capsys.readouterr().out
