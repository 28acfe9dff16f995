"""The transformers backend on a GPU (or a CPU at tiny size): a correctness check and the
throughput of ICRL's workloads, through the harness's own backend, with no weights to download.

A model of a real architecture (Llama-3.1-8B's config: its config.json next to its tokenizer)
is built with random weights on the device, in bf16 on a GPU. Random weights compute what
trained ones compute, so speed is the same; their answers mean nothing, so the contexts use
unfiltered strategies (a random model is almost never rewarded).

1. correctness (a small config in float32): the backend's label-constrained predictions, per
   call (one shared prefix, batched suffixes) and packed (several calls, each on its own
   prefix, in one forward pass), equal a plain forward pass's choice, prompt by prompt: the
   whole prompt and the label tokens so far, no cache, the same trie and random streams;
2. the bf16 matrix-product rate (n^3 products, n = 8192 on a GPU), the ceiling for what follows;
3. one ICRL test step: --prompts banking77 test prompts sharing a --context_tokens ICRL
   context: prompt tokens/s, and the model's FLOP/s (2 x non-embedding parameters per computed
   token, plus attention's 4 x layers x width per attended (query, key) pair) as a share of (2),
   for the shared prefix's prefill alone and for the whole step;
4. --steps explorative training steps (random_unbiased, p_keep 0.5, 16 episodes at most): the
   experiment loop's prompt tokens/s and seconds per step;
5. lock-step: --runs such runs advanced together vs one after another on the loaded model,
   with the runs' prompts in one forward pass (packed), call by call, and as the backend
   chooses by measurement (its default): wall times, the ratios, the choice, and whether all
   ways wrote the same records;
6. a retrieval test step: --retrieval_prompts banking77 test inputs, each after its own
   --retrieval_k rewarded episodes most similar to it (no shared prefix: padded batches, on a
   GPU as many rows as its free memory holds unless --batch_size is given): prompt tokens/s,
   the rows per pass and the share of (2) (bench/gpu_steps.py);
7. a reasoning step (--reasoning N): --reasoning_prompts prompts on the shared context of (3),
   each generating --reasoning_tokens tokens (``generate``, greedy): generated tokens/s.
   The correctness check (1) also compares ``generate``'s text at temperature 0 with a plain
   forward pass's greedy continuation.

It prints the figures and writes them to --out (JSON). On a machine without a package registry
(a lent GPU) it needs only torch, transformers and numpy, plus files that travel with the
working tree: `make gpu-assets` copies the Llama-3.1 tokenizer and config and banking77's raw
files into data/gpu-assets/ (ignored by git, 10 MB).

    python bench/gpu.py --assets data/gpu-assets --out gpu.json          # on a GPU: under 8 minutes
    python bench/gpu.py --size tiny --prompts 8 --context_tokens 300 --steps 4 --runs 2 \\
        --lockstep_steps 3                                                # on a CPU: a minute or two
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from gpu_steps import reasoning_check, reasoning_step, retrieval_prompts, retrieval_step  # noqa: E402
from prefix_reuse import icrl_context, machine_load, test_prompts  # noqa: E402

LLAMA = "meta-llama__Meta-Llama-3.1-8B-Instruct"
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


# -- the model ------------------------------------------------------------------------------------
def tokenizer_dir(args) -> Path:
    """--tokenizer, else the assets' or $ICRL_TOKENIZERS_DIR's Llama-3.1, else the embedded SmolLM2
    (a Llama architecture too)."""
    from icrl.backends.chat import local_model_dir

    if args.tokenizer:
        return local_model_dir(args.tokenizer)
    for root in (args.assets, os.environ.get("ICRL_TOKENIZERS_DIR")):
        if root and (Path(root) / LLAMA / "tokenizer.json").is_file():
            return Path(root) / LLAMA
    return local_model_dir("smollm2-135m")


def build(directory: Path, size: str, dtype, device, vocab: int):
    """A Llama model with random weights on ``device``: the config in ``directory`` ("full"), or
    its shape shrunk to a few layers of width 64 ("tiny")."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig.from_pretrained(directory)
    if size == "tiny":
        for key, value in TINY.items():
            setattr(config, key, value)
        config.head_dim = TINY["hidden_size"] // TINY["num_attention_heads"]
    config.vocab_size = max(config.vocab_size, vocab)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(previous)
    return model.eval()


