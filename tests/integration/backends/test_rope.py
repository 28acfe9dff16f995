"""Qwen2.5 runs with the published YaRN x4 (original 32,768) by default, keeping its rope_theta."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from icrl.backends import rope
from icrl.errors import UsageError

REPO = Path(__file__).resolve().parents[3]
QWEN = "Qwen__Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def qwen_dir():
    env = os.environ.get("ICRL_TOKENIZERS_DIR")
    folder = (Path(env) if env else REPO.parent / "shared" / "tokenizers") / QWEN
    if not (folder / "config.json").is_file():
        pytest.skip("Qwen2.5 tokenizer files not found: set ICRL_TOKENIZERS_DIR")
    return folder


@pytest.mark.parametrize("name, spec, expected", [
    ("Qwen/Qwen2.5-7B-Instruct", None, "yarn:4.0:32768"),
    ("Qwen/Qwen2.5-7B-Instruct", "auto", "yarn:4.0:32768"),
    ("/models/Qwen__Qwen2.5-7B-Instruct", None, "yarn:4.0:32768"),
    ("Qwen/Qwen2.5-7B-Instruct", "none", None),
    ("Qwen/Qwen2.5-7B-Instruct", "linear:2:32768", "linear:2:32768"),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", None, None),
    ("smollm2-135m", "yarn:2:8192", "yarn:2:8192"),
])
def test_published_default_for_qwen25(name, spec, expected):
    assert rope.resolve_rope_scaling(name, spec) == expected


@pytest.mark.parametrize("spec", ["yarn", "yarn:x:1", "foo:2:10", "yarn:1:100", "yarn:2:0", "yarn:2:3:4"])
def test_bad_specs(spec):
    with pytest.raises(UsageError, match="rope_scaling"):
        rope.resolve_rope_scaling("Qwen/Qwen2.5-7B-Instruct", spec)


def test_real_qwen_config_keeps_rope_theta_under_transformers_5(qwen_dir):
    """The override built from Qwen2.5's own config.json keeps its rope_theta (1e6): transformers 5
    drops it from a rope_parameters that lacks it and falls back to its default base."""
    from transformers import AutoConfig

    from icrl.backends.hf import rope_config_kwargs

    config = json.loads((qwen_dir / "config.json").read_text())
    assert rope.rope_theta_of(config) == 1e6
    spec = rope.resolve_rope_scaling("Qwen/Qwen2.5-7B-Instruct", None)
    kwargs = rope_config_kwargs(qwen_dir, spec)
    loaded = AutoConfig.from_pretrained(qwen_dir, **kwargs)
    params = getattr(loaded, "rope_parameters", None) or {**loaded.rope_scaling, "rope_theta": loaded.rope_theta}
    assert params["rope_type"] == "yarn" and params["factor"] == 4.0
    assert params["original_max_position_embeddings"] == 32768
    assert params["rope_theta"] == 1e6
    assert rope_config_kwargs(qwen_dir, None) == {}


def test_vllm_engine_args_for_qwen25(qwen_dir):
    from icrl.backends import vllm_backend as vb

    theta = rope.rope_theta_of(json.loads((qwen_dir / "config.json").read_text()))
    args = vb.engine_args("Qwen/Qwen2.5-7B-Instruct", rope_theta=theta)
    assert args["max_model_len"] == 131072
    assert args["hf_overrides"]["rope_parameters"] == {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1e6}
    off = vb.engine_args("Qwen/Qwen2.5-7B-Instruct", rope_scaling="none")
    assert "hf_overrides" not in off and "max_model_len" not in off
    assert "hf_overrides" not in vb.engine_args("meta-llama/Meta-Llama-3.1-8B-Instruct")


def test_qwen25_window_is_131072_unless_turned_off(qwen_dir):
    from icrl.backends.chat import load_chat_tokenizer

    assert load_chat_tokenizer(str(qwen_dir)).max_model_len == 131072
    assert load_chat_tokenizer(str(qwen_dir), rope_scaling="none").max_model_len == 32768
    assert load_chat_tokenizer(str(qwen_dir), max_model_len=4096).max_model_len == 4096


def test_cli_rejects_a_bad_rope_scaling(capsys):
    from icrl.cli.run import main

    code = main(["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl",
                 "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--rope_scaling", "yarn:4"])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --rope_scaling 'yarn:4'") and "\n" not in err
