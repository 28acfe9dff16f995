"""The reflection strategy on the real model (SmolLM2 on the transformers backend, CPU): guides
written by free generation in a self-judged run (--reward judge), through the experiment, with a
resumed run equal to a whole one."""

from __future__ import annotations

from helpers import TOY, untimed_records
from icrl.cli import parse_args
from icrl.run.experiment import Experiment

RUN = [*[w for w in TOY if w not in ("--backend", "fake", "--model_name")], "--icrl", "--max_context_examples", "2",
       "--train_k", "6", "--test_every", "6", "--test_k", "2", "--temperature", "1.0"]


def run(smollm2, out, *flags) -> Experiment:
    experiment = Experiment(parse_args([*RUN, *flags, "--output_dir", str(out)]), backend=smollm2)
    assert experiment.run()["finished"]
    return experiment


def test_a_reflected_self_judged_run_on_the_real_model_records_and_resumes(smollm2, tmp_path):
    flags = ("--context_strategy_name", "reflection", "--reflect_every", "3", "--reflection_tokens", "12",
             "--reward", "judge")
    whole = run(smollm2, tmp_path, *flags)
    records = untimed_records(whole.out_dir)
    train = records["train"]
    guide = train[3]["reflection"]
    assert isinstance(guide, str) and guide and "reflection" not in train[2] and "reflection" not in train[4]
    assert all(r["judge"] in ("yes", "no") and r["reward"] == int(r["judge"] == "yes") for r in train)
    assert train[4]["metrics"]["reflection_step"] == 3
    lines = (whole.out_dir / "train.jsonl").read_text().splitlines(keepends=True)
    (whole.out_dir / "train.jsonl").write_text("".join(lines[:4]))  # lost the last two steps
    resumed = run(smollm2, tmp_path, *flags)
    assert untimed_records(resumed.out_dir) == records
