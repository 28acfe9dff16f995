"""torch, vLLM (CPU) and llama.cpp on the same prompts, alternated in one sitting.

The engines a researcher with a CPU would pick for SmolLM2-135M-Instruct, each in a process of
its own, one after the other, ``--rounds`` times in the same order:

- ``torch``: the transformers backend with the harness's defaults (float32);
- ``torch-bf16``: the same backend with ``--dtype bfloat16`` (worth it on a CPU whose cores
  multiply bfloat16 natively: AVX-512 BF16 or AMX);
- ``vllm``: the vLLM backend on the CPU build (float32, its defaults);
- ``llamacpp-f16``, ``llamacpp-q8_0`` (and ``llamacpp-f32``, ``llamacpp-shipped``: the package's
  own Q4_1 file): llama.cpp through llama-cpp-python on the embedded weights rewritten at that
  GGUF type, labels chosen as the harness's backends choose them (bench/llamacpp_engine.py).

Each measures, and prints with its load time, thread settings and the machine's load:

1. prefill: tokens/s of one prompt of 512 and of 2,048 random tokens (batch 1, nothing cached;
   best of ``--reps`` after a warm-up; vLLM: the prompt and one greedy token);
2. the demo's retrieval run replayed: the model calls `run_experiment.py` with no arguments
   makes (knn_embedding_only_positive, 4 episodes, 200 training steps and 3 tests of 50 items,
   temperature 1.0, each prompt with its own context), recorded once from a real run on torch
   (``--calls``) and sent in the same order, seeds and temperatures: the whole time, and one
   label-constrained classification step (the median training call: one prompt, one label);
3. greedy: the replay's last 50 test prompts (``--greedy_prompts``) at temperature 0: labels per
   item against torch's, and the log-probabilities (over the whole vocabulary) of the labels' first tokens at the answer
   position, against torch's (not timed);
4. shared prefix: a cold test step of 64 banking77 prompts after one ~1,500-token ICRL context
   (bench/prefix_reuse.py's), greedy; labels against torch's.

    python bench/cpu_engines.py [--rounds 2] [--engines torch vllm llamacpp-f16 llamacpp-q8_0]

Needs `make setup-vllm` for vllm and `pip install llama-cpp-python` (built from source: no
wheel on PyPI; docs/benchmarks.md says how long) for llama.cpp. The thread count is
chosen once at the start (icrl/infra/threads.py, as the entry points choose it) and given to
every engine: torch and llama.cpp use it, vLLM's CPU worker binds its own threads.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
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

from llamacpp_engine import LlamaCppEngine  # noqa: E402
from engine_calls import first_choice_logprobs, prefill_seconds, record_demo_calls, uncapped_logprobs  # noqa: E402
from prefix_reuse import (add_engine_process_flags, data_dir, icrl_context, in_own_process,  # noqa: E402
                          machine_load, test_prompts, timed)

import icrl.backends as backends  # noqa: E402
from icrl.tasks import load_task  # noqa: E402

ENGINES = ("torch", "torch-bf16", "vllm", "llamacpp-f16", "llamacpp-q8_0", "llamacpp-f32", "llamacpp-shipped")


def load_engine(engine: str):
    if engine == "torch":
        return backends.load_backend("smollm2-135m", "transformers")
    if engine == "torch-bf16":
        return backends.load_backend("smollm2-135m", "transformers", dtype="bfloat16")
    if engine == "vllm":
        uncapped_logprobs()
        return backends.load_backend("smollm2-135m", "vllm")
    return LlamaCppEngine("smollm2-135m", engine.split("-", 1)[1])


def settings(engine: str, backend) -> str:
    """The engine's load and thread settings, in words."""
    if engine.startswith("torch"):
        import torch

        return (f"torch {torch.__version__}, {backend.dtype}, {torch.get_num_threads()} threads, "
                f"attention {backend.model.config._attn_implementation}, {STARTED_WITH}")
    if engine == "vllm":
        import vllm

        binding = re.findall(r"(core ids=\[[^]]*\]|reserved_cpus=\[[^]]*\])", backend.engine_log.read_text())
        return (f"vLLM {vllm.__version__} CPU, {backend.args.get('dtype')}, eager={backend.args.get('enforce_eager')}, "
                f"block {backend.args.get('block_size')}, VLLM_CPU_OMP_THREADS_BIND="
                f"{os.environ.get('VLLM_CPU_OMP_THREADS_BIND', 'auto')}: its worker's OpenMP threads on "
                f"{', '.join(binding) or 'cores its log does not say'}, {STARTED_WITH}")
    import llama_cpp

    return (f"llama-cpp-python {llama_cpp.__version__}, {backend.path.name}, n_threads {backend.threads} "
            f"(batch {backend.threads}), n_batch {backend.llm.n_batch}, n_ctx {backend.llm.n_ctx()}, {STARTED_WITH}")


