"""Reading a run's records in tests: what two runs must share (their timings aside)."""

from __future__ import annotations

import json
from pathlib import Path


def untimed_records(run_dir: Path, args: bool = False) -> dict:
    """train and test records less their timings (``time_s``); with ``args``, also config.json's args."""
    out = {}
    for name in ("train", "test"):
        lines = [json.loads(line) for line in (run_dir / f"{name}.jsonl").read_text().splitlines()]
        out[name] = [{k: v for k, v in r.items() if k != "time_s"} for r in lines]
    if args:
        out["args"] = json.loads((run_dir / "config.json").read_text())["args"]
    return out
