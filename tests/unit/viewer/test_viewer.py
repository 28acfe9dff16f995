"""What the episode viewer's page (icrl/viewer/viewer.js) draws, rendered under node with
tests/dom.js: a zero-shot run's test accuracy is a reference line on the test accuracy chart
only (never on the charts of training steps), and the charts of windows say their windows are
of several steps, or why a run is one window."""

from __future__ import annotations

import pytest

from helpers import TOY, elements, render_page_script
from icrl.cli.run import main as run
from icrl.viewer.data import viewer_data

EXPLORATIVE = ["--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.1", "--icrl",
               "--max_context_examples", "4", "--test_every", "10"]


def charts(data_dir, tmp_path) -> dict:
    tree = render_page_script("viewer", "viewer-data", viewer_data(data_dir), tmp_path)
    return {c["children"][0]["text"]: c for c in elements(tree, lambda e: e["class"] == "chart")}


@pytest.mark.parametrize("steps, windows", [(30, "windows of 5 steps"),
                                            (3, "one window a run: runs of under 5 steps are too short for "
                                                "windows of 5")])
def test_training_charts_have_no_zero_shot_line_and_say_their_windows(tmp_path, steps, windows):
    out = tmp_path / "runs"
    common = [*TOY, "--test_k", "12", "--output_dir", str(out)]
    assert run([*common, "--max_context_examples", "0", "--icrl"]) == 0
    assert run([*common, *EXPLORATIVE, "--train_k", str(steps)]) == 0
    shown = charts(out, tmp_path)
    reference = lambda e: e["tag"] == "polyline" and "reference" in e["class"]  # noqa: E731
    assert elements(shown["test accuracy"], reference)  # zero-shot: a line across the test accuracy chart
    for title in (f"training accuracy ({windows})", f"reward rate ({windows})"):
        assert not elements(shown[title], reference), title


def test_a_summary_runs_step_panel_shows_the_summary_the_model_saw(tmp_path):
    from icrl.viewer.data import decode_preambles

    out = tmp_path / "runs"
    assert run([*TOY, "--icrl", "--train_k", "8", "--test_every", "4", "--test_k", "4", "--context_strategy_name",
                "summary", "--output_dir", str(out)]) == 0
    data = viewer_data(out)
    texts = decode_preambles(data["runs"][0]["train"]["preamble"], data["strings"])
    for step in (0, 5):
        tree = render_page_script("viewer", "viewer-data", data, tmp_path,
                                  actions=[{"id": "step-input", "value": str(step), "event": "change"}])
        (panel,) = elements(tree, lambda e: e["class"] == "preamble")
        assert panel["children"][1]["text"] == texts[step]
        assert f"Step {step} of 8" in tree["text"]
        assert "no episodes: the text above is all the context" in tree["text"] and "empty context" not in tree["text"]
    assert texts[5].startswith("Your answers so far (label: times you gave it, times it was rewarded):\n- ")
