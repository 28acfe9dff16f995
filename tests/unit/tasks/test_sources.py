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

