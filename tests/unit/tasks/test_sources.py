"""The raw dataset files of the built-in tasks (icrl.tasks.sources): a damaged file is one line
naming it, exit 2; the original files pass the row check."""

from __future__ import annotations

import shutil

import pytest

from helpers import one_error_line
from icrl.cli.run import main

FAKE = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
        "--training_seed", "1", "--test_seed", "1", "--train_k", "3", "--test_k", "5", "--test_every", "2",
        "--no-progress", "--backend", "fake", "--model_name", "smollm2-135m"]


def _trec_copy(data_dir, tmp_path, change):
    from icrl.tasks import sources

    copy = tmp_path / "data"
    shutil.copytree(data_dir / "trec", copy / "trec")
    for file in (copy / "trec").iterdir():
        file.chmod(0o644) if file.is_file() else None
    change(copy / "trec")
    sources.load_source.cache_clear()
    return copy


def _file_is_a_folder(trec):
    (trec / "TREC_10.label").unlink()
    (trec / "TREC_10.label").mkdir()
    return "TREC_10.label is a folder"


def _cut_at_a_line(trec):
    lines = (trec / "TREC_10.label").read_bytes().splitlines(keepends=True)
    (trec / "TREC_10.label").write_bytes(b"".join(lines[:250]))
    return "TREC_10.label gives 250 test rows, not the dataset's 500"


def _cut_mid_line(trec):
    raw = (trec / "train_5500.label").read_bytes()
    (trec / "train_5500.label").write_bytes(raw[:-20])
    return "train_5500.label is truncated"


@pytest.mark.parametrize("change", [_file_is_a_folder, _cut_at_a_line, _cut_mid_line], ids=lambda f: f.__name__)
def test_a_damaged_dataset_file_is_one_line_naming_it(in_tmp_path, change, data_dir, tmp_path, monkeypatch, capsys):
    needles = []
    copy = _trec_copy(data_dir, tmp_path, lambda trec: needles.append(change(trec)))
    monkeypatch.setenv("ICRL_DATA_DIR", str(copy))
    assert main(FAKE + ["--output_dir", "out"]) == 2
    assert needles[0] in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_the_original_dataset_files_pass_the_row_check(in_tmp_path, data_dir):
    from icrl.tasks import sources

    sources.load_source.cache_clear()
    splits = sources.load_source("trec", str(data_dir))
    assert {k: len(v["text"]) for k, v in splits.items()} == sources.ROWS["trec"]



# ------------------------------------------------------------ where the raw files are found --
def test_the_data_folder_is_found_in_the_makefiles_order(tmp_path, monkeypatch):
    """--data_dir, else $ICRL_DATA_DIR, else ../shared/datasets beside the checkout, else the Hub."""
    from icrl.tasks import sources

    beside, env, given = (tmp_path / name for name in ("beside", "env", "given"))
    monkeypatch.setattr(sources, "BESIDE_CHECKOUT", beside)
    monkeypatch.delenv("ICRL_DATA_DIR", raising=False)
    assert sources.data_dir_of() is None  # nothing beside the checkout: the Hub
    beside.mkdir()
    assert sources.data_dir_of() == str(beside)
    monkeypatch.setenv("ICRL_DATA_DIR", str(env))
    assert sources.data_dir_of() == str(env)
    assert sources.data_dir_of(given) == str(given)


def test_the_makefile_looks_beside_the_checkout_too():
    """The same folder, spelled in the Makefile relative to the checkout."""
    from helpers import REPO
    from icrl.tasks import sources

    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    assert "ICRL_DATA_DIR ?= $(shell test -d ../shared/datasets" in makefile
    assert sources.BESIDE_CHECKOUT == REPO.parent / "shared" / "datasets"


def test_a_script_run_by_hand_finds_the_data_beside_the_checkout(tmp_path):
    """README's commands, run from the checkout with no ICRL_DATA_DIR, read ../shared/datasets."""
    import os
    import subprocess
    import sys

    from helpers import REPO, SUBPROCESS_ENV
    from icrl.tasks import sources

    if not sources.BESIDE_CHECKOUT.is_dir():
        pytest.skip(f"no raw dataset files beside this checkout ({sources.BESIDE_CHECKOUT})")
    env = {k: v for k, v in SUBPROCESS_ENV.items() if k != "ICRL_DATA_DIR"}
    proc = subprocess.run([sys.executable, "run_experiment.py", "--task_name", "banking77_top10",
                           "--max_context_examples", "0", "--icrl", "--test_k", "5", "--seed", "1",
                           "--training_seed", "1", "--test_seed", "1", "--backend", "fake", "--no-progress",
                           "--output_dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**env, "HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert "final test accuracy" in proc.stdout and os.listdir(tmp_path)
