"""The entry scripts' first lines: each loads the plugins, then imports its ``main`` by a plain
import, and refuses bad arguments in one line, exit 2, before the libraries of its work load
(torch, transformers and vLLM; pandas, scipy and matplotlib for the scripts that read runs).
The time a refusal takes is bench/timings.py's (docs/development.md, Timings)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from helpers import REPO

SCRIPTS = ("run_experiment.py", "run_sweep.py", "run_draw_plots.py", "run_count_tokens.py", "run_report.py",
           "run_view.py", "find_max_examples_given_max_window.py")
HEAVY = ("torch", "transformers", "vllm", "pandas", "scipy", "matplotlib")
# One refusal per script, of the flags alone: (script, arguments, the start of its one line).
REFUSALS = [
    ("run_experiment.py", ["--task_name", "no_such_task"], "error: unknown task 'no_such_task'"),
    ("run_sweep.py", ["--grid", "no_values"], "error: --grid 'no_values': write FLAG=VALUE1,VALUE2"),
    ("run_draw_plots.py", ["--data_dir", "no_such_folder"], "error: --data_dir 'no_such_folder' is not a directory"),
    ("run_count_tokens.py", ["--data_dir", "no_such_folder"], "error: --data_dir 'no_such_folder' is not a directory"),
    ("run_report.py", ["no_such_folder"], "error: 'no_such_folder' is not a readable folder"),
    ("run_view.py", ["no_such_folder"], "error: 'no_such_folder' is not a readable folder"),
    ("find_max_examples_given_max_window.py", ["--model_name", "smollm2-135m", "--task_name", "no_such_task"],
     "error: unknown task 'no_such_task'"),
]
# Runs the script as `python SCRIPT ARGS` would, then writes which of HEAVY it imported.
WATCH = """import atexit, json, os, runpy, sys
atexit.register(lambda: open(os.environ["LOADED_TO"], "w").write(json.dumps(
    [m for m in json.loads(os.environ["HEAVY"]) if m in sys.modules])))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def refuse(script: str, args: list, tmp_path) -> tuple[str, list]:
    """(stderr, the heavy modules it imported) of a run expected to exit 2."""
    loaded = tmp_path / "loaded.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "LOADED_TO": str(loaded), "HEAVY": json.dumps(HEAVY)}
    env.pop("ICRL_PLUGINS", None)
    done = subprocess.run([sys.executable, "-c", WATCH, str(REPO / script), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (script, done.stdout, done.stderr)
    return done.stderr, json.loads(loaded.read_text())


@pytest.mark.parametrize("script,args,line", REFUSALS, ids=[case[0] for case in REFUSALS])
def test_a_refusal_comes_before_the_heavy_libraries_load(script, args, line, tmp_path):
    err, loaded = refuse(script, args, tmp_path)
    assert len(err.strip().splitlines()) == 1 and err.startswith(line), err
    assert loaded == [], f"{script} imported {loaded} before refusing its arguments"
    assert list(tmp_path.iterdir()) == [tmp_path / "loaded.json"]  # nothing written


def test_every_script_has_a_refusal_here():
    assert sorted({case[0] for case in REFUSALS}) == sorted(SCRIPTS)
    assert sorted(p.name for p in REPO.glob("*.py")) == sorted(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_missing_plugin_is_refused_before_the_command_line_loads(script, tmp_path):
    err, loaded = refuse(script, ["--plugin", "no_such_plugin.py"], tmp_path)
    assert err.strip() == ("error: --plugin 'no_such_plugin.py': no such file or folder; give a .py file, a package "
                           "folder or an importable module name"), err
    assert loaded == []


def _imports(statements) -> list[str]:
    return [node.module for s in statements for node in ast.walk(s)
            if isinstance(node, ast.ImportFrom) and node.module]


@pytest.mark.parametrize("script", SCRIPTS)
def test_plugins_load_before_a_plain_import_of_the_scripts_main(script):
    """``with plugins.start(sys.argv[1:]):`` around ``from icrl.<its command line> import main``,
    and before it nothing of icrl's but icrl.infra (so icrl.config is built with the plugins'
    parameters); no "module:main" string hides the import."""
    tree = ast.parse((REPO / script).read_text())
    starts = [node for node in ast.walk(tree) if isinstance(node, ast.With)
              and ast.unparse(node.items[0].context_expr) == "plugins.start(sys.argv[1:])"]
    assert len(starts) == 1, script
    (start,) = starts
    mains = [node for node in ast.walk(start) if isinstance(node, ast.ImportFrom)
             and [a.name for a in node.names] == ["main"]]
    assert len(mains) == 1 and mains[0].module.startswith(("icrl.cli.", "icrl.sweep.")), script
    before = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
              and node.lineno < start.lineno]
    icrl = _imports(before) + [a.name for n in before if isinstance(n, ast.Import) for a in n.names]
    assert all(not m.startswith("icrl") or m == "icrl.infra" or m.startswith("icrl.infra.") for m in icrl), icrl
    assert ":main" not in (REPO / script).read_text()
