"""Finishing and resuming verify what records say, not only their shape: every
prediction is a label, every accuracy follows from prediction and gold answer, config.json's
test prompts and labels match the data. Recomputable damage is repaired (records equal to
the undamaged run's), the rest refused in one line."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from icrl.standin.openai_server import MODEL, FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[3]
RUN = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
       "--training_seed", "1", "--test_seed", "1", "--backend", "openai", "--model_name", MODEL,
       "--max_context_examples", "2", "--test_k", "3", "--test_every", "2", "--train_k", "6", "--no-progress"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def write_lines(path: Path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def edit_jsonl(name, change):
    def apply(run_dir: Path):
        records = lines(run_dir / name)
        change(records)
        write_lines(run_dir / name, records)
    return apply


def edit_config(change):
    def apply(run_dir: Path):
        config = json.loads((run_dir / "config.json").read_text())
        change(config)
        (run_dir / "config.json").write_text(json.dumps(config))
    return apply


def _flip(records):
    records[3]["accuracy"] = 1 - records[3]["accuracy"]


def _set(key, index, value):
    def change(records):
        records[index][key] = value
    return change


def _test_prediction(records):
    records[1]["predictions"][0] = "not-a-label"


def _prompt(config):
    config["test_set"]["prompts"][0] += " (edited)"


def _labels(config):
    config["dataset"]["labels"] = [x.upper() for x in config["dataset"]["labels"]]


DAMAGE = {  # name: (edit, repaired?)
    "train_prediction_not_a_label": (edit_jsonl("train.jsonl", _set("prediction", 2, "not-a-label")), False),
    "test_prediction_not_a_label": (edit_jsonl("test.jsonl", _test_prediction), True),
    "flipped_train_accuracy": (edit_jsonl("train.jsonl", _flip), True),
    "test_accuracy_2": (edit_jsonl("test.jsonl", _set("accuracy", 0, 2.0)), True),
    "changed_test_prompt_in_config": (edit_config(_prompt), False),
    "renamed_labels_in_config": (edit_config(_labels), False),
}


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    root = tmp_path_factory.mktemp("contents")
    with FakeOpenAIServer() as server:
        proc = subprocess.run([sys.executable, "run_experiment.py", *RUN, "--base_url", server.base_url,
                               "--output_dir", str(root / "out")], cwd=ROOT, env=ENV, capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        yield root, server


def strip_times(records):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in records]


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_damaged_contents_are_repaired_or_refused(finished, tmp_path, damage):
    root, server = finished
    out = tmp_path / "out"
    shutil.copytree(root / "out", out)
    (run_dir,) = [p.parent for p in out.rglob("config.json")]
    original = {n: strip_times(lines(run_dir / n)) for n in ("train.jsonl", "test.jsonl")}
    edit, repaired = DAMAGE[damage]
    edit(run_dir)
    proc = subprocess.run([sys.executable, "run_experiment.py", *RUN, "--base_url", server.base_url,
                           "--output_dir", str(out)], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    if repaired:
        assert proc.returncode == 0, proc.stderr
        assert {n: strip_times(lines(run_dir / n)) for n in original} == original
        results = json.loads((run_dir / "results.json").read_text())
        assert results["finished"] and 0 <= results["final_test_accuracy"] <= 1
    else:
        assert proc.returncode == 2, (proc.returncode, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: "), proc.stderr
        assert "Traceback" not in proc.stderr
