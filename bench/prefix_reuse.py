"""Shared-prefix reuse on the transformers backend: one ICRL test step, with and without reuse.

A test step asks the model for many test inputs after the same ICRL context, so the prompts
share a long prefix. This script builds such a step from real banking77 training examples
(rendered with build_messages and the backend's chat template), runs it with prefix reuse and
again recomputing every prompt in full (prefix_reuse=False), and prints wall time, tokens
computed (backend.stats), the speed-up and whether the greedy predictions are identical.

    python bench/prefix_reuse.py [--prompts 64] [--context_tokens 1500] [--batch_size 8]

Data: --data_dir, else $ICRL_DATA_DIR, else ../shared/datasets next to the repository.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from icrl.backends import load_backend  # noqa: E402
from icrl.method.episode import Episode  # noqa: E402
from icrl.method.prompts import build_messages  # noqa: E402
from icrl.tasks import load_task  # noqa: E402

from busy import load_text as machine_load  # noqa: E402 - the load beside a figure, for the scripts here


def data_dir(arg: str | None) -> Path:
    if arg:
        return Path(arg)
    if os.environ.get("ICRL_DATA_DIR"):
        return Path(os.environ["ICRL_DATA_DIR"])
    return REPO.parent / "shared" / "datasets"


def icrl_context(task, backend, target_tokens: int, seed: int = 0) -> list[Episode]:
    """Training episodes as ICRL would record them (a model right about half the time, with
    its feedback), added until the rendered context reaches `target_tokens`."""
    rng = random.Random(seed)
    context: list[Episode] = []
    for example in task.training_examples(size=-1, seed=seed):
        answer = task.answer(example)
        prediction = answer if rng.random() < 0.5 else rng.choice(task.labels)
        correct = int(prediction == answer)
        context.append(Episode(task.prompt(example), prediction, correct, answer, correct))
        messages, prefix = build_messages(task, context, "Query: x", "icrl",
                                          supports_system_role=backend.supports_system_role)
        if backend.count_tokens(backend.render(messages, prefix)) >= target_tokens:
            break
    return context


def test_prompts(task, backend, context, count: int) -> list[str]:
    """`count` rendered test prompts of `task`, all after the same ICRL `context`."""
    prompts = []
    for example in task.test_examples(size=count, seed=0):
        messages, prefix = build_messages(task, context, task.prompt(example), "icrl",
                                          supports_system_role=backend.supports_system_role)
        prompts.append(backend.render(messages, prefix))
    return prompts


def timed(fn, *args, **kwargs):
    """(fn's result, wall seconds)."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def timed_runs(fn, reps: int) -> list[float]:
    """Wall seconds of each of ``reps`` calls of ``fn()``, after one untimed warm-up call
    (first-call allocations and kernel selection)."""
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def test_step(backend, prompts, labels, reuse: bool) -> tuple[list[str], float, dict]:
    backend.prefix_reuse = reuse
    backend.reset_cache()
    backend.stats.update(prompt_tokens=0, computed_tokens=0, model_calls=0)
    start = time.perf_counter()
    predictions = backend.predict(prompts, labels, temperature=0.0, seed=0)
    return predictions, time.perf_counter() - start, dict(backend.stats)


def add_engine_process_flags(parser: argparse.ArgumentParser) -> None:
    """The hidden flags of a benchmark that measures each engine in a process of its own
    (``in_own_process``): the engine to measure here, and the JSON file for its figures."""
    parser.add_argument("--engine", default=None, help=argparse.SUPPRESS)  # one engine, in this process
    parser.add_argument("--json", default=None, help=argparse.SUPPRESS)


def in_own_process(script: str, engine: str, path: Path, words: list) -> dict:
    """Run ``script`` for ``engine`` alone in a new process (its other flags: ``words``) and
    return the figures it wrote to ``path``: no engine's threads, caches or memory meet another's."""
    subprocess.run([sys.executable, script, "--engine", engine, "--json", str(path), *words], check=True)
    return json.loads(path.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--task", default="banking77")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--prompts", type=int, default=64, help="test inputs in the step")
    parser.add_argument("--context_tokens", type=int, default=1500, help="size of the shared ICRL context")
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    task = load_task(args.task, data_dir(args.data_dir))
    backend = load_backend(args.model, backend="transformers", batch_size=args.batch_size)
    context = icrl_context(task, backend, args.context_tokens)
    prompts = test_prompts(task, backend, context, args.prompts)
    lengths = [backend.count_tokens(p) for p in prompts]
    print(f"model {args.model} on {backend.device} ({backend.dtype}), torch threads {torch.get_num_threads()}, "
          f"batch_size {args.batch_size}; {machine_load()}")
    print(f"test step: {len(prompts)} prompts of {min(lengths)}-{max(lengths)} tokens "
          f"(context: {len(context)} {args.task} episodes), {len(task.labels)} labels")

    backend.predict(prompts[:1], task.labels, 0.0, 0)  # warm-up (first-call overheads)
    reused, t_reuse, s_reuse = test_step(backend, prompts, task.labels, reuse=True)
    full, t_full, s_full = test_step(backend, prompts, task.labels, reuse=False)

    for name, seconds, stats in (("prefix reuse", t_reuse, s_reuse), ("no reuse", t_full, s_full)):
        print(f"{name:>13}: {seconds:8.2f} s  {stats['computed_tokens']:7d} tokens computed "
              f"of {stats['prompt_tokens']} prompt tokens, {stats['model_calls']} model calls, "
              f"{len(prompts) / seconds:6.2f} prompts/s")
    print(f"speed-up: {t_full / t_reuse:.1f}x wall time, "
          f"{s_full['computed_tokens'] / max(1, s_reuse['computed_tokens']):.1f}x fewer tokens computed")
    same = sum(a == b for a, b in zip(reused, full))
    print(f"greedy predictions identical: {reused == full} ({same}/{len(prompts)} equal); at the end: {machine_load()}")


if __name__ == "__main__":
    main()
