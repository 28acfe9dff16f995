"""Lock-step sweeps against the same runs one after the other, on the transformers backend and
on the vLLM engine, in one process: wall time, prompt tokens per second, the ratio, and whether
both ways wrote the same records.

The runs: explorative ICRL (random_unbiased_only_positive, p_keep 0.1, temperature 1) on
banking77 with different seeds, the embedded SmolLM2-135M. Each backend is loaded once and
serves every way (its caches emptied in between); "sequential" is the sweep with
--max_parallel 1, which is what separate run_experiment.py commands compute, minus the loads.
On the transformers backend lock-step runs twice: call by call (each run's prompts in passes of
their own) and packed (all runs' prompts in shared passes, each on its own prefix).

    python bench/sweep.py [--runs 8] [--steps 40] [--test_every 20] [--test_k 64]
                          [--backends transformers vllm] [--threads N] [--load N [--apart]]

The first line says the OpenMP wait policy and torch's thread count (the harness's default,
icrl/infra/threads.py, unless the environment sets another). With --load N each backend's ways
run twice: on the machine as it is, then with N busy processes competing for the cores
(bench/busy.py; stopped at the end; --apart: as one job of a session of their own).

Data: --data_dir, else $ICRL_DATA_DIR, else ../shared/datasets next to the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from icrl.infra import threads  # noqa: E402

STARTED_WITH = threads.apply()  # before torch loads

from busy import add_apart_flag, busy, busy_text  # noqa: E402
from prefix_reuse import data_dir, machine_load  # noqa: E402

from icrl.backends import load_backend  # noqa: E402
from icrl.sweep import runner  # noqa: E402


def sweep_argv(args, backend: str, root: Path) -> list[str]:
    seeds = ",".join(str(100 + i) for i in range(args.runs))
    return ["--grid", f"seed+training_seed={seeds}", "--model_name", args.model, "--backend", backend,
            "--task_name", args.task, "--context_strategy_name", "random_unbiased_only_positive",
            "--context_p_keep", "0.1", "--temperature", "1.0", "--icrl", "--test_seed", "100",
            "--max_context_examples", str(args.max_context_examples), "--train_k", str(args.steps),
            "--test_every", str(args.test_every), "--test_k", str(args.test_k),
            "--data_dir", str(args.data_dir), "--output_dir", str(root)]


def records(run_dir: Path) -> dict:
    def strip(name):
        return [{k: v for k, v in json.loads(x).items() if k != "time_s"}
                for x in (run_dir / name).read_text().splitlines()]
    return {name: strip(name) for name in ("train.jsonl", "test.jsonl")}


def timed_sweep(backend, runs, width):
    if hasattr(backend, "reset_cache"):
        backend.reset_cache()
    before = dict(backend.stats)
    tic = time.perf_counter()
    outcomes = runner.execute(runs, backend=backend, width=width, progress=False)
    seconds = time.perf_counter() - tic
    assert all(o.status == "finished" for o in outcomes), [(o.status, o.error) for o in outcomes]
    return seconds, {k: v - before.get(k, 0) for k, v in backend.stats.items()}


def bench(args, name: str, root: Path) -> None:
    options = {"batch_size": args.batch_size} if name == "transformers" else {"seed": 100}  # each backend's own
    backend = load_backend(args.model, backend=name, **options)
    for extra in [0] + ([args.load] if args.load > 0 else []):
        with busy(extra, apart=args.apart):
            print(f"\n{name}: {getattr(backend, 'device', '')}, {busy_text(extra, args.apart)}; {machine_load()}",
                  flush=True)
            ways(args, backend, name, root / f"load{extra}")
    if hasattr(backend, "close"):
        backend.close()


def ways(args, backend, name: str, root: Path) -> None:
    """Sequential, then lock-step (call by call, and packed where the backend can): times, ratios."""
    results = {}
    plan = [("sequential", 1, False), ("lock-step", None, None)]
    if hasattr(backend, "cross_run"):  # transformers: the runs' prompts packed into one pass, or call by call
        plan = [("sequential", 1, False), ("lock-step", None, False), ("packed", None, True)]
    for label, width, packed in plan:
        if hasattr(backend, "cross_run"):
            backend.cross_run = packed
        _, runs = runner.plan(sweep_argv(args, name, root / name / label))
        seconds, stats = timed_sweep(backend, runs, width)
        results[label] = (seconds, runs)
        tokens = stats["prompt_tokens"]
        work = (f"{stats['computed_tokens']} computed, {stats['model_calls']} forward passes" if "computed_tokens" in stats
                else f"{stats.get('calls', 0)} engine calls")
        print(f"  {label:>10}: {seconds:8.1f} s  {tokens:9d} prompt tokens  {tokens / seconds:9.0f} tokens/s  "
              f"({work}; {machine_load()})", flush=True)
    t_seq, seq_runs = results["sequential"]
    for label, (t_lock, lock_runs) in results.items():
        if label == "sequential":
            continue
        same = all(records(a.out_dir) == records(b.out_dir) for a, b in zip(seq_runs, lock_runs))
        print(f"  {label} speed-up: {t_seq / t_lock:.2f}x; records identical: {same}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--task", default="banking77")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--test_every", type=int, default=20)
    parser.add_argument("--test_k", type=int, default=64)
    parser.add_argument("--max_context_examples", type=int, default=16)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--backends", nargs="+", default=["transformers", "vllm"])
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="run again with N busy processes competing for the cores (default: 0, once)")
    add_apart_flag(parser)
    args = parser.parse_args()
    args.data_dir = data_dir(args.data_dir)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"{args.runs} explorative runs on {args.task}, {args.steps} steps, test every {args.test_every} on "
          f"{args.test_k} prompts, {args.model}; torch threads {torch.get_num_threads()}, {STARTED_WITH}")
    with tempfile.TemporaryDirectory(prefix="icrl-bench-sweep-") as root:
        for name in args.backends:
            bench(args, name, Path(root))


if __name__ == "__main__":
    main()
