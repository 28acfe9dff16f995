"""The task as a Gymnasium environment (icrl.run.gym_env): the run's stream, reward and feedback."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from helpers import TOY_TASK
from gymnasium.utils.env_checker import check_env

from icrl.run.gym_env import ENV_ID, ClassificationEnv
from icrl.cli.run import main
from icrl.records import find_runs


@pytest.fixture
def env():
    return ClassificationEnv(TOY_TASK, training_seed=3, train_k=8, seed=3)


def test_passes_gymnasiums_env_checker():
    made = gym.make(ENV_ID, task_name=TOY_TASK, training_seed=3, train_k=12)
    check_env(made.unwrapped, skip_render_check=True)
    assert isinstance(made.observation_space, gym.spaces.Text)
    assert made.action_space == gym.spaces.Discrete(4)


def test_stream_reward_and_feedback_are_a_runs(env, tmp_path, capsys):
    """Playing a run's predictions through the environment gives its records: the same inputs
    in the same order, the same rewards and the same shown (flipped) feedback."""
    code = main(["--backend", "fake", "--model_name", "fake", "--task_name", TOY_TASK, "--train_k", "8",
                 "--test_every", "4", "--test_k", "3", "--seed", "3", "--training_seed", "3", "--test_seed", "3",
                 "--icrl", "--context_strategy_name", "random_unbiased", "--max_context_examples", "4",
                 "--icrl_flip_feedback", "--icrl_flip_feedback_prob", "0.5", "--no-progress",
                 "--output_dir", str(tmp_path)])
    assert code == 0
    (run,) = find_runs(tmp_path)
    records = [json.loads(line) for line in (run / "train.jsonl").read_text().splitlines()]
    env = ClassificationEnv(TOY_TASK, training_seed=3, train_k=8, seed=3, flip_prob=0.5)
    observation, info = env.reset()
    assert "answer" not in info and info["example_id"] == records[0]["example_id"]
    for i, record in enumerate(records):
        assert observation == record["prompt"]
        assert record["answer"] not in observation.split()  # the gold label is not shown
        observation, reward, terminated, truncated, info = env.step(env.labels.index(record["prediction"]))
        assert info["step"] == i and info["example_id"] == record["example_id"]
        assert (reward, info["feedback"], info["answer"]) == (record["accuracy"], record["feedback"], record["answer"])
        assert terminated == (i == len(records) - 1) and not truncated
    assert observation == "" and env.observation_space.contains(observation)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(0)


def test_reset_seed_is_the_training_seed(env):
    first, _ = env.reset()
    assert env.reset()[0] == first  # reset() replays the stream
    other, _ = env.reset(seed=4)
    assert other != first
    assert env.reset(seed=3)[0] == first


def test_bad_action_is_refused(env):
    env.reset()
    with pytest.raises(ValueError, match="label index"):
        env.step(6)


def test_the_docs_agent_runs_and_prints_what_the_docs_show(data_dir, tmp_path):
    """docs/method.md's "An agent of your own": the script as written, and the line it shows."""
    import re
    import subprocess
    import sys

    from helpers import REPO, SUBPROCESS_ENV

    section = (REPO / "docs" / "method.md").read_text(encoding="utf-8").split("**An agent of your own.**", 1)[1]
    code, shown = re.search(r"```python\n(.*?)```.*?```\n(.*?)```", section, re.S).groups()
    script = tmp_path / "agent.py"
    script.write_text(code, encoding="utf-8")
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**SUBPROCESS_ENV, "ICRL_DATA_DIR": str(data_dir)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == shown
