"""The rest of issue 25's bad inputs, each a one-line error with exit code 2 that says what is
wrong (not a traceback, not a misleading message, not a silent acceptance) and leaves nothing
behind: model folders that hold no model, dataset files that are folders or truncated, a
record that is a folder or cannot be read, --csv a folder, nan for a fraction, too small a
--max_model_len, and tool refusals that used to leave an empty plots/ folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from icrl.cli.run import main
from icrl.records import find_runs

REPO = Path(__file__).resolve().parents[2]
BASE = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
        "--training_seed", "1", "--test_seed", "1", "--train_k", "3", "--test_k", "5", "--test_every", "2",
        "--no-progress"]
FAKE = BASE + ["--backend", "fake", "--model_name", "smollm2-135m"]


@pytest.fixture(autouse=True)
def _data(data_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    monkeypatch.chdir(tmp_path)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


def files_under(path: Path) -> list:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# -- a --model_name that holds no model ------------------------------------------------------------
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
def test_a_model_folder_without_a_model_is_one_line(make, tmp_path, capsys):
    model, needle = make(tmp_path)
    before = files_under(tmp_path)
    assert main(BASE + ["--backend", "transformers", "--model_name", str(model), "--output_dir", "out"]) == 2
    assert needle in one_error_line(capsys)
    assert files_under(tmp_path) == before


# -- dataset files ---------------------------------------------------------------------------------
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
def test_a_damaged_dataset_file_is_one_line_naming_it(change, data_dir, tmp_path, monkeypatch, capsys):
    needles = []
    copy = _trec_copy(data_dir, tmp_path, lambda trec: needles.append(change(trec)))
    monkeypatch.setenv("ICRL_DATA_DIR", str(copy))
    assert main(FAKE + ["--output_dir", "out"]) == 2
    assert needles[0] in one_error_line(capsys)
    assert not (tmp_path / "out").exists()


def test_the_original_dataset_files_pass_the_row_check(data_dir):
    from icrl.tasks import sources

    sources.load_source.cache_clear()
    splits = sources.load_source("trec", str(data_dir))
    assert {k: len(v["text"]) for k, v in splits.items()} == sources.ROWS["trec"]


# -- a run's own files -----------------------------------------------------------------------------
@pytest.fixture
def finished(tmp_path, capsys):
    assert main(FAKE + ["--output_dir", "out"]) == 0
    capsys.readouterr()
    return find_runs(tmp_path / "out")[0]


@pytest.mark.parametrize("name", ["train.jsonl", "log.txt"])
def test_a_record_replaced_by_a_folder_is_one_line(name, finished, capsys):
    (finished / name).unlink()
    (finished / name).mkdir()
    assert main(FAKE + ["--output_dir", "out", "--train_k", "5"]) == 2
    err = capsys.readouterr().err.strip()  # an "extending ... (--train_k 5)" note may come first
    assert "Traceback" not in err and [line for line in err.splitlines() if "error" in line] == [err.splitlines()[-1]]
    assert err.splitlines()[-1].startswith("error: ") and f"{name} is a folder where a file belongs" in err, err


def test_an_unreadable_record_is_reported_as_unreadable_not_unwritable(monkeypatch, capsys):
    if os.geteuid() == 0 and not shutil.which("setpriv"):
        pytest.skip("as root every file is readable, and setpriv (to drop to nobody) is missing")
    import tempfile

    home = Path(tempfile.mkdtemp(prefix="icrl-unreadable-"))  # pytest's own tmp is closed to other users
    try:
        home.chmod(0o777)
        monkeypatch.chdir(home)
        assert main(FAKE + ["--output_dir", "out"]) == 0
        capsys.readouterr()
        run_dir = find_runs(home / "out")[0]
        (run_dir / "test.jsonl").chmod(0)
        prefix = []
        if os.geteuid() == 0:  # root reads any file: run as nobody, owning the records
            subprocess.run(["chown", "-R", "65534:65534", str(home / "out")], check=True)
            prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        proc = subprocess.run([*prefix, sys.executable, str(REPO / "run_experiment.py"), *FAKE, "--output_dir",
                               "out", "--train_k", "5"], cwd=home, capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    finally:
        shutil.rmtree(home, ignore_errors=True)
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert last.startswith("error: cannot read ") and "test.jsonl" in last and "cannot write" not in last, last


def test_too_small_a_max_model_len_names_the_flag(tmp_path, capsys):
    assert main(FAKE + ["--max_model_len", "10", "--output_dir", "out"]) == 2
    err = one_error_line(capsys)
    assert err.startswith("error: --max_model_len 10: ") and "too small" in err
    assert not (tmp_path / "out").exists()


# -- the analysis tools ----------------------------------------------------------------------------
def test_token_counter_csv_that_is_a_folder_says_so(tmp_path, capsys):
    from icrl.cli.tokens import main as count_main

    (tmp_path / "tables").mkdir()
    assert count_main(["--data_dir", str(tmp_path), "--csv", str(tmp_path / "tables")]) == 2
    assert "is a folder" in one_error_line(capsys)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_token_counter_refuses_a_fraction_that_is_not_one(value, tmp_path, capsys):
    from icrl.cli.tokens import main as count_main

    assert count_main(["--data_dir", str(tmp_path), "--explorative_p_keep", value]) == 2
    assert "--explorative_p_keep" in one_error_line(capsys)


def test_a_plots_refusal_leaves_no_empty_folder(tmp_path, capsys):
    from icrl.cli.figures import main as plots_main

    (tmp_path / "empty").mkdir()
    assert plots_main(["--data_dir", "empty"]) == 2  # default --out_dir plots
    assert "no runs" in one_error_line(capsys)
    assert plots_main(["--data_dir", "empty", "--out_dir", "a/b/figures"]) == 2
    one_error_line(capsys)
    assert files_under(tmp_path) == ["empty"]
    (tmp_path / "a").write_text("x")
    assert plots_main(["--data_dir", "empty", "--out_dir", "a/b/figures"]) == 2
    assert "--out_dir" in one_error_line(capsys)  # checked before any run is read


def test_token_counter_and_window_search_refusals_leave_nothing(tmp_path, capsys):
    from icrl.cli.tokens import main as count_main
    from icrl.cli.window import main as maxlen_main

    assert count_main(["--data_dir", "nothing_here", "--csv", "out/tokens.csv"]) == 2
    one_error_line(capsys)
    assert maxlen_main(["--model_name", "./no_model", "--task_name", "trec_coarse", "--max_window_tokens", "4096"]) == 2
    one_error_line(capsys)
    assert maxlen_main(["--model_name", "smollm2-135m", "--task_name", "no_such_task"]) == 2
    one_error_line(capsys)
    assert files_under(tmp_path) == []
