"""The transformers and vLLM backends on the same workloads, in one run.

(a) one ICRL test step: 64 banking77 test prompts sharing a ~1,500-token ICRL context, 77
    labels, greedy; vLLM on a cold prefix cache (as a run meets it), on a cold cache without
    the shared-prefix warm-up (what vLLM alone does), and on a warm cache (the same call again);
(b) 50 explorative ICRL steps and (c) 50 approximate ICRL steps through the experiment loop
    (banking77, 16 episodes at most; unfiltered strategies, p_keep 0.5, so that contexts fill up
    even though this small model is rarely right; a 16-prompt test at the first and last step).

Each engine is measured in a process of its own (this script runs itself once per engine), so
that neither engine's threads, processes or memory weigh on the other's figures: with both in
one process the transformers side was once measured ten times slower after vLLM's first call
(bench/vllm_side_effects.py looks for what vLLM leaves behind; docs/benchmarks.md). Prints wall time, prompt tokens/s and the ratio, with the
engines' start times and the machine's load. Needs vLLM (`make setup-vllm` on a CPU machine).

    python bench/engines.py [--model smollm2-135m] [--steps 50] [--prompts 64]
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

from prefix_reuse import (add_engine_process_flags, data_dir, icrl_context, in_own_process,  # noqa: E402
                          machine_load, test_prompts, timed)

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


def measure(engine: str, args) -> dict:
    """Everything one engine does, in this process alone (see the module docstring)."""
    task_dir = data_dir(args.data_dir)
    task = load_task("banking77", task_dir)
    backend, start = timed(backends.load_backend, args.model, backend=engine)
    out: dict = {"engine": engine, "load_s": start, "load_start": machine_load()}
    if engine == "vllm":
        out["describe"] = (f"{backend.describe()['platform']}, {backend.args.get('dtype')}, "
                           f"eager={backend.args.get('enforce_eager')}")
    else:
        out["describe"] = f"{backend.device}, {backend.dtype}"
    context = icrl_context(task, backend, args.context_tokens)
    prompts = test_prompts(task, backend, context, args.prompts)
    lengths = [backend.count_tokens(p) for p in prompts]
    out["prompt_lengths"] = [min(lengths), max(lengths)]
    backend.predict(prompts[:1], task.labels, 0.0, 0)  # first-call overheads (grammar compilation)
    predictions, seconds, tokens = test_step(backend, prompts, task.labels, cold=True)
    out["test_step"] = {"seconds": seconds, "tokens": tokens, "predictions": predictions}
    if engine == "vllm":
        _, out["test_step"]["no_warmup_seconds"], _ = test_step(backend, prompts, task.labels, cold=True,
                                                                warm_prefix=False)
        warm, out["test_step"]["warm_seconds"], _ = test_step(backend, prompts, task.labels, cold=False)
        out["test_step"]["cold_equals_warm"] = warm == predictions
    with tempfile.TemporaryDirectory() as tmp:
        for name in LOOP_RUNS:
            seconds, tokens = loop(backend, name, args, task_dir, Path(tmp) / name)
            out[name] = {"seconds": seconds, "tokens": tokens}
    out["load_end"] = machine_load()
    if hasattr(backend, "close"):
        backend.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--context_tokens", type=int, default=1500)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--engines", nargs="+", default=["transformers", "vllm"])
    add_engine_process_flags(parser)
    args = parser.parse_args()
    if args.engine:
        Path(args.json).write_text(json.dumps(measure(args.engine, args)))
        return
    print(f"start: {machine_load()}; each engine in a process of its own", flush=True)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for engine in args.engines:
            words = ["--model", args.model, "--prompts", str(args.prompts), "--context_tokens", str(args.context_tokens),
                     "--steps", str(args.steps)] + (["--data_dir", args.data_dir] if args.data_dir else [])
            results[engine] = r = in_own_process(__file__, engine, Path(tmp) / f"{engine}.json", words)
            t = r["test_step"]
            print(f"{engine}: load {r['load_s']:.1f} s ({r['describe']}); (a) {len(t['predictions'])} prompts of "
                  f"{r['prompt_lengths'][0]}-{r['prompt_lengths'][1]} tokens: {t['seconds']:.2f} s"
                  + (f", without the shared-prefix warm-up {t['no_warmup_seconds']:.2f} s, warm {t['warm_seconds']:.2f} s "
                     f"(cold == warm: {t['cold_equals_warm']})" if "warm_seconds" in t else "")
                  + f"; load {r['load_start']} -> {r['load_end']}", flush=True)
    if len(results) < 2:
        return
    hf, vllm = results["transformers"], results["vllm"]
    agree = sum(a == b for a, b in zip(hf["test_step"]["predictions"], vllm["test_step"]["predictions"]))
    print(f"greedy predictions of (a): vLLM vs transformers {agree}/{len(hf['test_step']['predictions'])}")
    rows = [("(a) test step, cold cache", hf["test_step"], vllm["test_step"])]
    rows += [(f"({key}) {args.steps} {name} steps", hf[name], vllm[name])
             for key, name in zip("bc", LOOP_RUNS)]
    print(f"\n{'workload':<32} {'transformers':>14} {'vLLM':>14} {'tok/s tf':>10} {'tok/s vLLM':>11} "
          f"{'vLLM/tf tok/s':>14}")
    for name, h, v in rows:
        # At temperature 1 the two backends draw different samples, so their runs see
        # different contexts and prompt tokens: compare throughput (prompt tokens/s).
        rate_h, rate_v = h["tokens"] / h["seconds"], v["tokens"] / v["seconds"]
        print(f"{name:<32} {h['seconds']:>12.2f} s {v['seconds']:>12.2f} s {rate_h:>10.0f} {rate_v:>11.0f} "
              f"{rate_v / rate_h:>13.2f}x")
    print(f"end: {machine_load()}")


if __name__ == "__main__":
    main()
