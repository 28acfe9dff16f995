"""The transformers and vLLM backends on the same workloads, in one run.

(a) one ICRL test step: 64 banking77 test prompts sharing a ~1,500-token ICRL context, 77
    labels, greedy; vLLM on a cold prefix cache (as a run meets it), on a cold cache without
    the shared-prefix warm-up (what vLLM alone does), and on a warm cache (the same call again);
(b) 50 explorative ICRL steps and (c) 50 approximate ICRL steps through the experiment loop
    (banking77, 16 episodes at most; unfiltered strategies, p_keep 0.5, so that contexts fill up
    even though this small model is rarely right; a 16-prompt test at the first and last step).

Prints wall time, prompt tokens/s and the ratio, with the engines' start times and the
machine's load. Needs vLLM (`make setup-vllm` on a CPU machine).

    python bench/engines.py [--model smollm2-135m] [--steps 50] [--prompts 64]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prefix_reuse import data_dir, icrl_context, machine_load, test_prompts, timed  # noqa: E402

import icrl.backends as backends  # noqa: E402
from icrl.cli.run import main as run_experiment  # noqa: E402
from icrl.tasks import load_task  # noqa: E402

LOOP_RUNS = {
    "explorative": ["--context_strategy_name", "random_unbiased", "--context_p_keep", "0.5"],
    "approximate": ["--context_strategy_name", "approximate", "--context_p_keep", "0.5", "--max_contexts", "4",
                    "--approximate_context_sampling_method", "uniform"],
}


def test_step(backend, prompts, labels, cold: bool, warm_prefix: bool = True):
    if cold:
        backend.reset_cache()
    if hasattr(backend, "warm_shared_prefix"):
        backend.warm_shared_prefix = warm_prefix
    before = backend.stats["prompt_tokens"]
    cache = backend.prefix_cache_counters() if hasattr(backend, "prefix_cache_counters") else None
    predictions, seconds = timed(backend.predict, prompts, labels, 0.0, 0)
    if cache is not None:  # load-independent: how much of the call's prompts the engine found cached
        after = backend.prefix_cache_counters()
        hits, queries = after["hits"] - cache["hits"], after["queries"] - cache["queries"]
        print(f"    vLLM {'cold' if cold else 'warm'}{'' if warm_prefix else ' without warm-up'}: "
              f"{seconds:.2f} s, prefix cache {hits}/{queries} prompt tokens hit ({hits / max(queries, 1):.1%})")
    return predictions, seconds, backend.stats["prompt_tokens"] - before


def loop(backend, name: str, args, task_dir: Path, out_dir: Path) -> tuple[float, int]:
    """`steps` steps of one strategy through the experiment loop, on an already loaded backend."""
    original = backends.load_backend
    backends.load_backend = lambda *a, **k: backend
    before = backend.stats["prompt_tokens"]
    try:
        argv = ["--backend", backend.name, "--model_name", args.model, "--task_name", "banking77",
                "--max_context_examples", "16", "--train_k", str(args.steps), "--test_every", str(args.steps + 1),
                "--test_k", "16", "--temperature", "1.0", "--data_dir", str(task_dir), "--icrl",
                "--seed", "100", "--training_seed", "100", "--test_seed", "100",
                "--output_dir", str(out_dir / backend.name), "--no-progress", *LOOP_RUNS[name]]
        code, seconds = timed(run_experiment, argv)
        assert code == 0, f"{name} run failed on {backend.name}"
    finally:
        backends.load_backend = original
    return seconds, backend.stats["prompt_tokens"] - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--context_tokens", type=int, default=1500)
    parser.add_argument("--steps", type=int, default=50)
    args = parser.parse_args()
    task_dir = data_dir(args.data_dir)
    task = load_task("banking77", task_dir)
    print(f"start: {machine_load()}")

    hf, hf_start = timed(backends.load_backend, args.model, backend="transformers")
    vllm, vllm_start = timed(backends.load_backend, args.model, backend="vllm")
    print(f"load: transformers {hf_start:.1f} s ({hf.device}, {hf.dtype}); vLLM engine {vllm_start:.1f} s "
          f"({vllm.describe()['platform']}, {vllm.args.get('dtype')}, eager={vllm.args.get('enforce_eager')})")

    context = icrl_context(task, hf, args.context_tokens)
    prompts = test_prompts(task, hf, context, args.prompts)
    lengths = [hf.count_tokens(p) for p in prompts]
    print(f"(a) test step: {len(prompts)} prompts of {min(lengths)}-{max(lengths)} tokens, {len(task.labels)} labels")
    hf.predict(prompts[:1], task.labels, 0.0, 0)
    vllm.predict(prompts[:1], task.labels, 0.0, 0)  # first-call overheads (grammar compilation)

    rows = []
    p_hf, t_hf, n = test_step(hf, prompts, task.labels, cold=True)
    p_cold, t_cold, _ = test_step(vllm, prompts, task.labels, cold=True)
    _, t_nowarm, _ = test_step(vllm, prompts, task.labels, cold=True, warm_prefix=False)
    p_warm, t_warm, _ = test_step(vllm, prompts, task.labels, cold=False)
    rows.append(("(a) test step, cold cache", t_hf, t_cold, n, n))
    print(f"    vLLM cold {t_cold:.2f} s, cold without the shared-prefix warm-up {t_nowarm:.2f} s, "
          f"warm {t_warm:.2f} s: cold/warm = {t_cold / t_warm:.2f}x")
    agree = sum(a == b for a, b in zip(p_hf, p_cold))
    print(f"    greedy predictions: vLLM cold == warm {p_cold == p_warm}; vLLM vs transformers {agree}/{len(prompts)}")

    with tempfile.TemporaryDirectory() as out:
        for key, name in (("(b)", "explorative"), ("(c)", "approximate")):
            t_h, n_h = loop(hf, name, args, task_dir, Path(out) / name)
            t_v, n_v = loop(vllm, name, args, task_dir, Path(out) / name)
            # At temperature 1 the two backends draw different samples, so their runs see
            # different contexts and prompt tokens: compare throughput (prompt tokens/s).
            rows.append((f"{key} {args.steps} {name} steps", t_h, t_v, n_h, n_v))

    print(f"\n{'workload':<32} {'transformers':>14} {'vLLM':>14} {'tok/s tf':>10} {'tok/s vLLM':>11} "
          f"{'vLLM/tf tok/s':>14}")
    for name, t_h, t_v, n_h, n_v in rows:
        print(f"{name:<32} {t_h:>12.2f} s {t_v:>12.2f} s {n_h / t_h:>10.0f} {n_v / t_v:>11.0f} "
              f"{(n_v / t_v) / (n_h / t_h):>13.2f}x")
    print(f"end: {machine_load()}")
    vllm.close()


if __name__ == "__main__":
    main()
