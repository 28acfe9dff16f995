"""Where runs are found (icrl/records/layout.py): ``find_runs`` lists the folders holding a run's
records, and leaves out folders whose config.json is some other program's (a model's, copied
under the data folder by ``make gpu-assets``)."""

from __future__ import annotations

import json

from helpers import MODEL_CONFIG, gpu_assets
from icrl.records import find_runs
from icrl.records.layout import is_run_folder

def test_a_models_config_is_not_a_run(tmp_path):
    gpu_assets(tmp_path)
    run = tmp_path / "m" / "t" / "run"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"format_version": 1, "args": {}}))
    assert find_runs(tmp_path) == [run]


def test_a_folder_that_looks_like_a_damaged_run_is_still_found(tmp_path):
    """A run's folder with a config.json that is not JSON, or one of another shape beside its
    records, is a run: the readers report it as damaged rather than hide it."""
    broken, odd, bare = tmp_path / "broken", tmp_path / "odd", tmp_path / "bare"
    for folder in (broken, odd, bare):
        folder.mkdir()
    (broken / "config.json").write_text('{"format_version": 1, "ar')
    (odd / "config.json").write_text(json.dumps(MODEL_CONFIG))
    (odd / "train.jsonl").write_text("")
    (bare / "config.json").write_text(json.dumps(MODEL_CONFIG))
    assert [is_run_folder(f) for f in (broken, odd, bare)] == [True, True, False]
    assert find_runs(tmp_path) == [broken, odd]
