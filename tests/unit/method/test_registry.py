"""Declarations (icrl.method.registry): a typed parameter and a registry of parts, and the promise
they carry: a new strategy with one parameter is one new module in icrl/method/strategies/, and
--help, validation, the run folder, config.json, the results table and the labels follow."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from helpers import REPO, TOY_TASK
from icrl.errors import UsageError
from icrl.method.registry import Param, Registry, probability


def test_a_param_says_what_is_wrong_with_a_value():
    p = Param("p_thing", None, "a probability", check=probability, label="thing {}")
    assert p.flag == "--p_thing"
    assert p.problem(None) is None and p.problem(0.5) is None
    assert p.problem(1.5) == "--p_thing must be a probability in [0, 1], got 1.5"
    assert p.problem(float("nan")) == "--p_thing must be a probability in [0, 1], got nan"
    choice = Param("mode", "a", "a or b", type=str, choices=("a", "b"))
    assert choice.problem("c") == "unknown --mode 'c'; choose one of: a, b"


def test_a_param_labels_a_run_only_away_from_its_default():
    p = Param("alpha", 1.0, "alpha", label="alpha={}")
    assert p.label_of(1.0) is None and p.label_of(None) is None and p.label_of(float("nan")) is None
    assert p.label_of(0.5) == "alpha=0.5" and p.label_of(2.0) == "alpha=2"
    assert Param("x", None, "x").label_of(3) is None  # no label declared


def test_a_registry_refuses_unknown_and_duplicate_names_in_one_line():
    things: Registry = Registry("thing", "--thing")
    things.register("a", 1)
    things.register("b", 2)
    assert things.names() == ("a", "b") and list(things) == [1, 2] and "a" in things and len(things) == 2
    with pytest.raises(UsageError, match=r"^unknown --thing 'c'; choose one of: a, b$"):
        things.get("c")
    with pytest.raises(ValueError, match="registered already"):
        things.register("a", 3)
    things.unregister("a")
    assert things.names() == ("b",)


RECENT = '''"""random_recent: of the kept episodes of the last --recent_window steps, a uniform random choice."""

import numpy as np

from ..registry import Param
from .base import Strategy, register_strategy

RECENT_WINDOW = Param("recent_window", 10, "random_recent: only episodes of the last this many steps", type=int,
                      check=lambda v: None if v >= 1 else "a number of steps >= 1", folder="recent",
                      column="recent_window", label="window {}", only="llm")


@register_strategy
class RandomRecent(Strategy):
    name = "random_recent"
    family = "recent"
    params = (RECENT_WINDOW,)
    summary = "of the kept episodes of the last --recent_window steps, a uniform random choice"

    def __init__(self, max_examples, p_keep, accept, window):
        super().__init__(max_examples, p_keep, accept)
        self.window = window

    @classmethod
    def build(cls, setting):
        return cls(setting.max_examples, setting.p_keep, setting.accept, setting.values["recent_window"])

    def select(self, history, rng, query=None):
        pool = [e for e in history[-self.window:] if self.accept(e)]
        keep = rng.binomial(1, self.p_keep, size=len(pool))
        chosen = rng.permutation(np.nonzero(keep == 1)[0])[: self.max_examples]
        return [pool[i] for i in sorted(chosen)]
'''

SCRIPT = """
import json, sys
from icrl.cli.run import main
code = main(sys.argv[1:])
print("EXIT", code)
"""


@pytest.fixture(scope="module")
def extended(tmp_path_factory):
    """A copy of the package with one more module: icrl/method/strategies/recent.py."""
    root = tmp_path_factory.mktemp("extended")
    shutil.copytree(REPO / "icrl", root / "icrl", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "icrl" / "method" / "strategies" / "recent.py").write_text(RECENT)
    return root


def run_extended(root, *argv):
    return subprocess.run([sys.executable, "-c", SCRIPT, *argv], cwd=root, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(root), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})


def test_a_new_strategy_with_a_parameter_is_one_module(extended, tmp_path):
    out = tmp_path / "out"
    run = ["--backend", "fake", "--model_name", "fake", "--task_name", TOY_TASK, "--icrl", "--no-progress",
           "--max_context_examples", "3", "--train_k", "12", "--test_every", "6", "--test_k", "4",
           "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--output_dir", str(out)]
    helped = run_extended(extended, "--help")
    assert "random_recent" in helped.stdout and "--recent_window" in helped.stdout, helped.stderr
    done = run_extended(extended, *run, "--context_strategy_name", "random_recent", "--recent_window", "4")
    assert "EXIT 0" in done.stdout, done.stderr
    (config,) = out.rglob("config.json")
    assert config.parent.name.endswith("_recent4")  # the folder names the parameter
    assert json.loads(config.read_text())["args"]["recent_window"] == 4
    for line in (config.parent / "train.jsonl").read_text().splitlines():
        record = json.loads(line)
        assert all(record["step"] - 4 <= i < record["step"] for i in record["context"])
    refused = run_extended(extended, *run, "--context_strategy_name", "random_unbiased", "--recent_window", "4")
    assert "EXIT 2" in refused.stdout
    assert refused.stderr.strip() == "error: --recent_window only applies to --context_strategy_name random_recent"
    bad = run_extended(extended, *run, "--context_strategy_name", "random_recent", "--recent_window", "0")
    assert "EXIT 2" in bad.stdout and "--recent_window must be a number of steps >= 1, got 0" in bad.stderr
    other = run_extended(extended, *run, "--context_strategy_name", "random_unbiased")
    assert "EXIT 0" in other.stdout
    unbiased = [c for c in out.rglob("config.json") if "random_unbiased" in str(c)][0]
    assert "recent_window" not in json.loads(unbiased.read_text())["args"]  # other runs record what they did
    table = subprocess.run([sys.executable, "-c", "import sys; from icrl.analysis.results import Results; "
                            "r = Results(sys.argv[1]).runs; row = r[r['strategy'] == 'random_recent'].iloc[0]; "
                            "print(row['recent_window'], '|', row['label'])", str(out)],
                           cwd=extended, capture_output=True, text=True, timeout=300,
                           env={"PYTHONPATH": str(extended), "PATH": "/usr/bin:/bin"})
    assert table.stdout.strip() == "4 | random_recent (p=1, m=3, window 4)", table.stderr
