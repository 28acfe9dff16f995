"""bench/gpu.py's retrieval and reasoning steps, and the check of the reasoning step's text.

- retrieval: a test step of a retrieval strategy (``knn_*_only_positive``): every test input
  has its own context of the k rewarded episodes most similar to it, most similar last, so the
  prompts share no prefix beyond the system prompt and the step is one padded batch after
  another. The contexts are drawn by word overlap (cosine of hashed bags of words) from a pool
  of banking77 training inputs answered right: the embedding model does not travel to a lent
  GPU, and the shape of the step (no shared prefix, k episodes each) is what is measured.
- reasoning: ``--reasoning N`` at a test step: prompts on one shared context, each generating N
  tokens of free text (``generate``) before its label; generated tokens/s.
- reasoning check: at temperature 0, ``generate``'s text (shared prefix reused, rows padded in
  batches) equals a plain forward pass's greedy continuation, token by token, with no cache.
"""

from __future__ import annotations

import re
import time
import zlib

import numpy as np

from icrl.method.episode import Episode
from icrl.method.prompts import build_messages

WORD = re.compile(r"[a-z0-9']+")
BUCKETS = 4096


def _bag(text: str) -> np.ndarray:
    vector = np.zeros(BUCKETS)
    for word in WORD.findall(text.lower()):
        vector[zlib.crc32(word.encode()) % BUCKETS] += 1.0
    norm = np.linalg.norm(vector)
    return vector / norm if norm else vector


def retrieval_prompts(task, backend, count: int, k: int = 16, pool: int = 400) -> list[str]:
    """``count`` rendered banking77 test prompts, each after its own ``k`` most similar rewarded
    episodes of a ``pool`` of training inputs (most similar last)."""
    episodes = []
    for example in task.training_examples(size=pool, seed=0):
        answer = task.answer(example)
        episodes.append(Episode(task.prompt(example), answer, 1, answer, 1))
    vectors = np.stack([_bag(e.prompt) for e in episodes])
    prompts = []
    for example in task.test_examples(size=count, seed=0):
        prompt = task.prompt(example)
        scores = vectors @ _bag(prompt)
        chosen = np.argsort(-scores, kind="stable")[:k][::-1]  # best first, then reversed: most similar last
        messages, prefix = build_messages(task, [episodes[i] for i in chosen], prompt, "icrl",
                                          supports_system_role=backend.supports_system_role)
        prompts.append(backend.render(messages, prefix))
    return prompts


def retrieval_step(backend, prompts, labels, matmul: float, flops) -> dict:
    """One retrieval test step through ``predict``: prompt tokens/s and FLOP/s as a share of the
    matrix rate (``flops(model, stats)``: bench/gpu.py's count)."""
    from icrl.backends import common_prefix_length

    backend.predict(prompts[:2], labels, 0.0, 0)  # first-call overheads
    ids = [backend.chat.encode_prompt(p) for p in prompts]
    shared = min(common_prefix_length(ids[0], x) for x in ids[1:]) if len(ids) > 1 else len(ids[0])
    backend.reset_cache()
    before = dict(backend.stats)
    tic = time.perf_counter()
    backend.predict(prompts, labels, 0.0, 0)
    _sync(backend.device)
    seconds = time.perf_counter() - tic
    step = {key: backend.stats[key] - before[key] for key in before}
    used = flops(backend.model, step)
    return {"prompts": len(prompts), "shared_prefix_tokens": shared,
            "mean_prompt_tokens": step["prompt_tokens"] / len(prompts), "prompt_tokens": step["prompt_tokens"],
            "computed_tokens": step["computed_tokens"], "model_calls": step["model_calls"],
            "batch_size": backend.last_rows, "seconds": seconds,
            "prompt_tokens_per_s": step["prompt_tokens"] / seconds, "flop_per_s": used / seconds,
            "share_of_matmul": used / seconds / matmul}


def reasoning_step(backend, prompts, tokens: int) -> dict:
    """``generate`` ``tokens`` tokens after each prompt (greedy; no stop string): generated
    tokens/s (a random model may end its turn early: the tokens it wrote are counted)."""
    backend.generate(prompts[:2], 2, 0.0, 0)  # first-call overheads
    backend.reset_cache()
    tic = time.perf_counter()
    written = backend.generate(prompts, tokens, 0.0, 0)
    _sync(backend.device)
    seconds = time.perf_counter() - tic
    generated = sum(g.tokens for g in written)
    return {"prompts": len(prompts), "max_tokens": tokens, "generated_tokens": generated,
            "batch_size": backend.last_rows, "seconds": seconds, "generated_tokens_per_s": generated / seconds}


def reasoning_check(model, backend, prompts, tokens: int) -> dict:
    """``backend.generate`` at temperature 0 against a plain forward pass's greedy continuation
    (whole prompt and the tokens so far, no cache), prompt by prompt."""
    import torch

    chat = backend.chat
    got = backend.generate(prompts, tokens, 0.0, 0)
    equal = 0
    for prompt, generated in zip(prompts, got):
        ids, written = chat.encode_prompt(prompt), []
        for _ in range(tokens):
            with torch.inference_mode():
                logits = model(input_ids=torch.tensor([ids + written], device=backend.device)).logits[0, -1]
            token = int(np.argmax(logits.float().cpu().numpy()))
            if token == chat.eot_token_id:
                break
            written.append(token)
        equal += generated.text == chat.decode(written)
    return {"prompts": len(prompts), "tokens": tokens, "equal": equal, "passed": equal == len(prompts)}


def _sync(device) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()
