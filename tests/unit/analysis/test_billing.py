"""What finished runs on hosted APIs used and cost (icrl/analysis/billing.py), as
run_count_tokens.py prints it: their recorded usage summed, priced from the price file, a model
without a price said, and the user's own file refused in one line when it misses a run's model."""

from __future__ import annotations

import json

import pytest

from helpers import TOY_TASK, files_under, one_error_line, register_metered_fake
from icrl.backends.prices import Price, money
from icrl.cli.run import main as run_main
from icrl.cli.tokens import main as count_main

RUN = ["--task_name", TOY_TASK, "--model_name", "smollm2-135m", "--icrl", "--context_strategy_name",
       "random_unbiased", "--max_context_examples", "3", "--train_k", "6", "--test_every", "3", "--test_k", "5",
       "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--no-progress"]


@pytest.fixture
def runs(tmp_path):
    """A finished run on the metered fake (an API that reports usage) and one on the fake."""
    undo = register_metered_fake()
    try:
        assert run_main([*RUN, "--backend", "metered_fake", "--output_dir", str(tmp_path / "data")]) == 0
    finally:
        undo()
    assert run_main([*RUN, "--backend", "fake", "--output_dir", str(tmp_path / "data")]) == 0
    return tmp_path / "data"


def test_finished_api_runs_show_their_recorded_usage_and_its_dollars(runs, tmp_path, capsys):
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."smollm2-135m"]\ninput = 100\ncached_input = 10\noutput = 400\n')
    assert count_main(["--data_dir", str(runs), "--prices", str(prices)]) == 0
    out = capsys.readouterr().out
    results = [json.loads(p.read_text()) for p in runs.rglob("results.json")]
    usage = next(r["usage"] for r in results if "usage" in r)
    assert sum("usage" in r for r in results) == 1  # the fake run records none
    table = out.split("usage recorded by the API", 1)[1].splitlines()
    rows = [line.split() for line in table if "smollm2-135m" in line and not line.startswith("price of")]
    assert len(rows) == 1
    dollars = Price(100, 10, 400).dollars(usage["prompt_tokens"], usage["cached_prompt_tokens"], usage["output_tokens"])
    assert rows[0][-7:] == [f"{usage[k]:,}" for k in ("requests", "prompt_tokens", "cached_prompt_tokens",
                                                       "output_tokens")] + [money(dollars), "(undated", "price)"]
    assert f"total {money(dollars)} for 1 of 1 runs on hosted APIs" in out
    assert "price of smollm2-135m: $100 / $10 / $400 per million input / cached input / output tokens, no date" in out


def test_a_model_without_a_price_is_said_in_the_default_and_refused_in_the_users_file(runs, tmp_path, capsys):
    assert count_main(["--data_dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "no price" in out and "not priced: no price for 'smollm2-135m' in the default price file" in out
    prices = tmp_path / "prices.toml"
    prices.write_text('[models."gpt-4o"]\ninput = 1\ncached_input = 1\noutput = 1\n')
    for path in runs.rglob("token_counts.*"):
        path.unlink()
    before = files_under(runs)
    assert count_main(["--data_dir", str(runs), "--prices", str(prices)]) == 2
    assert "no price for 'smollm2-135m' in --prices" in one_error_line(capsys)
    assert files_under(runs) == before  # nothing counted, nothing written


@pytest.mark.parametrize("backend, said", [
    ("metered", "config.json: field 'backend' is 'metered', expected an object"),
    ({"api_model": 7}, "config.json: field 'backend.api_model' is 7, expected text"),
])
def test_a_backend_record_of_the_wrong_type_is_one_line(runs, capsys, backend, said):
    """The model a run is billed for is read from config.json's backend section: checked as the
    readers check every section they read, before anything is counted."""
    path = next(p for p in runs.rglob("config.json") if "metered" in str(p))
    config = json.loads(path.read_text())
    config["backend"] = backend
    path.write_text(json.dumps(config))
    before = files_under(runs)
    assert count_main(["--data_dir", str(runs)]) == 2
    assert said in one_error_line(capsys)
    assert files_under(runs) == before