def replay(backend, calls) -> dict:
    """The recorded calls in order: the whole time, each call's time and labels."""
    labels, seconds = [], []
    tic = time.perf_counter()
    for call in calls:
        start = time.perf_counter()
        labels.append(backend.predict(call["prompts"], call["labels"], call["temperature"], call["seed"]))
        seconds.append(time.perf_counter() - start)
    total = time.perf_counter() - tic
    single = [s for s, c in zip(seconds, calls) if len(c["prompts"]) == 1]
    return {"seconds": total, "labels": labels, "step_ms": 1000 * statistics.median(single),
            "tests_s": [s for s, c in zip(seconds, calls) if len(c["prompts"]) > 1]}


def interleaved(args) -> None:
    """The replay's calls, each sent to every engine in turn in this one process (torch,
    torch-bf16 and llama.cpp; vLLM's engine runs apart): the engines share the machine's load call by call."""
    calls = json.loads(Path(args.calls).read_text())["calls"]
    calls = calls[:args.interleave] if args.interleave > 0 else calls
    loaded = {engine: load_engine(engine) for engine in args.engines}
    for backend in loaded.values():
        backend.predict(calls[0]["prompts"], calls[0]["labels"], 0.0, 0)  # first-call overheads
    seconds = dict.fromkeys(loaded, 0.0)
    print(f"interleaved: {len(calls)} calls, {sum(len(c['prompts']) for c in calls)} prompts; {machine_load()}")
    for call in calls:
        for engine, backend in loaded.items():
            _, took = timed(backend.predict, call["prompts"], call["labels"], call["temperature"], call["seed"])
            seconds[engine] += took
    ref = seconds.get("torch")
    for engine, took in seconds.items():
        print(f"{engine}: {took:.1f} s" + (f", {ref / took:.2f}x torch" if ref else "")
              + f" [{settings(engine, loaded[engine])}]")
    print(f"end: {machine_load()}")


def measure(engine: str, args) -> dict:
    """Everything one engine does, in this process alone."""
    out: dict = {"engine": engine, "load_start": machine_load()}
    backend, out["load_s"] = timed(load_engine, engine)
    out["settings"] = settings(engine, backend)
    out["prefill"] = {n: prefill_seconds(engine, backend, n, args.reps) for n in args.lengths}
    calls = json.loads(Path(args.calls).read_text())["calls"]
    tokens = sum(backend.count_tokens(p) for c in calls for p in c["prompts"])
    backend.predict(calls[0]["prompts"], calls[0]["labels"], 0.0, 0)  # first-call overheads
    out["retrieval"] = {**replay(backend, calls), "prompt_tokens": tokens, "calls": len(calls),
                        "prompts": sum(len(c["prompts"]) for c in calls)}
    tests = [p for c in calls if len(c["prompts"]) > 1 for p in c["prompts"]][-args.greedy_prompts:]
    labels = calls[-1]["labels"]
    out["greedy"] = {"labels": backend.predict(tests, labels, 0.0, 0),
                     "logprobs": first_choice_logprobs(engine, backend, tests, labels)}
    task = load_task("banking77", data_dir(args.data_dir))
    prompts = test_prompts(task, backend, icrl_context(task, backend, args.context_tokens), args.shared_prompts)
    if hasattr(backend, "reset_cache"):
        backend.reset_cache()
    shared, seconds = timed(backend.predict, prompts, task.labels, 0.0, 0)
    out["shared"] = {"seconds": seconds, "labels": shared, "prompts": len(prompts),
                     "prompt_tokens": sum(backend.count_tokens(p) for p in prompts)}
    out["load_end"] = machine_load()
    if hasattr(backend, "close"):
        backend.close()
    return out


def line(r: dict) -> str:
    p, q, s = r["prefill"], r["retrieval"], r["shared"]
    rates = ", ".join(f"{n}: {int(n) / min(t):.0f} tok/s" for n, t in p.items())
    return (f"{r['engine']}: load {r['load_s']:.1f} s [{r['settings']}]\n"
            f"    prefill {rates}; retrieval run {q['seconds']:.1f} s ({q['prompt_tokens'] / q['seconds']:.0f} "
            f"prompt tok/s, step {q['step_ms']:.0f} ms, tests {', '.join(f'{t:.1f}' for t in q['tests_s'])} s); "
            f"shared prefix {s['seconds']:.1f} s; {r['load_start']} -> {r['load_end']}")


