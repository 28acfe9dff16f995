"""The evidence table (docs/evidence.md): every method of a data folder on the same stream.

    python bench/methods_table.py DATA_DIR

For each task and method (zero-shot, an ICRL strategy with its flags, supervised ICL, a learner
with its features): the finished runs' final test accuracy, its mean over seeds with a Student-t
95% interval (``icrl.analysis.stats.seed_summary``), the per-seed values, the mean seconds per
training step (the records' ``time_s``, model call included; meaningful when the runs ran one at
a time, ``--max_parallel 1``) and the mean wall seconds per run. Unfinished runs are counted
apart. The sweeps that make such a folder are bench/methods/*.toml.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from icrl.analysis.stats import seed_summary  # noqa: E402


def method_of(args: dict) -> str:
    if args.get("agent", "llm") != "llm":
        return f"{args['agent']} ({args['features']})"
    if args.get("max_context_examples") == 0:
        return "zero-shot"
    shown = f", {args['max_context_examples']} in context" if args.get("max_context_examples") else ""
    if not args["icrl"]:
        return f"supervised ICL ({args['context_strategy_name']}{shown})"
    extra = f", epsilon {args['p_exploration']}" if args.get("p_exploration") else ""
    return f"{args['context_strategy_name']} p_keep {args['context_p_keep']}{extra}{shown}"


def main(root: Path) -> int:
    done, unfinished = defaultdict(list), defaultdict(int)
    for config in sorted(root.rglob("config.json")):
        run = config.parent
        args = json.loads(config.read_text())["args"]
        key = (args["task_name"], method_of(args))
        results = run / "results.json"
        summary = json.loads(results.read_text()) if results.is_file() else {}
        if not summary.get("finished"):
            unfinished[key] += 1
            continue
        train = run / "train.jsonl"
        times = [json.loads(line)["time_s"] for line in train.read_text().splitlines()] if train.is_file() else []
        done[key].append((args["seed"], summary["final_test_accuracy"], sum(times) / len(times) if times else None,
                          summary.get("total_time_s")))
    print("| task | method | final test accuracy: mean [95% t] (n) | per seed | s per training step | s per run |")
    print("| --- | --- | --- | --- | --- | --- |")
    for key in sorted(set(done) | set(unfinished)):
        runs = sorted(done.get(key, []))
        accuracy = seed_summary([r[1] for r in runs]).text() if runs else "-"
        steps = [r[2] for r in runs if r[2] is not None]
        walls = [r[3] for r in runs if r[3] is not None]
        note = f" ({unfinished[key]} unfinished)" if unfinished.get(key) else ""
        per_seed = ", ".join(f"{r[1]:.2f}" for r in runs) or "-"
        step = f"{sum(steps) / len(steps):.4f}" if steps else "-"
        wall = f"{sum(walls) / len(walls):.0f}" if walls else "-"
        print(f"| {key[0]} | {key[1]}{note} | {accuracy} | {per_seed} | {step} | {wall} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or not Path(sys.argv[1]).is_dir():
        print("usage: python bench/methods_table.py DATA_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
