"""The token table (icrl/analysis/tokens.py): the calls beside the classifier's, named as their
declarations name them, are reported under the run's row."""

from __future__ import annotations

import pandas as pd

from icrl.analysis.tokens import format_table


def _row(run, judge_calls, reflection_calls):
    return {"model": "m", "task": "t", "run": run, "method": "explorative", "steps": 10, "processed_tokens": 100,
            "calls": 20, "train_prompt_tokens": 80, "test_prompt_tokens": 40, "uncached_tokens": 60,
            "cached_pct": 50.0, "vs_explorative": 1.0, "reasoning_tokens": 0, "judge_calls": judge_calls,
            "reflection_calls": reflection_calls}


def test_the_other_calls_of_a_run_are_named_under_its_row():
    table = pd.DataFrame([_row("judged", 14, 3), _row("plain", 0, 0)])
    text = format_table(table)
    assert "judged: also 14 judge calls and 3 guides written (other prompts, not counted above)" in text
    assert "plain: also" not in text
