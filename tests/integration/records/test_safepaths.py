"""Run directories stay inside --output_dir whatever the model or task name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from icrl.standin.openai_server import FakeOpenAIServer
from icrl.cli import build_parser
from icrl.records import experiment_dir, max_context_path
from icrl.records.safepaths import folder_name, model_folder

ROOT = Path(__file__).resolve().parents[3]
TOKENIZER = Path(os.environ.get("ICRL_TOKENIZERS_DIR", "/work/shared/tokenizers")) / "Qwen__Qwen2.5-7B-Instruct"
BASE = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl",
        "--seed", "1", "--training_seed", "1", "--test_seed", "1"]


def args_for(model_name: str) -> dict:
    return vars(build_parser().parse_args(BASE + ["--model_name", model_name]))


def under(path: Path, root: Path) -> bool:
    full, base = os.path.abspath(path), os.path.abspath(root)
    return full.startswith(base + os.sep) and ".." not in Path(full).parts


@pytest.mark.parametrize("name", ["/abs/path/to/smollm2-135m", "../../escape", "../x", "~/models/smol",
                                  "./models/../../up", "a/../../b", "/", "..", "models/with space/m 1",
                                  "org/name/../../../..", "org/..", "C:\\models\\x"])
def test_run_directory_is_inside_the_output_dir(tmp_path, name):
    out = tmp_path / "out"
    for path in (experiment_dir(out, args_for(name)), max_context_path(out, name, "trec_coarse")):
        assert under(path, out), path
        assert not any(part in ("..", "~") for part in path.relative_to(out).parts)


def test_hub_ids_and_plain_names_keep_the_published_layout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen2.5-7B-Instruct", "smollm2-135m", "gpt-4o-mini"):
        path = experiment_dir("out", args_for(name))
        assert str(path).startswith(f"out/{name}/trec_coarse/"), path
        assert max_context_path("out", name, "trec_coarse") == Path("out", name, "trec_coarse",
                                                                     "maximum_context_length.json")


def test_local_paths_get_a_readable_stable_name(tmp_path, monkeypatch):
    model = tmp_path / "my models" / "smol 135m"
    model.mkdir(parents=True)
    link = tmp_path / "link-to-smol"
    link.symlink_to(model)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    spellings = [str(model), "./my models/smol 135m", "my models/smol 135m", "~/my models/smol 135m",
                 str(link), str(model) + "/", "my models/../my models/smol 135m"]
    folders = {model_folder(s) for s in spellings}
    assert len(folders) == 1, folders  # one model folder, one run directory
    (folder,) = folders
    assert folder.startswith("local-smol-135m-") and "/" not in folder and " " not in folder
    other = tmp_path / "elsewhere" / "smol 135m"
    other.mkdir(parents=True)
    assert model_folder(str(other)) != folder  # same last component, another model


def test_odd_names_never_collide_or_escape():
    assert folder_name("trec_coarse") == "trec_coarse"
    assert folder_name("a b") != folder_name("a-b") and "/" not in folder_name("../../x")
    assert model_folder("org/a b") != model_folder("org/a-b")


@pytest.mark.skipif(not TOKENIZER.is_dir(), reason="needs the Qwen2.5 tokenizer in $ICRL_TOKENIZERS_DIR")
def test_a_local_model_path_run_writes_only_under_output_dir(tmp_path):
    """The audit's case: --backend openai --model_name /abs/model wrote inside the model folder."""
    model = tmp_path / "models" / "smollm2-135m"
    model.mkdir(parents=True)
    for f in TOKENIZER.iterdir():  # a local tokenizer folder (its files linked, not copied)
        (model / f.name).symlink_to(f)
    before = sorted(model.iterdir())
    out = tmp_path / "out"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with FakeOpenAIServer() as server:
        proc = subprocess.run([sys.executable, "run_experiment.py", *BASE, "--backend", "openai", "--base_url",
                               server.base_url, "--api_model", "org/fake-model", "--model_name", str(model),
                               "--api_mode", "chat",
                               "--train_k", "3", "--test_k", "2", "--max_context_examples", "2", "--no-progress",
                               "--output_dir", str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert sorted(model.iterdir()) == before  # nothing written into the model's folder
    results = list(out.rglob("results.json"))
    assert len(results) == 1 and under(results[0], out)
    assert results[0].relative_to(out).parts[0].startswith("local-smollm2-135m-")


def test_sweep_name_cannot_leave_the_sweeps_folder(tmp_path, capsys):
    from icrl.sweep.runner import main

    for name in ("../../../x", "/tmp/x", "a/b", ".."):
        code = main(["--name", name, "--dry_run", *BASE, "--model_name", "smollm2-135m",
                     "--output_dir", str(tmp_path)])
        err = capsys.readouterr().err
        assert code == 2 and "--name" in err and len(err.strip().splitlines()) == 1, (name, code, err)
