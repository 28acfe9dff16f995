"""A plugin's contract checked at its edge, through run_experiment.py on the fake backend and the
toy task: a strategy's select() or a reward that breaks it, or a plugin that exits or raises
KeyboardInterrupt itself, stops the run at that step in one line naming the plugin, its file and
what it returned, exit 2; the steps before it stay on disk, and the same command, once the plugin
works, resumes to the records of a run that never stopped. A Ctrl-C the user presses while the
plugin runs is still a stop (130). The same for a plugin's figure (run_draw_plots.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, TOY, run_records

BREACH = REPO / "tests" / "data" / "plugins" / "breach.py"
RUN = ["--plugin", BREACH, *TOY, "--icrl", "--max_context_examples", "3", "--train_k", "8", "--test_every", "4",
       "--test_k", "4"]
STRATEGY = [*RUN, "--context_strategy_name", "breach"]
REWARD = [*RUN, "--context_strategy_name", "random_unbiased", "--reward", "breach_reward"]
EXPECTED_CONTEXT = "expected a list of at most 3 episodes from the history, each once"
KEPT = "the 5 steps before it are kept"


def script(name: str, *argv, env: dict = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("ICRL_PLUGINS", "BREACH", "BREACH_FROM")}
    environment.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **(env or {})})
    return subprocess.run([sys.executable, str(REPO / name), *map(str, argv)], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=300)


def one_line(done: subprocess.CompletedProcess, code: int = 2) -> str:
    """The one line on stderr (no traceback) of a run that exited with ``code``."""
    assert done.returncode == code, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


def run_dir(root: Path) -> Path:
    (config,) = root.rglob("config.json")
    return config.parent


def steps_on_disk(root: Path) -> list:
    return [json.loads(line)["step"] for line in (run_dir(root) / "train.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> dict:
    """The records of the strategy's run and of the reward's run, never stopped."""
    out = {}
    for name, argv in (("strategy", STRATEGY), ("reward", REWARD)):
        root = tmp_path_factory.mktemp(name)
        done = script("run_experiment.py", *argv, "--output_dir", root)
        assert done.returncode == 0, done.stderr
        out[name] = run_records(run_dir(root))
    return out


def stops_then_resumes(tmp_path, whole, part: str, breach: str, code: int = 2) -> str:
    """The run whose ``part`` breaches (``breach``) from step 5: its one line (exit ``code``), the 5
    steps before it on disk, then the same command, the plugin working, resumes to ``whole``."""
    argv = [*(STRATEGY if part == "strategy" else REWARD), "--output_dir", tmp_path]
    line = one_line(script("run_experiment.py", *argv, env={"BREACH": breach, "BREACH_FROM": "5"}), code)
    assert steps_on_disk(tmp_path) == [0, 1, 2, 3, 4]
    resumed = script("run_experiment.py", *argv)
    assert resumed.returncode == 0 and "resuming" in resumed.stderr, resumed.stderr
    assert run_records(run_dir(tmp_path)) == whole[part]
    return line


@pytest.mark.parametrize("breach, returned", [("string", "'abc'"), ("none", "None"), ("ints", "[0, 1]"),
                                              ("many", "5 episodes"),
                                              ("foreign", "an episode that is not in the history it was given "
                                                          "(step 0)"),
                                              ("twice", "the episode of step 0 twice")])
def test_a_select_that_breaks_its_contract(tmp_path, whole, breach, returned):
    line = stops_then_resumes(tmp_path, whole, "strategy", breach)
    assert line == (f"error: plugin breach ({BREACH}): select() returned {returned} at step 5, {EXPECTED_CONTEXT}; "
                    f"{KEPT}: fix the plugin and rerun the same command to resume")


@pytest.mark.parametrize("breach, returned", [("nan", "nan"), ("inf", "inf"), ("string", "'1'"),
                                              ("bool", "False")])
def test_a_reward_that_is_no_finite_number(tmp_path, whole, breach, returned):
    line = stops_then_resumes(tmp_path, whole, "reward", breach)
    assert line == (f"error: plugin breach ({BREACH}): its reward (score or reward_of) returned {returned} at step 5, "
                    f"expected a finite number; {KEPT}: fix the plugin and rerun the same command to resume")


@pytest.mark.parametrize("breach, raised", [("exit", "SystemExit(0): a plugin must not end the process"),
                                            ("interrupt", "KeyboardInterrupt, raised by the plugin itself (no "
                                                          "Ctrl-C arrived)")])
def test_a_plugin_that_exits_or_interrupts_itself(tmp_path, whole, breach, raised):
    line = stops_then_resumes(tmp_path, whole, "strategy", breach)
    assert line == (f"error: plugin breach ({BREACH}) failed in select at step 5: {raised}; {KEPT}: once the "
                    f"plugin works, rerun the same command to resume")


def test_a_ctrl_c_while_the_plugin_runs_is_the_users(tmp_path, whole):
    line = stops_then_resumes(tmp_path, whole, "strategy", "ctrl-c", code=130)
    assert line == "interrupted at step 5; rerun the same command to resume"


def test_a_plugins_figure_that_breaks_its_contract(tmp_path, whole):
    figure = tmp_path / "figure.py"
    figure.write_text("import os\nfrom icrl.plugin import register_figure\n\n\n@register_figure('mine')\n"
                      "def mine(ctx):\n    what = os.environ['FIGURE']\n"
                      "    if what == 'exit':\n        raise SystemExit(3)\n"
                      "    if what == 'raise':\n        raise ValueError('no runs of mine')\n"
                      "    return 42 if what == 'int' else 'nothing of mine'\n")
    data = tmp_path / "data"
    assert script("run_experiment.py", *STRATEGY, "--output_dir", data).returncode == 0
    argv = ["--plugin", figure, "--plugin", BREACH, "--data_dir", data, "--out_dir", tmp_path / "plots", "--only", "mine"]
    said = {what: one_line(script("run_draw_plots.py", *argv, env={"FIGURE": what}))
            for what in ("int", "raise", "exit")}
    label = f"error: plugin figure ({figure})"
    assert said == {
        "int": f"{label}: figure 'mine' returned 42, expected a matplotlib figure, or a string saying why it is "
               f"skipped; fix the plugin and rerun the same command",
        "raise": f"{label} failed in figure 'mine': ValueError: no runs of mine; once the plugin works, rerun the "
                 f"same command",
        "exit": f"{label} failed in figure 'mine': SystemExit(3): a plugin must not end the process; once the "
                f"plugin works, rerun the same command"}
    skipped = script("run_draw_plots.py", *argv, env={"FIGURE": "str"})
    assert skipped.returncode == 0 and "skipped mine: nothing of mine" in skipped.stdout, skipped.stderr


def test_a_sweep_run_whose_plugin_exits_fails_alone_in_one_line(tmp_path, whole):
    """In a sweep the plugin runs in a run's thread: its exit fails that run, said in one line,
    its steps kept; the same sweep, the plugin working, resumes it."""
    argv = ["--no-progress", "--plugin", BREACH, *STRATEGY[2:-2], "--grid", "context_strategy_name=breach",
            "--output_dir", tmp_path]
    failed = script("run_sweep.py", *argv, env={"BREACH": "exit", "BREACH_FROM": "5"})
    assert failed.returncode == 1, failed.stderr
    said = [line for line in failed.stderr.splitlines() if line.startswith("error: ")]
    assert said == [f"error: run #0 failed: plugin breach ({BREACH}) failed in select at step 5: SystemExit(0): a "
                    f"plugin must not end the process; {KEPT}: once the plugin works, rerun the same command to resume"]
    assert steps_on_disk(tmp_path) == [0, 1, 2, 3, 4]
    assert script("run_sweep.py", *argv).returncode == 0
    assert run_records(run_dir(tmp_path)) == whole["strategy"]
