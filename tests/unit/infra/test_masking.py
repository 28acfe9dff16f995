"""Secrets never reach a file or the terminal (icrl.infra.masking): the values of the secret flags
in every spelling argparse accepts, remembered secrets wherever they appear, and the user info of
URLs."""

from __future__ import annotations

import logging

import pytest

from icrl.infra import masking


@pytest.fixture(autouse=True)
def forget(monkeypatch):
    monkeypatch.setattr(masking, "_secrets", set())


@pytest.mark.parametrize("words", [["--api_key", "sk-abcdef"], ["--api_key=sk-abcdef"], ["--api_k", "sk-abcdef"],
                                   ["--hf_tok=sk-abcdef"]])
def test_every_spelling_of_a_secret_flag_is_masked(words):
    masked = masking.mask_words(["run_experiment.py", "--seed", "1", *words])
    assert "sk-abcdef" not in " ".join(masked) and masked[:3] == ["run_experiment.py", "--seed", "1"]
    assert any("***" in w for w in masked)


def test_another_flag_that_shares_a_prefix_is_not_a_secret():
    assert not masking.is_secret_option("--api_model", all_options=["--api_model", "--api_key"])
    assert masking.is_secret_option("--api", all_options=["--api_model", "--api_key"])  # ambiguous: masked


def test_remembered_secrets_are_scrubbed_from_any_value():
    masking.register_args({"api_key": "sk-remembered", "hf_token": None,
                           "base_url": "http://user:pa55word@127.0.0.1:8000/v1"})
    record = {"log": ["said sk-remembered", {"url": "http://user:pa55word@127.0.0.1:8000/v1"}], "n": 3}
    assert masking.scrub(record) == {"log": ["said ***", {"url": "http://127.0.0.1:8000/v1"}], "n": 3}
    assert masking.strip_userinfo("https://u:p@host/v1") == "https://host/v1"
    masking.register("abc")  # too short to search for: ordinary words stay
    assert masking.scrub("abc") == "abc"


def test_log_lines_are_scrubbed():
    masking.register("sk-in-a-log-line")
    record = logging.LogRecord("icrl", logging.INFO, __file__, 1, "key %s", ("sk-in-a-log-line",), None)
    assert masking.ScrubFilter().filter(record) and "sk-in-a-log-line" not in record.getMessage()
