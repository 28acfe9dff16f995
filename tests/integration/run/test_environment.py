"""Where a run executes (icrl/run/environment.py), with the real embedded model: --no-progress
hides the libraries' bars too (transformers' "Loading weights"), while the default shows them."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import REPO, SUBPROCESS_ENV, TOY_TASK

TINY = ["--model_name", "smollm2-135m", "--backend", "transformers", "--task_name", TOY_TASK, "--icrl",
        "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.5",
        "--max_context_examples", "2", "--train_k", "2", "--test_every", "2", "--test_k", "2",
        "--seed", "1", "--training_seed", "1", "--test_seed", "1"]


def stderr_of(tmp_path, *extra) -> str:
    proc = subprocess.run([sys.executable, str(REPO / "run_experiment.py"), *TINY, *extra, "--output_dir",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=600, env=SUBPROCESS_ENV)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


@pytest.mark.model
def test_no_progress_hides_the_weight_loading_bar(tmp_path):
    assert "Loading weights" in stderr_of(tmp_path / "a", "--progress")  # the bar this switch hides
    assert "Loading weights" not in stderr_of(tmp_path / "b", "--no-progress")
