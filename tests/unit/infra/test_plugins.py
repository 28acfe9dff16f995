"""The plugin loader: where plugins are asked for, their source hash, the records' check, and
every bad plugin refused in one line, exit 2, nothing written (through run_experiment.py and the
other scripts, which load plugins before they build their parsers)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, TOY
from icrl.errors import UsageError
from icrl.infra import plugins

EXAMPLE = REPO / "tests" / "data" / "plugins" / "icrl_example_plugin"
RUN = [*TOY, "--icrl", "--max_context_examples", "3", "--train_k", "6", "--test_every", "3", "--test_k", "4",
       "--context_strategy_name", "random_unbiased"]


def script(name: str, *argv, env: dict = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != plugins.ENV}
    environment.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **(env or {})})
    return subprocess.run([sys.executable, str(REPO / name), *map(str, argv)], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=300)


def refused(done: subprocess.CompletedProcess) -> str:
    """The one error line of a refusal (exit 2, no traceback)."""
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in done.stderr, done.stderr
    return lines[0][len("error: "):]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


STRATEGY = '''from icrl.plugin import Strategy, register_strategy


@register_strategy
class Mine(Strategy):
    name = "{name}"
    family = "mine"
    filters = ("",)
    params = ({params})

    def select(self, history, rng, query=None):
        return []
'''


def test_where_plugins_are_asked_for(monkeypatch):
    assert plugins.from_argv(["--plugin", "a.py", "--x", "1", "--plugin=b", "--", "--plugin", "c"]) == \
        [("--plugin", "a.py"), ("--plugin", "b"), ("--plugin", "c")]
    assert plugins.from_environment({"ICRL_PLUGINS": "a.py::pkg:"}) == \
        [("ICRL_PLUGINS", "a.py"), ("ICRL_PLUGINS", "pkg")]
    with pytest.raises(UsageError, match="--plugin needs a file, package folder or module name"):
        plugins.from_argv(["--icrl", "--plugin"])
    monkeypatch.setattr(plugins, "from_entry_points", lambda: [("the entry point x", "x")])
    assert plugins.requested(["--plugin", "a.py"], {"ICRL_PLUGINS": "b.py"}) == \
        [("--plugin", "a.py"), ("ICRL_PLUGINS", "b.py"), ("the entry point x", "x")]


def test_a_plugins_hash_is_of_its_whole_source(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    write(package / "__init__.py", "from . import part\n")
    write(package / "part.py", "X = 1\n")
    before = plugins.source_hash(package, package=True)
    assert plugins.locate(str(package)) == ("pkg", package.resolve(), True, True)
    write(package / "part.py", "X = 2\n")
    assert plugins.source_hash(package, package=True) != before  # a change in any of its modules
    single = write(tmp_path / "one.py", "X = 1\n")
    assert plugins.locate(str(single)) == ("one", single.resolve(), False, True)
    import hashlib
    assert plugins.source_hash(single, package=False) == hashlib.sha256(b"X = 1\n").hexdigest()


def test_records_made_with_a_plugin_need_it(monkeypatch):
    plugin = plugins.Plugin("mine", "/x/mine.py", "a" * 64)
    monkeypatch.setattr(plugins, "_loaded", {plugin.source: plugin})
    plugins.check_recorded(None, "run")  # made without plugins
    plugins.check_recorded([("mine", "a" * 64)], "run")
    with pytest.raises(UsageError, match=r"^run was made with plugin other, which is not loaded: give it with "
                                         r"--plugin \(or ICRL_PLUGINS\)$"):
        plugins.check_recorded([("other", "b" * 64)], "run")
    with pytest.raises(UsageError, match=r"plugin mine \(/x/mine.py\) as it was before it changed \(sha256 "
                                         r"bbbbbbbbbbbb then, aaaaaaaaaaaa now\)"):
        plugins.check_recorded([("mine", "b" * 64)], "run")
    assert plugins.record_of([None, plugin, plugin]) == [{"module": "mine", "sha256": "a" * 64}]


def test_bad_paths_and_modules_are_one_line(tmp_path):
    out = tmp_path / "out"
    assert refused(script("run_experiment.py", "--plugin", tmp_path / "nope.py", *RUN, "--output_dir", out)) == \
        f"--plugin '{tmp_path / 'nope.py'}': no such file or folder; give a .py file, a package folder or an " \
        f"importable module name"
    assert refused(script("run_experiment.py", *RUN, "--output_dir", out, env={"ICRL_PLUGINS": "no_such_plugin_mod"})) \
        == "ICRL_PLUGINS 'no_such_plugin_mod': neither a file nor an importable module (no such module)"
    (tmp_path / "folder").mkdir()
    assert "a folder without __init__.py is no package" in refused(
        script("run_sweep.py", "--plugin", tmp_path / "folder", "--dry_run", *RUN, "--output_dir", out))
    assert not out.exists()


def test_broken_plugins_are_named_in_one_line(tmp_path):
    out = tmp_path / "out"
    syntax = write(tmp_path / "broken.py", "def f(:\n")
    assert refused(script("run_experiment.py", "--plugin", syntax, *RUN, "--output_dir", out)) == \
        f"plugin broken ({syntax}): syntax error in {syntax} line 1: invalid syntax"
    missing = write(tmp_path / "needs.py", "import no_such_dependency_here\n")
    assert refused(script("run_draw_plots.py", "--plugin", missing, "--out_dir", out)) == \
        f"plugin needs ({missing}): cannot import it: ModuleNotFoundError: No module named 'no_such_dependency_here'"
    nothing = write(tmp_path / "idle.py", "import icrl.plugin\n")
    assert refused(script("run_report.py", out, "--plugin", nothing)) == \
        f"plugin idle ({nothing}) registers nothing: a plugin registers a strategy, reward, figure or backend " \
        f"through icrl.plugin (docs/development.md, Plugins)"
    shadow = write(tmp_path / "json.py", STRATEGY.format(name="shadow", params=""))
    assert refused(script("run_view.py", out, "--plugin", shadow)).startswith(
        f"plugin json ({shadow}): a module named json exists already (")
    assert not out.exists()


def test_a_name_taken_is_refused_naming_both(tmp_path):
    out = tmp_path / "out"
    builtin = write(tmp_path / "mine.py", STRATEGY.format(name="random_unbiased", params=""))
    assert refused(script("run_experiment.py", "--plugin", builtin, *RUN, "--output_dir", out)) == \
        f"the context strategy 'random_unbiased' is registered already by icrl (built in); plugin mine ({builtin}) " \
        f"registers it again: rename it in the plugin"
    figure = write(tmp_path / "figs.py", "from icrl.plugin import register_figure\n\n\n"
                                         "@register_figure('context_size')\ndef draw(ctx):\n    return 'nothing'\n")
    assert refused(script("run_draw_plots.py", "--plugin", EXAMPLE, "--plugin", figure, "--out_dir", out)) == \
        f"the figure 'context_size' is registered already by plugin icrl_example_plugin ({EXAMPLE}); plugin figs " \
        f"({figure}) registers it again: rename it in one of them"
    regret = write(tmp_path / "regret.py", "from icrl.plugin import register_figure\n\n\n"
                                           "@register_figure('regret')\ndef draw(ctx):\n    return 'nothing'\n")
    assert "the figure 'regret' is registered already by icrl (built in)" in refused(
        script("run_count_tokens.py", "--plugin", regret, "--data_dir", out))
    assert not out.exists()


def test_a_parameter_taking_a_flag_is_refused_naming_both(tmp_path):
    out = tmp_path / "out"
    flag = write(tmp_path / "hot.py", STRATEGY.format(name="hot", params='Param("temperature", 2.0, "t"),')
                 .replace("import Strategy", "import Param, Strategy"))
    assert refused(script("run_experiment.py", "--plugin", flag, *RUN, "--output_dir", out)) == \
        f"--temperature, a parameter of the context strategy 'hot' of plugin hot ({flag}), is a flag of icrl " \
        f"already: rename it"
    twice = write(tmp_path / "twice.py", STRATEGY.format(name="twice", params='Param("every", 5, "e", type=int),')
                  .replace("import Strategy", "import Param, Strategy"))
    assert refused(script("find_max_examples_given_max_window.py", "--plugin", EXAMPLE, "--plugin", twice)) == \
        f"--every is declared twice, by the context strategy 'every_other' of plugin icrl_example_plugin " \
        f"({EXAMPLE}) and by the context strategy 'twice' of plugin twice ({twice}): rename one"
    assert not out.exists()


def test_a_plugin_that_exits_or_interrupts_itself_on_import_is_one_line(tmp_path):
    out = tmp_path / "out"
    exits = write(tmp_path / "exits.py", "import sys\n\nsys.exit(0)\n")
    assert refused(script("run_experiment.py", "--plugin", exits, *RUN, "--output_dir", out)) == \
        f"plugin exits ({exits}): cannot import it: SystemExit(0): a plugin must not end the process"
    assert refused(script("run_draw_plots.py", "--out_dir", out, env={"ICRL_PLUGINS": str(exits)})) == \
        f"plugin exits ({exits}): cannot import it: SystemExit(0): a plugin must not end the process"
    interrupts = write(tmp_path / "interrupts.py", "raise KeyboardInterrupt\n")
    for name, argv in (("run_experiment.py", [*RUN, "--output_dir", out]), ("run_report.py", [out])):
        assert refused(script(name, "--plugin", interrupts, *argv)) == \
            f"plugin interrupts ({interrupts}): cannot import it: KeyboardInterrupt, raised by the plugin itself " \
            f"(no Ctrl-C arrived)"
    assert not out.exists()
