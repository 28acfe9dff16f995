"""What config.json records of the plugins a run uses, and the check on resume."""

from __future__ import annotations

import json

import pytest

from icrl.cli import parse_args
from icrl.errors import UsageError
from icrl.infra import plugins as loader
from icrl.method.rewards import REWARDS
from icrl.method.strategies import STRATEGIES
from icrl.run import plugins

RUN = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
       "--training_seed", "1", "--test_seed", "1", "--max_context_examples", "4", "--backend", "fake"]
MINE = loader.Plugin("mine", "/x/mine", "c" * 64)


def test_a_run_of_builtin_parts_records_nothing():
    assert plugins.record(parse_args(RUN)) == {}


def test_a_run_records_the_plugins_of_the_parts_it_chooses(monkeypatch):
    monkeypatch.setitem(STRATEGIES._owners, "random_unbiased", MINE)
    monkeypatch.setitem(REWARDS._owners, "coarse_credit", loader.Plugin("other", "/x/other.py", "d" * 64))
    assert plugins.record(parse_args(RUN)) == {"plugins": [{"module": "mine", "sha256": "c" * 64}]}
    assert plugins.record(parse_args([*RUN, "--reward", "coarse_credit"]))["plugins"] == \
        [{"module": "mine", "sha256": "c" * 64}, {"module": "other", "sha256": "d" * 64}]


def test_resume_needs_the_recorded_plugins(monkeypatch, tmp_path):
    from helpers import run_config
    from icrl.records.configfile import ConfigFile

    plugins.check_loaded(ConfigFile.parse(run_config(2), "config.json"), tmp_path)  # made without plugins
    made_with = ConfigFile.parse({**run_config(2), "plugins": [MINE.record()]}, "config.json")
    with pytest.raises(UsageError, match="made with plugin mine, which is not loaded"):
        plugins.check_loaded(made_with, tmp_path)
    monkeypatch.setattr(loader, "_loaded", {MINE.source: MINE})
    plugins.check_loaded(made_with, tmp_path)


def test_the_plugins_of_recorded_runs_that_are_not_loaded(monkeypatch, tmp_path):
    for name, plugins_entry in (("a", [MINE.record()]), ("b", [{"module": "other", "sha256": "d" * 64}]), ("c", None)):
        (tmp_path / name).mkdir()
        record = {"args": {}, **({"plugins": plugins_entry} if plugins_entry else {})}
        (tmp_path / name / "config.json").write_text(json.dumps(record))
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "config.json").write_text("not json")  # said where that run is read, not here
    assert plugins.missing_under(tmp_path) == ["mine", "other"]
    monkeypatch.setattr(loader, "_loaded", {MINE.source: MINE})
    assert plugins.missing_under(tmp_path) == ["other"]
    assert plugins.missing_under(tmp_path / "nowhere") == []
