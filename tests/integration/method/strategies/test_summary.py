"""Summarised histories on the real model (SmolLM2 on the transformers backend, CPU)."""

from __future__ import annotations

from helpers import TOY, untimed_records
from icrl.cli import parse_args
from icrl.run.experiment import Experiment

RUN = [*[w for w in TOY if w not in ("--backend", "fake", "--model_name")], "--icrl", "--max_context_examples", "2",
       "--train_k", "6", "--test_every", "6", "--test_k", "2", "--temperature", "1.0"]


def test_a_summary_run_on_the_real_model(smollm2, tmp_path):
    experiment = Experiment(parse_args([*RUN, "--context_strategy_name", "summary_knn", "--summary_episodes", "1",
                                        "--output_dir", str(tmp_path)]), backend=smollm2)
    assert experiment.run()["finished"]
    train = untimed_records(experiment.out_dir)["train"]
    assert [len(r["context"]) for r in train] == [0, 1, 1, 1, 1, 1]
    assert all(r["prediction"] in ("billing", "refund", "delivery", "account") for r in train)
