"""Each run's token counts, kept beside its records by run_count_tokens.py: ``token_counts.csv``
(a row per step and kind of call) and ``token_counts.json`` (the summary and the key it was
counted under, ``records.schema.TokenCounts``).

A count is reused while its key holds: the counter's version, the tokenizer (its name and a
fingerprint of its files) and the record files' sizes and times (``records_stamp``). The json
is read back checked against the schema (``read_counts``): one that is not JSON, not of its
type is no count (counted again, never a traceback), as is one whose records have changed
since; ``counted`` reuses a count only under the same key.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from ..records import CONFIG, TEST, TRAIN, DamagedRecords, read_json, write_csv_atomic, write_json_atomic
from ..records.schema import TokenCountKey, TokenCountSummary
from ..records.typed import check_mapping, hints

TOKEN_COUNTS_JSON = "token_counts.json"
TOKEN_COUNTS_CSV = "token_counts.csv"
COUNTER_VERSION = 3  # 2: processed_tokens (the published count), ICL runs' training steps;
# 3: approximate_only_positive's processed_tokens over the published counter's rebuilt contexts
CSV_COLUMNS = ["step", "kind", "calls", "prompt_tokens", "uncached_tokens", "processed_tokens",
               "cumulative_prompt_tokens", "cumulative_uncached_tokens", "cumulative_processed_tokens"]


def records_stamp(run_dir: Path) -> dict[str, object]:
    """Size and modification time of the record files: a count is valid while they are unchanged."""
    stamp: dict[str, object] = {}  # file name -> [size, mtime_ns], or None when there is none
    for name in (CONFIG, TRAIN, TEST):
        try:
            st = os.stat(Path(run_dir) / name)
            stamp[name] = [st.st_size, st.st_mtime_ns]
        except FileNotFoundError:
            stamp[name] = None
    return stamp


def cache_key(run_dir: Path, tokenizer_name: str, fingerprint: str, full_tokenization: bool) -> TokenCountKey:
    return {"version": COUNTER_VERSION, "tokenizer": {"name": tokenizer_name, "fingerprint": fingerprint},
            "full_tokenization": full_tokenization, "records": records_stamp(run_dir)}


def read_counts(run_dir: Path) -> Optional[dict[str, Any]]:
    """token_counts.json of a run, every field the schema names checked (the summary's
    ``<call>_calls`` counts too), of the records as they are now; None otherwise (see the module
    docstring)."""
    path = Path(run_dir) / TOKEN_COUNTS_JSON
    try:
        data = read_json(path) if path.is_file() else None
        if data is None:
            return None
        check_mapping(data, {"key": dict, "summary": dict}, str(path), required=("key", "summary"))
        key_types, summary_types = hints(TokenCountKey), hints(TokenCountSummary)
        check_mapping(data["key"], key_types, f"{path} key", required=key_types)
        check_mapping(data["summary"], summary_types, f"{path} summary", required=summary_types)
        calls = {name: int for name in data["summary"] if name.endswith("_calls")}
        check_mapping(data["summary"], calls, f"{path} summary")
    except (OSError, ValueError, DamagedRecords):
        return None
    if data["key"]["records"] != records_stamp(run_dir):
        return None  # counted before the run went on: stale
    return data


def counted(run_dir: Path, key: TokenCountKey) -> Optional[dict[str, Any]]:
    """The cached summary of a run when its key matches (and its CSV is there), else None."""
    data = read_counts(run_dir)
    if data is None or not (Path(run_dir) / TOKEN_COUNTS_CSV).is_file():
        return None
    cached = data["key"]
    same = {k: v for k, v in cached.items() if k != "full_tokenization"} == \
        {k: v for k, v in key.items() if k != "full_tokenization"}
    # a whole-prompt count also answers an incremental request (same numbers), not vice versa
    return data["summary"] if same and (cached["full_tokenization"] or not key["full_tokenization"]) else None


def write_counts(run_dir: Path, key: TokenCountKey, summary: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    write_csv_atomic(Path(run_dir) / TOKEN_COUNTS_CSV, CSV_COLUMNS, rows)
    write_json_atomic(Path(run_dir) / TOKEN_COUNTS_JSON, {"key": key, "summary": summary})


def count_columns(run_dir: Path) -> dict[str, Any]:
    """A run's results columns from its token counts (processed, prompt and uncached tokens, the
    tokenizer), None each where it has no current count."""
    data = read_counts(run_dir)
    if data is None:
        return {"processed_tokens": None, "prompt_tokens": None, "uncached_tokens": None, "tokenizer": None}
    summary = data["summary"]
    return {"processed_tokens": summary["processed_tokens"], "prompt_tokens": summary["prompt_tokens"],
            "uncached_tokens": summary["uncached_tokens"], "tokenizer": data["key"]["tokenizer"]["name"]}
