"""Bad inputs the audit found accepted silently or answered with a traceback (issue 25.6): each
is one line, exit code 2, and nothing is left behind."""

from __future__ import annotations

import pytest

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
