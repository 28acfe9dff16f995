"""The evidence tables (docs/evidence.md): every method of a data folder on the same stream.

    python bench/methods_table.py DATA_DIR [--failures]

For each task and method (zero-shot, an ICRL strategy with its flags, supervised ICL, a learner
with its features): the finished runs' final test accuracy, its mean over seeds with a 95%
interval inside [0, 1] (``icrl.analysis.stats.accuracy_summary``), the per-seed values, the mean seconds per
training step (the records' ``time_s``, model call included; meaningful when the runs ran one at
a time, ``--max_parallel 1``) and the mean wall seconds per run. Unfinished runs are counted
apart. With ``--failures``, also the mean training accuracy, the failure metrics of
``icrl.analysis.failures`` (labels never predicted, seeds collapsing early, knowing-doing gap)
and what else the method records: the reward's noise with --reward judge (the share of training
steps whose judged reward differs from the gold one), the mean reasoning tokens a call with
--reasoning, the episodes curated retrieval pruned. The sweeps that make such a folder are
bench/methods/*.toml.
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from icrl.analysis.failures import run_failures  # noqa: E402
from icrl.analysis.stats import accuracy_summary  # noqa: E402
from icrl.records import find_runs  # noqa: E402
from icrl.records.schema import TrainLine  # noqa: E402


def typed(train: list, path: Path) -> list:
    """The training lines as the failure metrics read them (records.schema.TrainLine)."""
    return [TrainLine.from_json(record, f"{path} line {number}") for number, record in enumerate(train, 1)]


def method_of(args: dict) -> str:
    if args.get("agent", "llm") != "llm":
        return f"{args['agent']} ({args['features']})"
    if args.get("max_context_examples") == 0:
        return "zero-shot"
    shown = f", {args['max_context_examples']} in context" if args.get("max_context_examples") else ""
    if not args["icrl"]:
        return f"supervised ICL ({args['context_strategy_name']}{shown})"
    if str(args.get("context_strategy_name")).startswith("summary"):  # its context size is --summary_episodes
        shown = f", {args.get('summary_episodes') or 0} episodes after the summary"
    extra = f", epsilon {args['p_exploration']}" if args.get("p_exploration") else ""
    extra += f", reasoning {args['reasoning']}" if args.get("reasoning") else ""
    extra += ", self-rewarded" if args.get("reward") == "judge" and not args.get("judge_model") else ""
    extra += f", judged by {args['judge_model']}" if args.get("judge_model") else ""
    extra += f", guide every {args['reflect_every']}" if args.get("context_strategy_name") == "reflection" else ""
    return f"{args['context_strategy_name']} p_keep {args['context_p_keep']}{extra}{shown}"


def _mean(values) -> float:
    values = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(values) / len(values) if values else math.nan


def beside(train: list) -> dict:
    """What a run records beyond the paper's fields, summed up."""
    judged = [r for r in train if r.get("judge") is not None]
    reasoned = [r["reasoning_tokens"] for r in train if r.get("reasoning_tokens") is not None]
    return {"noise": _mean([float(r["reward"] != r["accuracy"]) for r in judged]) if judged else None,
            "judge_yes": _mean([float(r["judge"] == "yes") for r in judged]) if judged else None,
            "reasoning_tokens": _mean(reasoned) if reasoned else None,
            "pruned": sum(len(r["metrics"].get("pruned") or []) for r in train)
            if any("pruned" in (r.get("metrics") or {}) for r in train) else None}


def _fmt(x, digits=2) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def main(root: Path, failures: bool = False) -> int:
    done, unfinished = defaultdict(list), defaultdict(int)
    for run in find_runs(root):  # a model's config.json under the folder is no run
        config = json.loads((run / "config.json").read_text())
        args = config["args"]
        key = (args["task_name"], method_of(args))
        results = run / "results.json"
        summary = json.loads(results.read_text()) if results.is_file() else {}
        if not summary.get("finished"):
            unfinished[key] += 1
            continue
        path = run / "train.jsonl"
        train = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
        times = [r["time_s"] for r in train]
        labels = config["dataset"]["labels"]
        done[key].append({"seed": args["seed"], "accuracy": summary["final_test_accuracy"],
                          "items": len((config.get("test_set") or {}).get("ids") or []) or None,
                          "step_s": sum(times) / len(times) if times else None, "wall": summary.get("total_time_s"),
                          "train_accuracy": summary.get("train_accuracy"),
                          **(run_failures(typed(train, path), labels) if train else {}), **beside(train)})
    head = "| task | method | final test accuracy: mean [95%] (n) | per seed | s per training step | s per run |"
    rule = "| --- | --- | --- | --- | --- | --- |"
    if failures:
        head += " train accuracy | labels never predicted | seeds collapsing early | knowing-doing gap | also |"
        rule += " --- | --- | --- | --- | --- |"
    print(head)
    print(rule)
    for key in sorted(set(done) | set(unfinished)):
        runs = sorted(done.get(key, []), key=lambda r: r["seed"])
        items = {r["items"] for r in runs}  # one test set size, or no interval
        accuracy = accuracy_summary([r["accuracy"] for r in runs], items.pop() if len(items) == 1 else None).text() \
            if runs else "-"
        steps = [r["step_s"] for r in runs if r["step_s"] is not None]
        walls = [r["wall"] for r in runs if r["wall"] is not None]
        note = f" ({unfinished[key]} unfinished)" if unfinished.get(key) else ""
        per_seed = ", ".join(f"{r['accuracy']:.2f}" for r in runs) or "-"
        step = f"{sum(steps) / len(steps):.4f}" if steps else "-"
        wall = f"{sum(walls) / len(walls):.0f}" if walls else "-"
        line = f"| {key[0]} | {key[1]}{note} | {accuracy} | {per_seed} | {step} | {wall} |"
        if failures:
            collapsed = [r.get("early_collapse") for r in runs if r.get("early_collapse") is not None
                         and not math.isnan(r["early_collapse"])]
            also = []
            if any(r["noise"] is not None for r in runs):
                also.append(f"judged reward differs from gold on {_mean([r['noise'] for r in runs]):.0%} of "
                            f"steps (judge says yes on {_mean([r['judge_yes'] for r in runs]):.0%})")
            if any(r["reasoning_tokens"] is not None for r in runs):
                also.append(f"{_mean([r['reasoning_tokens'] for r in runs]):.1f} reasoning tokens a training call")
            if any(r["pruned"] is not None for r in runs):
                also.append(f"{_mean([r['pruned'] for r in runs]):.0f} episodes pruned a run")
            line += (f" {_fmt(_mean([r.get('train_accuracy') for r in runs]))} |"
                     f" {_fmt(_mean([r.get('greediness') for r in runs]))} |"
                     f" {f'{int(sum(collapsed))} of {len(collapsed)}' if collapsed else '-'} |"
                     f" {_fmt(_mean([r.get('knowing_doing_gap') for r in runs]))} | {'; '.join(also) or '-'} |")
        print(line)
    return 0


if __name__ == "__main__":
    argv = sys.argv[1:]
    more = "--failures" in argv
    argv = [a for a in argv if a != "--failures"]
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: python bench/methods_table.py DATA_DIR [--failures]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(argv[0]), more))
