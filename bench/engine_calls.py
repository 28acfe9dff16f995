"""bench/cpu_engines.py's engine-specific parts: recording the demo's model calls, a bare
prefill on each engine, and the first-token log-probabilities of the labels.

- ``record_demo_calls``: `run_experiment.py` with no arguments (the demo's retrieval run) on the
  transformers backend, every ``predict`` call written down (prompts, labels, temperature, seed);
- ``prefill_seconds``: one prompt of n random tokens (the same on every engine), nothing cached;
- ``first_choice_logprobs``: per prompt, the log-probabilities over the whole vocabulary of the
  tokens a label may start with (the label trie's first step), from a plain computation of the
  whole prompt: torch's forward pass, llama.cpp's logits, vLLM's logprobs of one token.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

import icrl.backends as backends
from prefix_reuse import timed_runs  # the caller put bench/ on sys.path

VOCAB_SEED = 0


class Recorder:
    """A backend that writes down its predict() calls and passes them on."""

    def __init__(self, backend):
        self._backend = backend
        self.calls: list = []

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def predict(self, prompts, labels, temperature, seed, progress=None):
        self.calls.append({"prompts": list(prompts), "labels": list(labels), "temperature": temperature,
                           "seed": int(seed)})
        return self._backend.predict(prompts, labels, temperature, seed, progress)


def record_demo_calls(path: Path, data_dir=None) -> float:
    """Run the demo's retrieval run on torch and write its calls to ``path``; its wall seconds."""
    from icrl.cli.run import DEMO_ARGS
    from icrl.cli.run import main as run_experiment

    original = backends.load_backend
    recorder: list = []

    def load(*args, **kwargs):
        recorder.append(Recorder(original(*args, **kwargs)))
        return recorder[-1]

    backends.load_backend = load
    try:
        with tempfile.TemporaryDirectory() as tmp:
            argv = [*DEMO_ARGS[:-1], str(Path(tmp) / "demo"), "--no-progress", "--backend", "transformers"]
            argv += ["--data_dir", str(data_dir)] if data_dir else []
            tic = time.perf_counter()
            assert run_experiment(argv) == 0, "the demo's retrieval run failed"
            seconds = time.perf_counter() - tic
    finally:
        backends.load_backend = original
    path.write_text(json.dumps({"seconds": seconds, "calls": recorder[0].calls}))
    return seconds


def random_ids(n: int, vocab: int = 49152) -> list[int]:
    return np.random.default_rng(VOCAB_SEED).integers(100, vocab, n).tolist()


def prefill_seconds(engine: str, backend, n: int, reps: int) -> list[float]:
    """Seconds of ``reps`` prefills of n random tokens, after one warm-up."""
    return timed_runs(_prefill(engine, backend, random_ids(int(n))), reps)


def _prefill(engine: str, backend, ids):
    if engine.startswith("torch"):
        import torch

        tensor = torch.tensor([ids])

        def forward():
            with torch.inference_mode():
                backend.model(input_ids=tensor, use_cache=False, logits_to_keep=1)
        return forward
    if engine == "vllm":
        params = backend._vllm.SamplingParams(temperature=0.0, max_tokens=1)

        def generate():
            backend.reset_cache()
            backend.llm.generate([{"prompt_token_ids": ids}], params, use_tqdm=False)
        return generate

    def evaluate():
        backend.reset_cache()
        backend.logits(ids)
    return evaluate


def first_choice_logprobs(engine: str, backend, prompts, labels) -> list[list[float]]:
    """Per prompt, log-softmax over the vocabulary at the answer position, at the label trie's
    first options (sorted token ids)."""
    from icrl.backends.constrained import LabelTrie

    chat = backend.chat
    trie = LabelTrie(labels, chat.label_token_ids(labels, prompts[0].rsplit("\n", 1)[-1]), chat.eot_token_id)
    options = trie.options(trie.root)
    ids = [chat.encode_prompt(p) for p in prompts]
    if engine == "vllm":
        return _vllm_logprobs(backend, ids, options)
    out = []
    for x in ids:
        logits = _torch_logits(backend, x) if engine.startswith("torch") else backend.logits(x)
        z = logits.astype(np.float64)
        z = z - z.max()
        logp = z - np.log(np.exp(z).sum())
        out.append([float(logp[t]) for t in options])
    return out


def _torch_logits(backend, ids) -> np.ndarray:
    import torch

    with torch.inference_mode():
        return backend.model(input_ids=torch.tensor([ids]), logits_to_keep=1).logits[0, -1].float().numpy()


def _vllm_logprobs(backend, ids, options) -> list[list[float]]:
    """vLLM's log-probabilities of one greedy token, over the whole vocabulary (the engine was
    started with ``max_logprobs=-1``: ``engine_calls.uncapped_logprobs``)."""
    params = backend._vllm.SamplingParams(temperature=0.0, max_tokens=1, logprobs=-1)
    outputs = backend.llm.generate([{"prompt_token_ids": x} for x in ids], params, use_tqdm=False)
    return [[float(o.outputs[0].logprobs[0][t].logprob) for t in options] for o in outputs]


def uncapped_logprobs() -> None:
    """Start vLLM engines in this process with ``max_logprobs=-1`` (every token's log-probability
    may be asked for); only the log-probability check reads them."""
    from icrl.backends import vllm_backend

    original = vllm_backend.engine_args

    def engine_args(*args, **kwargs):
        return {**original(*args, **kwargs), "max_logprobs": -1}

    vllm_backend.engine_args = engine_args
