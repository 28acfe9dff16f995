"""icrl.plugin, the face a plugin imports: its docstring's plugin is complete and works as it says
(run through run_experiment.py and run_draw_plots.py), and the face imports neither the run
configuration nor the analysis libraries (a plugin loads before any command line is built)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import icrl.plugin
from helpers import REPO, TOY


def docstring_plugin() -> str:
    """The literal block of the docstring (after "A complete plugin, ``my_plugin.py``::")."""
    text = icrl.plugin.__doc__
    block = text.split("``my_plugin.py``::\n", 1)[1].split("\nThen ", 1)[0]
    return textwrap.dedent(block)


def script(name, *argv):
    env = {**{k: v for k, v in os.environ.items() if k != "ICRL_PLUGINS"}, "PYTHONPATH": str(REPO),
           "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(REPO / name), *map(str, argv)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300)


def test_the_docstrings_plugin_runs_as_it_says(tmp_path):
    plugin = tmp_path / "my_plugin.py"
    plugin.write_text(docstring_plugin())
    out = tmp_path / "data"
    done = script("run_experiment.py", "--plugin", plugin, *TOY, "--icrl", "--context_strategy_name", "every_other",
                  "--every", "3", "--reward", "same_first_letter", "--max_context_examples", "2", "--train_k", "9",
                  "--test_every", "4", "--test_k", "4", "--output_dir", out)
    assert done.returncode == 0, done.stderr
    (config,) = out.rglob("config.json")
    record = json.loads(config.read_text())
    assert record["args"]["every"] == 3 and record["plugins"][0]["module"] == "my_plugin"
    drawn = script("run_draw_plots.py", "--plugin", plugin, "--data_dir", out, "--out_dir", tmp_path / "plots",
                   "--only", "context_size")
    assert drawn.returncode == 0 and (tmp_path / "plots" / "context_size.png").is_file(), drawn.stderr


def test_the_face_is_light():
    code = ("import sys, icrl.plugin; "
            "print(sorted(m for m in ('icrl.config', 'pandas', 'matplotlib') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr
    assert set(icrl.plugin.__all__) >= {"Strategy", "register_strategy", "Param", "Reward", "register_reward",
                                        "register_figure", "Backend", "register_backend"}
