"""The price file (icrl/backends/prices.py): every price of the default names the provider's page
and the date it was read there (or says why it could not be confirmed), every model the docs name
has one, a model is found by its name or a dated version of it, and a bad file is one line."""

from __future__ import annotations

import datetime
import math
import re

import pytest

from helpers import REPO

from icrl.backends.prices import MAX_PRICE, Price, load_prices, money
from icrl.errors import UsageError

SOURCES = {"gpt-": "https://platform.openai.com/docs/pricing", "gemini-": "https://ai.google.dev/gemini-api/docs/pricing",
           "claude-": "https://platform.claude.com/docs/en/docs/about-claude/pricing"}


def documented_models() -> set:
    """The hosted models README.md and docs/*.md name (gpt-*, claude-*, gemini-* in lower case)."""
    names = set()
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = path.read_text(encoding="utf-8")
        names |= {m.rstrip(".-") for m in re.findall(r"\b(?:gpt-\d|claude-[a-z\d]|gemini-\d)[a-z\d.-]*", text)}
    return names


def test_every_price_names_its_page_and_a_date_and_the_unconfirmed_say_so():
    prices = load_prices()
    assert type(prices.date) is datetime.date and not prices.own and prices.date.isoformat() in prices.describe()
    for name, price in prices.models.items():
        assert all(math.isfinite(v) and 0 <= v <= MAX_PRICE for v in (price.input, price.cached_input, price.output))
        assert 0 < price.cached_input <= price.input < price.output, name
        assert type(price.date) is datetime.date and price.date <= prices.date, name
        prefix = next(p for p in SOURCES if name.startswith(p))
        assert price.source.startswith("https://"), name
        assert price.source == SOURCES[prefix] or name == "claude-3-5-sonnet", name
        assert price.dated() == f"price of {price.date}" + (", unconfirmed" if price.unconfirmed else ""), name
    confirmed = {name for name, price in prices.models.items() if not price.unconfirmed}
    assert confirmed == {"claude-haiku-4-5", "claude-3-5-haiku", "claude-sonnet-4", "claude-3-5-sonnet"}
    assert prices.of("claude-haiku-4-5") == Price(1.0, 0.1, 5.0, SOURCES["claude-"], datetime.date(2026, 12, 2))


def test_every_model_the_docs_name_has_a_price():
    named = documented_models()
    assert {"claude-haiku-4-5", "gpt-4o-mini", "gemini-1.5-flash-8b"} <= named
    assert sorted(name for name in named if load_prices().of(name) is None) == []


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
    assert money(math.inf) == "(too large to show)" and "inf" not in money(MAX_PRICE * 1e300)


def test_a_price_says_when_and_where_it_was_read():
    read = Price(1.0, 0.1, 5.0, "https://example.com/pricing", datetime.date(2026, 12, 2))
    assert read.said("m") == ("m: $1 / $0.1 / $5 per million input / cached input / output tokens, read 2026-12-02 "
                              "from https://example.com/pricing")
    doubt = Price(1.0, 0.1, 5.0, "https://example.com/pricing", datetime.date(2025, 6, 30), "not stored here")
    assert doubt.dated() == "price of 2025-06-30, unconfirmed"
    assert doubt.said("m").endswith("as of 2025-06-30, not confirmed against https://example.com/pricing: not stored "
                                    "here")
    assert Price(1, 1, 1).dated() == "undated price"


def test_the_users_file_is_read_and_says_what_to_add(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text('date = 2030-01-01\n[models."my-model"]\ninput = 1\ncached_input = 0.1\noutput = 2.5\n')
    prices = load_prices(str(path))
    assert prices.own and prices.of("org/my-model") == Price(1.0, 0.1, 2.5)
    assert prices.describe() == f"--prices {path} (2030-01-01)"
    assert prices.missing("other").endswith("add [models.other] to it")


PRICE = '[models."x"]\ninput = 1\ncached_input = 0\noutput = 1\n'


@pytest.mark.parametrize("text, said", [
    ("[models.x\ninput = 1", "is not TOML"),
    ('[models."x"]\ninput = -1\ncached_input = 0\noutput = 1\n', "input = -1; a price is a number of US dollars"),
    ('[models."x"]\ninput = "1"\ncached_input = 0\noutput = 1\n', "input = '1'; a price is a number"),
    ('[models."x"]\ninput = 1e308\ncached_input = 0\noutput = 1\n', "input = 1e+308; a price is a number of US dollars "
                                                                      "per million tokens, from 0 to 1,000,000"),
    ('[models."x"]\ninput = nan\ncached_input = 0\noutput = 1\n', "input = nan; a price is a number"),
    ('[models."x"]\ninput = 1\noutput = 1\n', "must give exactly input, cached_input, output"),
    ('[models."x"]\ninput = 1\ncached_input = 1\noutput = 1\nbatch = 0.5\n', "it gives input, cached_input, output, "
                                                                              "batch"),
    ('date = "2025"\n', "has no [models.NAME] table"),
    ("date = 12\n" + PRICE, "date = 12; give the date the price was read as a TOML date, e.g. date = 2026-12-02"),
    ('date = "2025-06-30"\n' + PRICE, "date = '2025-06-30'; give the date the price was read as a TOML date"),
    (PRICE + "date = 2025-06-30T10:00:00\n", "[models.x] date = datetime.datetime(2025, 6, 30, 10, 0); give the date"),
    (PRICE + "source = 5\n", "[models.x] source = 5; give it as text"),
    (PRICE + 'unconfirmed = ""\n', "[models.x] unconfirmed = ''; give it as text"),
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
