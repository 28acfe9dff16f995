"""run_sweep.py's own options (icrl/cli/sweep.py): an option nothing would read is refused in one
line, one a dry run does not read is said once, and a number that means nothing is refused."""

from __future__ import annotations

import pytest

from icrl.cli.sweep import parse_sweep_args
from icrl.errors import UsageError
from icrl.sweep import runner

TINY = ["--model_name", "smollm2-135m", "--backend", "fake", "--task_name", "trec_coarse", "--train_k", "4",
        "--test_k", "2", "--test_every", "2", "--max_context_examples", "3", "--icrl", "--test_seed", "5",
        "--context_strategy_name", "random_unbiased", "--seed", "1", "--training_seed", "1"]


@pytest.mark.parametrize("flags, message", [
    (["--reward_share", "0.3"], "--reward_share is --estimate's assumption and this sweep estimates nothing: "
                                "add --estimate (or --tokens_per_s), or drop --reward_share"),
    (["--ray_cpus_per_worker", "2"], "--ray_cpus_per_worker only applies to Ray workers and this sweep runs "
                                     "without Ray: add --ray, or drop --ray_cpus_per_worker"),
    (["--ray_wait_s=30", "--ray_cpus_per_worker", "2"], "--ray_cpus_per_worker and --ray_wait_s only apply to Ray"),
    (["--tokens_per_s", "inf"], "--tokens_per_s must be a positive finite number"),
    (["--tokens_per_s", "nan"], "--tokens_per_s must be a positive finite number"),
    (["--reward_share", "nan", "--estimate"], "--reward_share is a share of episodes"),
    (["--ray_gpus_per_worker", "nan"], "--ray_gpus_per_worker must be a finite number >= 0, got nan"),
    (["--ray_gpus_per_worker", "inf"], "--ray_gpus_per_worker must be a finite number >= 0, got inf"),
    (["--ray", "--ray_cpus_per_worker", "nan"], "--ray_cpus_per_worker must be a finite number >= 0, got nan"),
    (["--ray", "--ray_wait_s", "nan"], "--ray_wait_s must be a number of seconds above 0, got nan"),
])
def test_options_nothing_reads_and_numbers_that_mean_nothing_are_one_line_errors(flags, message, capsys, tmp_path):
    assert runner.main([*TINY, "--output_dir", str(tmp_path / "out"), *flags]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_options_read_where_they_apply_are_accepted():
    opts, _ = parse_sweep_args([*TINY, "--estimate", "--reward_share", "0.3"])
    assert opts.reward_share == 0.3 and opts.ignored == ()
    opts, _ = parse_sweep_args([*TINY, "--ray", "--ray_cpus_per_worker", "2", "--ray_wait_s", "inf"])
    assert opts.ray and opts.ray_cpus_per_worker == 2 and opts.ignored == ()
    opts, _ = parse_sweep_args([*TINY, "--ray_workers", "2", "--ray_wait_s", "30"])  # --ray_workers implies --ray
    assert opts.ray and opts.ignored == ()


def test_a_dry_run_says_once_each_option_it_does_not_read(capsys, tmp_path):
    code = runner.main([*TINY, "--output_dir", str(tmp_path / "out"), "--dry_run", "--ray", "--max_parallel", "2",
                        "--summary", str(tmp_path / "s.csv")])
    out, err = capsys.readouterr()
    assert code == 0 and "#0 python run_experiment.py" in out
    warnings = err.strip().splitlines()
    assert warnings == [f"warning: {flag} does nothing for a dry run (--dry_run: nothing runs and no summary is "
                        f"written): ignored" for flag in ("--ray", "--max_parallel", "--summary")], err
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.csv").exists()
    runner.main([*TINY, "--output_dir", str(tmp_path / "out"), "--estimate", "--reward_share", "0.2"])
    assert "warning" not in capsys.readouterr().err
