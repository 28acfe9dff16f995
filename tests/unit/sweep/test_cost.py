"""The dollars of run_sweep.py --estimate (icrl/sweep/cost.py): runs on a hosted API priced from
the price file at the cache the estimate assumes, said where a model has no price, and a bad
price file refused in one line before anything is printed."""

from __future__ import annotations

import pytest

from helpers import TOY_TASK, one_error_line
from icrl.backends.prices import Price, money
from icrl.sweep import estimate, runner
from icrl.sweep.cost import Pricing

# Runs on the OpenAI-compatible backend (a hosted API bills them; the estimate contacts no server),
# counted with smollm2's tokenizer, priced as --api_model.
HOSTED = ["--backend", "openai", "--model_name", "smollm2-135m", "--task_name", TOY_TASK, "--icrl",
          "--context_strategy_name", "random_unbiased", "--max_context_examples", "3", "--train_k", "6",
          "--test_every", "3", "--test_k", "5", "--seed", "1", "--training_seed", "1", "--test_seed", "1"]
PRICES = '[models."priced"]\ninput = 1000\ncached_input = 100\noutput = 2000\n'


def test_a_hosted_run_is_priced_at_the_assumed_cache_and_a_model_without_a_price_is_said(tmp_path, capsys):
    prices = tmp_path / "prices.toml"
    prices.write_text(PRICES + '[models."other"]\ninput = 1\ncached_input = 1\noutput = 1\n')
    argv = ["--grid", "api_model=priced,unknown", *HOSTED, "--output_dir", str(tmp_path / "out"), "--estimate"]
    assert runner.main([*argv, "--prices", str(prices)]) == 2  # the user's own file must price every hosted run
    assert "no price for 'unknown' in --prices" in one_error_line(capsys) and not capsys.readouterr().out
    assert runner.main(argv) == 0  # the default file: said, not guessed
    out = capsys.readouterr().out
    assert "(no price for 'unknown')" in out and "not priced: run(s) #1: no price for 'unknown'" in out
    assert "cache assumed: a test step's shared context served from the cache" in out

    prices.write_text(PRICES + '[models."unknown"]\ninput = 0\ncached_input = 0\noutput = 0\n')
    assert runner.main([*argv, "--prices", str(prices)]) == 0
    out = capsys.readouterr().out
    _, runs = runner.plan(argv)
    e = estimate.estimate_runs(runs, 0.5)[0]
    assert 0 < e.cached_prompt_tokens < e.test_prompt_tokens and e.output_tokens >= e.train_calls + e.test_calls
    dollars = Price(1000, 100, 2000).dollars(e.prompt_tokens, e.cached_prompt_tokens, e.output_tokens)
    row = next(line for line in out.splitlines() if line.lstrip().startswith("#0 ") and "$" in line)
    assert row.endswith(f"{money(dollars)} (undated price)") and f"dollars: {money(dollars)} for 2 runs on hosted " \
                                                                 f"models" in out
    assert f"with no cache at all: {money(Price(1000, 1000, 2000).dollars(e.prompt_tokens, 0, e.output_tokens))}" in out
    assert not (tmp_path / "out").exists()


def test_the_dollars_say_the_date_of_their_price_and_whether_it_is_confirmed(tmp_path, capsys):
    """The default file: a confirmed price (read on its provider's page on a date) and one that
    could not be confirmed, each said beside its run's dollars and, with its source, under the total."""
    argv = ["--grid", "api_model=claude-haiku-4-5,gpt-4o-mini", *HOSTED, "--output_dir", str(tmp_path / "out"),
            "--estimate"]
    assert runner.main(argv) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.lstrip().startswith(("#0 ", "#1 ")) and "$" in line]
    assert rows[0].endswith("(price of 2026-12-02)") and rows[1].endswith("(price of 2025-06-30, unconfirmed)"), rows
    assert "  price of claude-haiku-4-5: $1 / $0.1 / $5 per million input / cached input / output tokens, read " \
           "2026-12-02 from https://platform.claude.com/docs/en/docs/about-claude/pricing" in out
    assert "  price of gpt-4o-mini: $0.15 / $0.075 / $0.6 per million input / cached input / output tokens, as of " \
           "2025-06-30, not confirmed against https://platform.openai.com/docs/pricing: OpenAI's page could not be " \
           "read" in out


def test_local_runs_get_no_dollars(tmp_path, capsys):
    argv = [*HOSTED, "--backend", "fake", "--output_dir", str(tmp_path / "out"), "--estimate"]
    assert runner.main(argv) == 0
    out = capsys.readouterr().out
    table = out.split("token estimate", 1)[1]  # (the folders hold the test's name)
    assert "dollars" not in table and "$" not in table
    _, runs = runner.plan(argv)
    assert Pricing.of_runs(runs, None).model == {}


@pytest.mark.parametrize("text, said", [("[models\n", "is not TOML"),
                                        ('[models.m]\ninput = -2\ncached_input = 0\noutput = 0\n', "input = -2")])
def test_a_bad_price_file_is_one_line_before_anything_is_printed(tmp_path, capsys, text, said):
    prices = tmp_path / "prices.toml"
    prices.write_text(text)
    assert runner.main([*HOSTED, "--output_dir", str(tmp_path / "out"), "--prices", str(prices)]) == 2
    assert said in one_error_line(capsys) and not capsys.readouterr().out
