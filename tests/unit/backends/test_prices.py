"""The price file (icrl/backends/prices.py): the dated default names the models the docs name,
a model is found by its name or a dated version of it, and a bad file is one line."""

from __future__ import annotations

import pytest

from icrl.backends.prices import Price, load_prices, money
from icrl.errors import UsageError

DOCUMENTED = ("gpt-4o-mini", "gpt-4o", "gemini-1.5-flash", "gemini-1.5-flash-8b", "gemini-2.0-flash",
              "claude-3-5-haiku", "claude-sonnet-4")


def test_the_default_is_dated_and_prices_the_documented_models():
    prices = load_prices()
    assert prices.date and not prices.own and prices.date in prices.describe()
    for model in DOCUMENTED:
        price = prices.of(model)
        assert price is not None and 0 < price.cached_input <= price.input, model


def test_a_model_is_found_by_name_or_dated_version_never_guessed():
    prices = load_prices()
    assert prices.of("claude-3-5-haiku-20241022") == prices.of("claude-3-5-haiku")
    assert prices.of("models/gemini-1.5-flash-8b") != prices.of("gemini-1.5-flash")  # the longest name wins
    assert prices.of("gpt-4o-mini-2024-07-18") == prices.of("gpt-4o-mini") != prices.of("gpt-4o")
    assert prices.of("llama-3-8b") is None and prices.of("gpt-4") is None
    assert "give --prices FILE with [models.llama-3-8b]" in prices.missing("meta/llama-3-8b")


def test_dollars_bill_cached_tokens_at_the_cached_price():
    price = Price(input=2.0, cached_input=0.5, output=8.0)
    assert price.dollars(1_000_000, 400_000, 100_000) == pytest.approx(0.6 * 2 + 0.4 * 0.5 + 0.1 * 8)
    assert money(1234.5) == "$1,234.50" and money(0.0042) == "$0.0042" and money(0.00001) == "<$0.0001"


def test_the_users_file_is_read_and_says_what_to_add(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text('date = "2030-01-01"\n[models."my-model"]\ninput = 1\ncached_input = 0.1\noutput = 2.5\n')
    prices = load_prices(str(path))
    assert prices.own and prices.of("org/my-model") == Price(1.0, 0.1, 2.5)
    assert prices.missing("other").endswith("add [models.other] to it")


@pytest.mark.parametrize("text, said", [
    ("[models.x\ninput = 1", "is not TOML"),
    ('[models."x"]\ninput = -1\ncached_input = 0\noutput = 1\n', "input = -1; a price is a number of US dollars"),
    ('[models."x"]\ninput = "1"\ncached_input = 0\noutput = 1\n', "input = '1'; a price is a number"),
    ('[models."x"]\ninput = 1\noutput = 1\n', "must give exactly input, cached_input, output"),
    ('[models."x"]\ninput = 1\ncached_input = 1\noutput = 1\nbatch = 0.5\n', "it gives input, cached_input, output, batch"),
    ('date = "2025"\n', "has no [models.NAME] table"),
])
def test_a_bad_price_file_is_one_line_naming_it(tmp_path, text, said):
    path = tmp_path / "prices.toml"
    path.write_text(text)
    with pytest.raises(UsageError) as caught:
        load_prices(str(path))
    message = str(caught.value)
    assert message.startswith(f"--prices {path}") and said in message and "\n" not in message, message


def test_a_missing_price_file_is_one_line(tmp_path):
    with pytest.raises(UsageError, match="cannot read it"):
        load_prices(str(tmp_path / "none.toml"))
