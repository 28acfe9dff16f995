"""What run_sweep.py prints after a preset's sweep (icrl.sweep.epilogue): the benchmark score is
read from records parsed through the schema, so a wrong field is refused in one line."""

from __future__ import annotations

import pytest

from helpers import BAD_FIELDS, corrupt_field, resume_verdict
from icrl.records import DamagedRecords
from icrl.sweep.epilogue import preset_epilogue


def test_a_sweep_of_another_preset_prints_nothing(finished):
    out, run_dir, _ = finished
    assert preset_epilogue("paper_main", [out], [run_dir]) == []


def test_the_benchmark_score_of_runs_without_the_suite_says_none(finished):
    out, run_dir, _ = finished
    lines = preset_epilogue("icrl_bench", [out], [run_dir])
    assert len(lines) == 1 and lines[0].startswith("benchmark score: none")


@pytest.mark.parametrize("name, line, field, value", BAD_FIELDS)
def test_the_benchmark_score_gets_the_resumes_verdict(finished, capsys, name, line, field, value):
    """Refused in the resume's line where a resume refuses the run, scored as read otherwise."""
    out, run_dir, _ = finished
    corrupt_field(run_dir, name, line, field, value)
    expected = resume_verdict(out, capsys)
    if expected is None:
        assert preset_epilogue("icrl_bench", [out], [run_dir])[0].startswith("benchmark score: none")
        return
    with pytest.raises(DamagedRecords) as caught:
        preset_epilogue("icrl_bench", [out], [run_dir])
    assert f"error: {caught.value}" == expected
