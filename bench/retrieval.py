"""The cost per step of retrieval contexts (knn_lexical, knn_embedding; positive-only) next to
explorative ICRL (random_unbiased_only_positive, p_keep 0.1), measured in one run.

Each strategy runs through the experiment loop (``icrl.cli.run.main``, records written as
usual) with the same seeds, task and sizes. On the fake backend (the default) the model costs
nothing, so the figures are the harness's own cost: choosing the contexts (BM25 index and
scoring; MiniLM embeddings and cosine scores) and rendering. knn_embedding runs twice: with an
empty embedding cache (the model is loaded, each new prompt encoded once) and again with the
cache it filled (no model load, no encoding), as a resumed or repeated run would.

Per strategy: ms per training step (the records' ``time_s``: context choice, prompt, model call),
its mean over the first and the last tenth of the steps (a retrieval step grows with the history),
ms per test step (one context per test input), wall seconds of the whole run (model and
embedder loads included) and the ratio of each to explorative ICRL's. The machine's load is
printed beside each line: compare ratios, not seconds, on a shared machine.

    python bench/retrieval.py [--steps 300] [--test_every 100] [--test_k 100] [--k 16]
                              [--task trec_coarse] [--backend fake] [--model fake]

With ``--backend transformers --model smollm2-135m`` (and fewer steps) it measures the same on the
embedded SmolLM2, where the model's prefill dominates.
Data: --data_dir, else $ICRL_DATA_DIR, else ../shared/datasets next to the repository.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from prefix_reuse import data_dir, machine_load  # noqa: E402

from icrl.cli.run import main as run_experiment  # noqa: E402
from icrl.records import read_jsonl  # noqa: E402

STRATEGIES = (  # label, strategy, extra arguments
    ("explorative", "random_unbiased_only_positive", ["--context_p_keep", "0.1"]),
    ("knn_lexical", "knn_lexical_only_positive", []),
    ("knn_embedding (cold cache)", "knn_embedding_only_positive", []),
    ("knn_embedding (warm cache)", "knn_embedding_only_positive", []),
)


def argv(args, strategy: str, extra: list, out: Path) -> list[str]:
    return ["--backend", args.backend, "--model_name", args.model, "--task_name", args.task,
            "--context_strategy_name", strategy, *extra, "--icrl", "--temperature", "1.0",
            "--max_context_examples", str(args.k), "--train_k", str(args.steps),
            "--test_every", str(args.test_every), "--test_k", str(args.test_k),
            "--seed", "100", "--training_seed", "100", "--test_seed", "100",
            "--data_dir", str(args.data_dir), "--output_dir", str(out), "--no-progress"]


def measure(args, strategy: str, extra: list, out: Path) -> dict:
    tic = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = run_experiment(argv(args, strategy, extra, out))
    wall = time.perf_counter() - tic
    assert code == 0, f"{strategy} failed with exit code {code}"
    run_dir = next(out.rglob("config.json")).parent
    train, test = read_jsonl(run_dir / "train.jsonl"), read_jsonl(run_dir / "test.jsonl")
    steps = [r["time_s"] * 1000 for r in train]
    tenth = max(len(steps) // 10, 1)
    sizes = [r["context_size"] for r in train]
    return {"train_ms": statistics.mean(steps), "first_ms": statistics.mean(steps[:tenth]),
            "last_ms": statistics.mean(steps[-tenth:]), "test_ms": statistics.mean(r["time_s"] * 1000 for r in test),
            "wall_s": wall, "mean_context": statistics.mean(sizes), "accuracy": test[-1]["accuracy"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", default="trec_coarse")
    parser.add_argument("--backend", default="fake")
    parser.add_argument("--model", default="fake")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--test_every", type=int, default=100)
    parser.add_argument("--test_k", type=int, default=100)
    parser.add_argument("--k", type=int, default=16, help="episodes in context (--max_context_examples)")
    args = parser.parse_args()
    args.data_dir = data_dir(args.data_dir)
    print(f"{args.task}, {args.steps} steps, a test every {args.test_every} on {args.test_k} inputs, "
          f"{args.k} episodes in context, backend {args.backend} ({args.model}); {machine_load()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="icrl-bench-retrieval-") as root:
        os.environ["ICRL_CACHE_DIR"] = str(Path(root) / "cache")  # an empty embedding cache to start
        results = {}
        for i, (label, strategy, extra) in enumerate(STRATEGIES):
            results[label] = r = measure(args, strategy, extra, Path(root) / f"run{i}")
            base = results["explorative"]
            print(f"{label:>27}: train step {r['train_ms']:7.2f} ms ({r['train_ms'] / base['train_ms']:5.2f}x; "
                  f"first tenth {r['first_ms']:6.2f}, last tenth {r['last_ms']:6.2f}), "
                  f"test step {r['test_ms']:8.1f} ms ({r['test_ms'] / base['test_ms']:5.2f}x), "
                  f"run {r['wall_s']:6.1f} s ({r['wall_s'] / base['wall_s']:5.2f}x); "
                  f"mean context {r['mean_context']:.1f}, final test accuracy {r['accuracy']:.2f}; "
                  f"{machine_load()}", flush=True)


if __name__ == "__main__":
    main()