def compare(results: dict) -> None:
    """Labels per item and first-token log-probabilities against torch's (first round)."""
    import numpy as np

    ref = results["torch"]
    flat = [x for call in ref["retrieval"]["labels"] for x in call]
    base = np.array(ref["greedy"]["logprobs"])
    for engine, r in results.items():
        if engine == "torch":
            continue
        mine = [x for call in r["retrieval"]["labels"] for x in call]
        greedy = sum(a == b for a, b in zip(r["greedy"]["labels"], ref["greedy"]["labels"]))
        shared = sum(a == b for a, b in zip(r["shared"]["labels"], ref["shared"]["labels"]))
        delta = np.abs(np.array(r["greedy"]["logprobs"]) - base)
        print(f"{engine} vs torch: greedy labels {greedy}/{len(ref['greedy']['labels'])} equal, shared-prefix step "
              f"{shared}/{len(ref['shared']['labels'])}, retrieval run at temperature 1 "
              f"{sum(a == b for a, b in zip(mine, flat))}/{len(flat)}; first-token log-probabilities: "
              f"max |diff| {delta.max():.4f}, mean {delta.mean():.5f}, median {float(np.median(delta)):.5f}")


def table(rounds: list) -> None:
    lengths = list(rounds[0][next(iter(rounds[0]))]["prefill"])
    print(f"\n{'engine':<17} {'round':>5} {'load s':>7} " + " ".join(f"{n + ' tok/s':>10}" for n in lengths)
          + f" {'step ms':>7} {'retrieval s':>11} {'x torch':>7} {'shared s':>8} {'x torch':>7}")
    for k, results in enumerate(rounds, 1):
        ref = results.get("torch")
        for engine, r in results.items():
            q, s = r["retrieval"]["seconds"], r["shared"]["seconds"]
            rq = f"{ref['retrieval']['seconds'] / q:.2f}" if ref else "-"
            rs = f"{ref['shared']['seconds'] / s:.2f}" if ref else "-"
            rates = " ".join(f"{int(n) / min(t):>10.0f}" for n, t in r["prefill"].items())
            print(f"{engine:<17} {k:>5} {r['load_s']:>7.1f} {rates} {r['retrieval']['step_ms']:>7.0f} {q:>11.1f} "
                  f"{rq:>7} {s:>8.1f} {rs:>7}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engines", nargs="+", default=["torch", "vllm", "llamacpp-f16", "llamacpp-q8_0"],
                        choices=ENGINES)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--lengths", nargs="+", default=["512", "2048"])
    parser.add_argument("--calls", default=None, help="recorded demo calls (default: record them now, on torch)")
    parser.add_argument("--greedy_prompts", type=int, default=50, help="the replay's last test prompts, greedy")
    parser.add_argument("--shared_prompts", type=int, default=64)
    parser.add_argument("--context_tokens", type=int, default=1500, help="the shared-prefix step's context")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--out", default=None, help="write every figure as JSON here")
    parser.add_argument("--interleave", type=int, default=None, metavar="N",
                        help="instead: the first N recorded calls (0: all), each sent to every engine in turn, "
                             "in one process (torch, torch-bf16 and llama.cpp only)")
    add_engine_process_flags(parser)
    args = parser.parse_args()
    if args.engine:
        Path(args.json).write_text(json.dumps(measure(args.engine, args)))
        return
    if args.interleave is not None:
        interleaved(args)
        return
    # One thread count for the whole sitting: the harness's choice now, else one per usable CPU.
    os.environ.setdefault("OMP_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    print(f"start: {machine_load()}; {STARTED_WITH}; OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} for every "
          f"engine, each in a process of its own", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        if args.calls is None:
            args.calls = str(Path(tmp) / "calls.json")
            seconds = record_demo_calls(Path(args.calls), args.data_dir)
            print(f"recorded the demo's retrieval run on torch: {seconds:.1f} s end to end; {machine_load()}", flush=True)
        rounds = []
        for k in range(args.rounds):
            results: dict = {}
            for engine in args.engines:
                words = ["--calls", args.calls, "--reps", str(args.reps), "--greedy_prompts", str(args.greedy_prompts),
                         "--shared_prompts", str(args.shared_prompts), "--context_tokens", str(args.context_tokens),
                         "--lengths", *args.lengths] + (["--data_dir", args.data_dir] if args.data_dir else [])
                results[engine] = in_own_process(__file__, engine, Path(tmp) / f"{engine}-{k}.json", words)
                print(f"[round {k + 1}] {line(results[engine])}", flush=True)
            rounds.append(results)
    if "torch" in rounds[0]:
        compare(rounds[0])
    table(rounds)
    if args.out:
        Path(args.out).write_text(json.dumps(rounds))
    print(f"end: {machine_load()}")


if __name__ == "__main__":
    main()
