"""Each run's token counts kept beside its records (icrl.analysis.token_cache): what the counter
writes reads back as the schema's type, and a damaged or stale token_counts.json is no count
(counted again; the results columns empty), never a traceback."""

from __future__ import annotations

import json
import os

import pytest

from helpers import TOY, typed_run
from icrl.analysis.counting import Replay, _count
from icrl.analysis.prefixes import FakeEncoder
from icrl.analysis.token_cache import cache_key, count_columns, counted, read_counts, write_counts
from icrl.backends.fake import FakeChat
from icrl.cli.run import main

RUN = [*TOY, "--icrl", "--max_context_examples", "3", "--train_k", "8", "--test_every", "4", "--test_k", "4",
       "--context_strategy_name", "random_unbiased", "--reasoning", "6", "--reward", "judge"]


@pytest.fixture
def counted_run(tmp_path):
    """A judged run with reasoning, counted with the fake chat: (its folder, the cache key)."""
    assert main([*RUN, "--output_dir", str(tmp_path)]) == 0
    run_dir = next(tmp_path.rglob("config.json")).parent
    replay = Replay(*typed_run(run_dir), FakeChat())
    summary, rows = _count(replay, FakeEncoder(FakeChat()), 0, 256, 0.0)
    key = cache_key(run_dir, "fake", "0" * 16, False)
    write_counts(run_dir, key, summary, rows)
    return run_dir, key


def test_what_the_counter_writes_reads_back_as_its_type(counted_run):
    """... and the schema names every field it writes (a call's count by its suffix)."""
    from icrl.records.schema import TokenCountKey, TokenCountSummary

    run_dir, key = counted_run
    data = read_counts(run_dir)
    assert data is not None and set(data["key"]) == set(TokenCountKey.__annotations__)
    assert {k for k in data["summary"] if not k.endswith("_calls")} | {"calls", "train_calls", "test_calls",
                                                                       "icl_train_calls"} == \
        set(TokenCountSummary.__annotations__)
    assert data is not None and data["summary"]["judge_calls"] == 8 and data["summary"]["train_reasoning_tokens"] > 0
    assert counted(run_dir, key) == data["summary"]
    assert count_columns(run_dir)["prompt_tokens"] == data["summary"]["prompt_tokens"] > 0
    assert counted(run_dir, {**key, "tokenizer": {"name": "other", "fingerprint": "1" * 16}}) is None


@pytest.mark.parametrize("damage", [
    lambda d: "{not json",
    lambda d: [d],
    lambda d: {**d, "summary": {**d["summary"], "calls": "many"}},
    lambda d: {**d, "summary": {**d["summary"], "judge_calls": "8"}},
    lambda d: {**d, "summary": {k: v for k, v in d["summary"].items() if k != "processed_tokens"}},
    lambda d: {**d, "key": {**d["key"], "tokenizer": "fake"}},
    lambda d: {"key": d["key"]},
], ids=["not_json", "a_list", "a_count_as_text", "a_call_count_as_text", "a_field_missing", "a_key_of_another_type",
        "no_summary"])
def test_a_damaged_cache_is_no_count(counted_run, damage):
    run_dir, key = counted_run
    path = run_dir / "token_counts.json"
    changed = damage(json.loads(path.read_text()))
    path.write_text(changed if isinstance(changed, str) else json.dumps(changed))
    assert read_counts(run_dir) is None and counted(run_dir, key) is None
    assert set(count_columns(run_dir).values()) == {None}


def test_a_count_of_records_that_changed_since_is_stale(counted_run):
    run_dir, key = counted_run
    stat = os.stat(run_dir / "test.jsonl")
    os.utime(run_dir / "test.jsonl", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert read_counts(run_dir) is None and counted(run_dir, key) is None
