"""run_sweep.py --estimate against the counted tokens of the runs it estimated.

Runs a sweep (default: the paper's four main methods, naive, naive+, explorative and
approximate ICRL, on banking77 with the CPU model: bench/methods/estimate_check.toml), counts
each finished run as run_count_tokens.py does (icrl.analysis.counting.count_run), estimates the
same runs as run_sweep.py --estimate does, with the share of rewarded episodes (the estimate's
one assumption) each run really had, the sweep's share, and the default share, and prints the
error of each figure. Runs already finished in --output_dir are reused (the sweep resumes).

    python bench/estimate_check.py [--config bench/methods/estimate_check.toml] [--output_dir DIR]

Data: $ICRL_DATA_DIR, else ../shared/datasets next to the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from prefix_reuse import data_dir, machine_load  # noqa: E402

from icrl.analysis.counting import count_run  # noqa: E402
from icrl.sweep import estimate, runner  # noqa: E402

FIGURES = (("train_prompt_tokens", "training prompt tokens"), ("processed_tokens", "processed (published)"),
           ("test_prompt_tokens", "test prompt tokens"))
SENT = (("sent", "prompt tokens sent"),)


def rewarded_share(run_dir: Path) -> tuple[int, int]:
    rows = [json.loads(line) for line in (run_dir / "train.jsonl").read_text().splitlines()]
    return sum(1 for r in rows if r.get("feedback") == 1), len(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(REPO / "bench" / "methods" / "estimate_check.toml"))
    parser.add_argument("--output_dir", default=None, help="where the runs are written (default: a temporary folder)")
    parser.add_argument("--default_share", type=float, default=0.5)
    args = parser.parse_args()
    os.environ.setdefault("ICRL_DATA_DIR", str(data_dir(None)))
    with tempfile.TemporaryDirectory(prefix="icrl-estimate-") as tmp:
        out = Path(args.output_dir or tmp)
        argv = ["--config", args.config, "--output_dir", str(out)]
        print(f"start: {machine_load()}", flush=True)
        if runner.main(argv) != 0:
            print("the sweep did not finish", file=sys.stderr)
            return 1
        _, runs = runner.plan(argv)
        tokenizers = estimate.Tokenizers()
        counted, shares = {}, {}
        for run in runs:
            summary, _ = count_run(run.out_dir, tokenizers.chat(run.args))
            counted[run.index] = summary
            shares[run.index] = rewarded_share(run.out_dir)
        hits = sum(h for h, _ in shares.values())
        steps = sum(n for _, n in shares.values())
        observed = hits / steps
        print(f"\nrewarded training episodes over the sweep: {hits} of {steps} ({observed:.1%}); per run: "
              + ", ".join(f"#{i} {h}/{n}" for i, (h, n) in shares.items()))
        worst = 0.0
        own = {run.index: estimate.estimate_run(run.args, tokenizers.chat(run.args), shares[run.index][0] / shares[run.index][1])
               for run in runs}
        cases = (("each run at its own observed share", own),
                 (f"every run at the sweep's observed share, {observed:.1%}", estimate.estimate_runs(runs, observed)),
                 (f"every run at the default share, {args.default_share:.0%}",
                  estimate.estimate_runs(runs, args.default_share)))
        for label, estimates in cases:
            print(f"\nestimate with {label}, vs counted (run_count_tokens.py's counter):")
            print(f"{'run':<44} {'figure':<24} {'counted':>10} {'estimate':>10} {'error':>8}")
            totals: dict = {}
            for run in runs:
                name = f"#{run.index} {run.args.spec.task_name} {run.args.spec.context_strategy_name}"
                for key, figure in FIGURES:
                    real, guess = counted[run.index][key], getattr(estimates[run.index], key)
                    totals.setdefault(key, [0, 0])
                    totals[key][0] += real
                    totals[key][1] += guess
                    error = (guess - real) / real if real else 0.0
                    if estimates is own:
                        worst = max(worst, abs(error))
                    print(f"{name:<44} {figure:<24} {real:>10,} {guess:>10,} {error:>+8.1%}")
            for key, figure in FIGURES:
                real, guess = totals[key]
                print(f"{'all runs':<44} {figure:<24} {real:>10,} {guess:>10,} {(guess - real) / real:>+8.1%}")
            if estimates is own:
                print(f"\nper method (all its runs), each run at its own share:")
                methods: dict = {}
                for run in runs:
                    name = run.args.spec.context_strategy_name
                    sums = methods.setdefault(name, {key: [0, 0] for key, _ in FIGURES + SENT})
                    for key, _ in FIGURES:
                        sums[key][0] += counted[run.index][key]
                        sums[key][1] += getattr(estimates[run.index], key)
                    sums["sent"][0] += counted[run.index]["train_prompt_tokens"] + counted[run.index]["test_prompt_tokens"]
                    sums["sent"][1] += estimates[run.index].prompt_tokens
                for name, sums in methods.items():
                    for key, figure in FIGURES + SENT:
                        real, guess = sums[key]
                        print(f"{name:<44} {figure:<24} {real:>10,} {guess:>10,} {(guess - real) / real:>+8.1%}")
        print(f"\nlargest error of one run's figure at its own share: {worst:.1%}; end: {machine_load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