def non_embedding_parameters(model) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if "embed_tokens" not in name and "lm_head" not in name)


def model_flops(model, stats: dict) -> float:
    """FLOPs of the transformer layers for the backend's counters (the one logit row per prompt
    is left out)."""
    c = model.config
    width = c.num_attention_heads * getattr(c, "head_dim", c.hidden_size // c.num_attention_heads)
    return 2.0 * non_embedding_parameters(model) * stats["computed_tokens"] + 4.0 * c.num_hidden_layers * width * stats["attended"]


def sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def matmul_rate(device, dtype, n: int, reps: int = 10) -> float:
    """FLOP/s of an n x n x n matrix product in ``dtype``, the best of ``reps``."""
    import torch

    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    best = float("inf")
    for _ in range(reps):
        tic = time.perf_counter()
        a @ b
        sync(device)
        best = min(best, time.perf_counter() - tic)
    return 2.0 * n ** 3 / best


# -- 1. correctness -----------------------------------------------------------------------------
def reference(model, ids, trie, temperature, rng, device) -> str:
    """The label a plain forward pass picks: the whole prompt and the label tokens so far, no
    cache, at every choice of the trie."""
    import torch

    from icrl.backends.constrained import choose

    node, tokens = trie.root, []
    while True:
        options = trie.options(node)
        if len(options) == 1:
            token = options[0]
        else:
            with torch.inference_mode():
                logits = model(input_ids=torch.tensor([ids + tokens], device=device)).logits[0, -1]
            token = choose(logits.float().cpu().numpy(), options, temperature, rng)
        node, label = trie.advance(node, token)
        tokens.append(token)
        if label is not None:
            return label


def correctness(args, task, chat, device) -> dict:
    import torch

    from icrl.backends import Call
    from icrl.backends.constrained import prompt_rngs
    from icrl.backends.hf import TransformersBackend

    model = build(args.tokenizer_dir, "tiny", torch.float32, device, len(chat.tokenizer))
    backend = TransformersBackend.from_model(model, chat, model_name="tiny-random", batch_size=4)
    calls = []
    for k, (tokens, temperature) in enumerate(((120, 0.0), (200, 1.0), (280, 0.0))):
        context = icrl_context(task, backend, tokens, seed=k)
        calls.append(Call(test_prompts(task, backend, context, args.check_prompts), task.labels, temperature, 11 + k, key=k))
    expected = []
    for call in calls:
        trie = backend._trie(tuple(call.labels), backend._prefix_of(call.prompts[0]))
        rngs = prompt_rngs(call.seed, len(call.prompts))
        expected.append([reference(model, chat.encode_prompt(p), trie, call.temperature, rng, device)
                         for p, rng in zip(call.prompts, rngs)])
    per_call = [backend.predict(c.prompts, c.labels, c.temperature, c.seed) for c in calls]
    backend.reset_cache()
    backend.cross_run = True
    packed = backend.predict_calls(calls)
    total = sum(len(c.prompts) for c in calls)
    same = lambda got: sum(a == b for x, y in zip(got, expected) for a, b in zip(x, y))
    backend.cross_run = None
    backend.reset_cache()
    reasoning = reasoning_check(model, backend, list(calls[1].prompts), args.check_tokens)
    return {"prompts": total, "per_call_equal": same(per_call), "packed_equal": same(packed), "reasoning": reasoning,
            "passed": same(per_call) == total and same(packed) == total and reasoning["passed"]}


# -- 3. one test step ------------------------------------------------------------------------------
def test_step(backend, prompts, labels, matmul: float) -> dict:
    from icrl.backends import common_prefix_length

    backend.predict(prompts[:2], labels, 0.0, 0)  # first-call overheads (kernels, allocator)
    ids = [backend.chat.encode_prompt(p) for p in prompts]
    shared = ids[0][:-1]
    for x in ids[1:]:
        shared = shared[:common_prefix_length(shared, x[:-1])]
    backend.reset_cache()
    before = dict(backend.stats)
    tic = time.perf_counter()
    backend._extend_prefix(list(shared))
    sync(backend.device)
    prefill_s = time.perf_counter() - tic
    prefill = {k: backend.stats[k] - before[k] for k in before}
    backend.reset_cache()
    before = dict(backend.stats)
    tic = time.perf_counter()
    backend.predict(prompts, labels, 0.0, 0)
    step_s = time.perf_counter() - tic
    step = {k: backend.stats[k] - before[k] for k in before}
    prefill_flops, step_flops = model_flops(backend.model, prefill), model_flops(backend.model, step)
    return {"prompts": len(prompts), "shared_prefix_tokens": len(shared), "prompt_tokens": step["prompt_tokens"],
            "computed_tokens": step["computed_tokens"], "model_calls": step["model_calls"], "seconds": step_s,
            "prompt_tokens_per_s": step["prompt_tokens"] / step_s, "flop_per_s": step_flops / step_s,
            "share_of_matmul": step_flops / step_s / matmul, "prefill_seconds": prefill_s,
            "prefill_tokens_per_s": prefill["computed_tokens"] / prefill_s,
            "prefill_share_of_matmul": prefill_flops / prefill_s / matmul}


# -- 4 and 5. runs through the experiment loop ---------------------------------------------------
def run_argv(args, seeds: list[int], steps: int, out: Path) -> list[str]:
    # --backend fake: the runs' arguments validate without a model folder; the loaded backend
    # is given to runner.execute, and it is the transformers backend that serves them.
    return ["--grid", "seed+training_seed=" + ",".join(map(str, seeds)), "--model_name", "random-llama",
            "--backend", "fake", "--task_name", "banking77", "--context_strategy_name", "random_unbiased",
            "--context_p_keep", "0.5", "--temperature", "1.0", "--icrl", "--test_seed", "100",
            "--max_context_examples", "16", "--train_k", str(steps), "--test_every", str(steps + 1),
            "--test_k", str(args.test_k), "--data_dir", str(args.data_dir), "--output_dir", str(out)]


def records(run_dir: Path) -> list:
    return [[{k: v for k, v in json.loads(line).items() if k != "time_s"}
             for line in (run_dir / name).read_text().splitlines()] for name in ("train.jsonl", "test.jsonl")]


def sweep(backend, argv, width) -> tuple[float, dict, list]:
    from icrl.sweep import runner

    _, runs = runner.plan(argv)
    backend.reset_cache()
    before = dict(backend.stats)
    tic = time.perf_counter()
    outcomes = runner.execute(runs, backend=backend, width=width, progress=False)
    seconds = time.perf_counter() - tic
    assert all(o.status == "finished" for o in outcomes), [(o.status, o.error) for o in outcomes]
    return seconds, {k: backend.stats[k] - before[k] for k in before}, [records(r.out_dir) for r in runs]


def training(backend, args, root: Path) -> dict:
    seconds, stats, _ = sweep(backend, run_argv(args, [100], args.steps, root / "train"), None)
    return {"steps": args.steps, "seconds": seconds, "seconds_per_step": seconds / args.steps,
            "prompt_tokens": stats["prompt_tokens"], "prompt_tokens_per_s": stats["prompt_tokens"] / seconds,
            "computed_tokens": stats["computed_tokens"]}


def lockstep(backend, args, root: Path) -> dict:
    seeds = [100 + i for i in range(args.runs)]
    out = {"runs": args.runs, "steps": args.lockstep_steps}
    results = {}
    from icrl.backends.hf import Choice

    for name, width, packed in (("one_after_another", 1, False), ("lockstep_call_by_call", None, False),
                                ("lockstep_packed", None, True), ("lockstep_measured", None, None)):
        backend.cross_run, backend._choice = packed, Choice()
        seconds, stats, recs = sweep(backend, run_argv(args, seeds, args.lockstep_steps, root / name), width)
        results[name] = recs
        out[name] = {"seconds": seconds, "prompt_tokens_per_s": stats["prompt_tokens"] / seconds,
                     "model_calls": stats["model_calls"]}
        if packed is None:
            chosen = backend._choice.chosen
            out["measured_choice"] = "undecided (too few calls)" if chosen is None else \
                "packed" if chosen else "call_by_call"
    backend.cross_run = None
    base = out["one_after_another"]["seconds"]
    for name in ("call_by_call", "packed", "measured"):
        out[f"speedup_{name}"] = base / out[f"lockstep_{name}"]["seconds"]
    out["faster_lockstep"] = "packed" if out["speedup_packed"] >= out["speedup_call_by_call"] else "call_by_call"
    out["records_identical"] = {name: recs == results["one_after_another"] for name, recs in results.items()}
    return out


# -- main -----------------------------------------------------------------------------------------
def main() -> int:
    import torch

    cuda = torch.cuda.is_available()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=["full", "tiny"], default="full" if cuda else "tiny",
                        help="full: the tokenizer folder's config (Llama-3.1-8B); tiny: 2 layers of width 64")
    parser.add_argument("--assets", default=str(REPO / "data" / "gpu-assets"), help="folder from make gpu-assets")
    parser.add_argument("--tokenizer", default=None, help="tokenizer and config folder (default: see tokenizer_dir)")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--prompts", type=int, default=64 if cuda else 8)
    parser.add_argument("--context_tokens", type=int, default=1500 if cuda else 300)
    parser.add_argument("--check_prompts", type=int, default=6 if cuda else 3)
    parser.add_argument("--steps", type=int, default=50 if cuda else 4)
    parser.add_argument("--runs", type=int, default=8 if cuda else 2)
    parser.add_argument("--lockstep_steps", type=int, default=20 if cuda else 3)
    parser.add_argument("--test_k", type=int, default=16 if cuda else 2)
    parser.add_argument("--batch_size", type=int, default=None if cuda else 8,
                        help="rows per forward pass (default on a GPU: chosen from its free memory, as a run does)")
    parser.add_argument("--retrieval_prompts", type=int, default=64 if cuda else 6)
    parser.add_argument("--retrieval_k", type=int, default=16 if cuda else 4)
    parser.add_argument("--reasoning_prompts", type=int, default=64 if cuda else 4)
    parser.add_argument("--reasoning_tokens", type=int, default=64 if cuda else 8)
    parser.add_argument("--check_tokens", type=int, default=12 if cuda else 6,
                        help="tokens generated per prompt by the reasoning check (1)")
    parser.add_argument("--out", default="gpu-bench.json")
    args = parser.parse_args()
    device = "cuda" if cuda else "cpu"
    args.tokenizer_dir = tokenizer_dir(args)
    if args.data_dir is None:
        assets = Path(args.assets) / "datasets"
        args.data_dir = assets if assets.is_dir() else Path(os.environ.get("ICRL_DATA_DIR") or REPO.parent / "shared" / "datasets")

    from icrl.backends.chat import ChatTokenizer, load_hf_tokenizer
    from icrl.backends.hf import TransformersBackend
    from icrl.tasks import load_task

    report: dict = {"machine": {"device": torch.cuda.get_device_name(0) if cuda else platform.processor() or "cpu",
                                "torch": torch.__version__, "python": platform.python_version(),
                                "load_start": machine_load()},
                    "settings": {k: str(v) for k, v in vars(args).items()}}
    print(f"{report['machine']['device']}, torch {torch.__version__}; {machine_load()}", flush=True)
    started = time.perf_counter()
    chat = ChatTokenizer(load_hf_tokenizer(args.tokenizer_dir), args.tokenizer_dir)
    task = load_task("banking77", args.data_dir)

    report["correctness"] = correctness(args, task, chat, device)
    c = report["correctness"]
    r = c["reasoning"]
    print(f"1. correctness (float32, small config): per call {c['per_call_equal']}/{c['prompts']}, packed "
          f"{c['packed_equal']}/{c['prompts']} labels, generated text {r['equal']}/{r['prompts']} "
          f"({r['tokens']} tokens each) equal to a plain forward pass: {'passed' if c['passed'] else 'FAILED'}",
          flush=True)

    dtype = torch.bfloat16 if cuda else torch.float32
    matmul = matmul_rate(device, dtype, 8192 if cuda else 512)
    report["matmul"] = {"dtype": str(dtype), "n": 8192 if cuda else 512, "flop_per_s": matmul}
    print(f"2. matrix product ({dtype}): {matmul / 1e12:.3g} TFLOP/s", flush=True)

    tic = time.perf_counter()
    model = build(args.tokenizer_dir, args.size, dtype, device, len(chat.tokenizer))
    sync(device)
    backend = TransformersBackend.from_model(model, chat, model_name=f"random-{args.size}", batch_size=args.batch_size)
    report["model"] = {"size": args.size, "parameters": sum(p.numel() for p in model.parameters()),
                       "non_embedding_parameters": non_embedding_parameters(model), "build_seconds": time.perf_counter() - tic,
                       "dtype": str(dtype)}
    print(f"   model: {report['model']['parameters'] / 1e9:.2f} B parameters ({args.size}, random, {dtype}) "
          f"built in {report['model']['build_seconds']:.1f} s", flush=True)

    context = icrl_context(task, backend, args.context_tokens)
    prompts = test_prompts(task, backend, context, args.prompts)
    report["test_step"] = t = test_step(backend, prompts, task.labels, matmul)
    print(f"3. test step: {t['prompts']} prompts, {t['shared_prefix_tokens']}-token shared prefix: {t['seconds']:.3f} s, "
          f"{t['prompt_tokens_per_s']:,.0f} prompt tokens/s, {t['share_of_matmul']:.1%} of the matrix rate "
          f"(prefill alone {t['prefill_tokens_per_s']:,.0f} tokens/s, {t['prefill_share_of_matmul']:.1%})", flush=True)

    with tempfile.TemporaryDirectory(prefix="icrl-gpu-bench-") as tmp:
        report["training"] = r = training(backend, args, Path(tmp))
        print(f"4. {r['steps']} explorative steps: {r['seconds']:.2f} s, {r['seconds_per_step'] * 1000:.0f} ms/step, "
              f"{r['prompt_tokens_per_s']:,.0f} prompt tokens/s", flush=True)
        report["lockstep"] = k = lockstep(backend, args, Path(tmp))
    print(f"5. {k['runs']} runs x {k['steps']} steps: one after another {k['one_after_another']['seconds']:.2f} s, "
          f"lock-step call by call {k['lockstep_call_by_call']['seconds']:.2f} s ({k['speedup_call_by_call']:.2f}x), "
          f"packed {k['lockstep_packed']['seconds']:.2f} s ({k['speedup_packed']:.2f}x); faster: {k['faster_lockstep']}; "
          f"chosen by the backend's measurement: {k['measured_choice']} ({k['speedup_measured']:.2f}x); "
          f"records identical: {k['records_identical']}",
          flush=True)
    retrieval = retrieval_prompts(task, backend, args.retrieval_prompts, args.retrieval_k)
    report["retrieval_step"] = q = retrieval_step(backend, retrieval, task.labels, matmul, model_flops)
    print(f"6. retrieval test step: {q['prompts']} prompts, each after its own {args.retrieval_k} episodes "
          f"({q['mean_prompt_tokens']:,.0f} tokens on average, {q['shared_prefix_tokens']} shared), batch size "
          f"{q['batch_size']}: {q['seconds']:.3f} s, {q['prompt_tokens_per_s']:,.0f} prompt tokens/s, "
          f"{q['share_of_matmul']:.1%} of the matrix rate", flush=True)
    report["reasoning_step"] = g = reasoning_step(backend, prompts[:args.reasoning_prompts], args.reasoning_tokens)
    print(f"7. reasoning step: {g['prompts']} prompts on the shared context of 3, up to {g['max_tokens']} tokens "
          f"each, batch size {g['batch_size']}: {g['generated_tokens']} tokens in {g['seconds']:.2f} s, "
          f"{g['generated_tokens_per_s']:,.0f} generated tokens/s", flush=True)
    report["machine"]["load_end"] = machine_load()
    report["seconds"] = time.perf_counter() - started
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"total {report['seconds']:.0f} s; {machine_load()}; figures in {args.out}")
    return 0 if c["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
