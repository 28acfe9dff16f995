"""How long run_report.py takes on a study of many runs, and how soon its page is ready.

Writes ``--runs`` synthetic runs (records in the experiments' format, no model:
``icrl.analysis.synthetic``; configurations of 10 seeds each, ``--steps`` steps, tests every 50 on
40 items), then times ``run_report.py`` on them twice: with each run's episode viewer page
(the default) and without (``--no-viewers``); the CPU seconds of each are printed next to the
wall seconds and the machine's load, so figures from a busy machine can still be read.

    python bench/report.py [--runs 120] [--steps 200]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from prefix_reuse import machine_load  # noqa: E402

from icrl.analysis.synthetic import synthesize_run  # noqa: E402
from icrl.cli.report import main as report  # noqa: E402
from icrl.tasks import Example, Task  # noqa: E402

LABELS = ["apple", "banana", "cherry", "damson"]
STRATEGIES = ("random_biased_end", "random_unbiased_only_positive", "random_biased_end_only_positive")
P_KEEP = (0.1, 0.3, 0.5, 1.0)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=120, help="runs (10 seeds per configuration)")
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    task = Task("toy", LABELS, "Input: {text}", "Label:",
                [Example(i, f"question {i} about {LABELS[i % 4]}", i % 4) for i in range(max(300, args.steps))],
                [Example(i, f"test item {i} about {LABELS[(i * 7) % 4]}", (i * 7) % 4) for i in range(40)])
    configs = [(s, p) for s in STRATEGIES for p in P_KEEP]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        for i in range(args.runs):
            strategy, p_keep = configs[(i // 10) % len(configs)]
            seed = i % 10 + 10 * (i // (10 * len(configs)))
            synthesize_run(root, task, steps=args.steps, strategy=strategy, p_keep=p_keep, max_examples=8,
                           test_every=50, test_k=40, seed=seed, training_seed=seed,
                           p_correct=lambda t, p=p_keep: 0.2 + p * t / (2 * args.steps))
        for flags in ([], ["--no-viewers"]):
            out = Path(tmp) / ("with" if not flags else "without") / "report.html"
            cpu, wall = cpu_seconds(), time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                assert report([str(root), "--out", str(out), *flags]) == 0
            wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
            viewers = sum(f.stat().st_size for f in out.parent.rglob("viewer.html"))
            print(f"{args.runs} runs of {args.steps} steps, {'without viewer pages' if flags else 'with viewer pages'}: "
                  f"{wall:.1f} s wall, {cpu:.1f} s CPU; report {out.stat().st_size / 1e3:.0f} KB"
                  + (f", viewer pages {viewers / 1e6:.1f} MB" if viewers else "") + f" ({machine_load()})")


if __name__ == "__main__":
    main()
