"""vLLM backend for GPUs: prefix caching and structured-output label choice.

vLLM is optional (`pip install -e .[vllm]`). This module imports without it; everything that
does not need vLLM itself (choice list, parameter mapping, engine arguments, output parsing)
is a plain function, so it is tested on machines without a GPU.
"""

from __future__ import annotations

import importlib
from typing import Optional, Sequence

from ..errors import UsageError
from . import ChatBackend
from .chat import load_chat_tokenizer

INSTALL_HINT = "install the GPU extra: pip install -e .[vllm] (or pip install -r requirements-gpu.txt)"
EXECUTOR_BACKENDS = ("mp", "ray")


def choices(labels: Sequence[str]) -> list[str]:
    """What the model may write after the prefix: a space, then one label."""
    return [" " + label for label in labels]


def parse_output(text: str, labels: Sequence[str]) -> str:
    """Map a generated text back to its label (structured outputs guarantee a match)."""
    label = text.strip()
    if label not in labels:
        raise RuntimeError(f"vLLM returned {text!r}, which is not one of the {len(labels)} labels")
    return label


def max_label_tokens(labels: Sequence[str]) -> int:
    """A token budget no tokenization of a choice can exceed: structured outputs accept any
    tokenization of ` <label>`, not only the canonical one, and a token holds at least one
    byte; plus one for the end-of-turn token."""
    return max(len(choice.encode("utf-8")) for choice in choices(labels)) + 1


def sampling_kwargs(temperature: float, seed: int, max_tokens: int) -> dict:
    """Plain SamplingParams arguments; temperature 0 is greedy in vLLM."""
    if temperature < 0:
        raise UsageError(f"--temperature must be >= 0, got {temperature}")
    return {"temperature": float(temperature), "seed": int(seed), "max_tokens": int(max_tokens)}


def make_sampling_params(vllm, labels: Sequence[str], temperature: float, seed: int, max_tokens: int):
    """SamplingParams restricted to the labels: `structured_outputs=StructuredOutputsParams(choice=...)`
    on vLLM >= 0.12, `guided_decoding=GuidedDecodingParams(choice=...)` on older versions."""
    params = importlib.import_module("vllm.sampling_params")
    kwargs = sampling_kwargs(temperature, seed, max_tokens)
    if hasattr(params, "StructuredOutputsParams"):
        return vllm.SamplingParams(**kwargs, structured_outputs=params.StructuredOutputsParams(choice=choices(labels)))
    return vllm.SamplingParams(**kwargs, guided_decoding=params.GuidedDecodingParams(choice=choices(labels)))


def parse_rope_scaling(spec: Optional[str], rope_theta: Optional[float] = None,
                       transformers_major: int = 5) -> dict:
    """`yarn:4.0:32768` -> `hf_overrides` for long-context RoPE scaling (as the paper used for Qwen2.5).

    transformers >= 5 configs read `rope_parameters`; older ones read `rope_scaling`.
    The model length becomes factor x original length.
    """
    if not spec:
        return {}
    parts = spec.split(":")
    try:
        kind, factor, original = parts[0], float(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        raise UsageError(f"--rope_scaling {spec!r} is not TYPE:FACTOR:ORIGINAL_LENGTH, e.g. yarn:4.0:32768") from None
    if kind not in ("yarn", "dynamic", "linear") or factor <= 1 or original <= 0:
        raise UsageError(f"--rope_scaling {spec!r}: type must be yarn, dynamic or linear, factor > 1, length > 0")
    scaling = {"rope_type": kind, "factor": factor, "original_max_position_embeddings": original}
    if transformers_major >= 5:
        if rope_theta is not None:
            scaling["rope_theta"] = rope_theta
        overrides = {"rope_parameters": scaling}
    else:
        overrides = {"rope_scaling": scaling}
        if rope_theta is not None:
            overrides["rope_theta"] = rope_theta
    overrides["max_model_len"] = int(original * factor)
    return overrides


def engine_args(model: str, *, tensor_parallel_size: Optional[int] = None, visible_gpus: int = 1,
                pipeline_parallel_size: int = 1, distributed_executor_backend: Optional[str] = None,
                max_model_len: Optional[int] = None, gpu_memory_utilization: float = 0.9,
                dtype: str = "auto", seed: int = 0, rope_scaling: Optional[str] = None,
                rope_theta: Optional[float] = None, transformers_major: int = 5) -> dict:
    """Keyword arguments for `vllm.LLM`; prefix caching is always on (approximate ICRL relies on it)."""
    tp = max(1, visible_gpus) if tensor_parallel_size is None else tensor_parallel_size
    if tp < 1 or pipeline_parallel_size < 1:
        raise UsageError("--tensor_parallel_size and --pipeline_parallel_size must be at least 1")
    if distributed_executor_backend not in (None, *EXECUTOR_BACKENDS):
        raise UsageError(f"--distributed_executor_backend must be one of {', '.join(EXECUTOR_BACKENDS)}")
    if not 0 < gpu_memory_utilization <= 1:
        raise UsageError(f"--gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    args = {"model": model, "tensor_parallel_size": tp, "pipeline_parallel_size": pipeline_parallel_size,
            "gpu_memory_utilization": gpu_memory_utilization, "dtype": dtype, "seed": seed,
            "enable_prefix_caching": True}
    if distributed_executor_backend:
        args["distributed_executor_backend"] = distributed_executor_backend
    overrides = parse_rope_scaling(rope_scaling, rope_theta, transformers_major)
    if overrides:
        args["hf_overrides"] = overrides
    if max_model_len or overrides.get("max_model_len"):
        args["max_model_len"] = max_model_len or overrides["max_model_len"]
    return args


def import_vllm():
    try:
        return importlib.import_module("vllm")
    except ImportError:
        raise UsageError(f"the vllm backend needs vLLM, which is not installed: {INSTALL_HINT}") from None


class VLLMBackend(ChatBackend):
    name = "vllm"

    def __init__(self, model_name: str, *, hf_token: Optional[str] = None, max_model_len: Optional[int] = None,
                 eot_token: Optional[str] = None, tensor_parallel_size: Optional[int] = None,
                 pipeline_parallel_size: int = 1, distributed_executor_backend: Optional[str] = None,
                 gpu_memory_utilization: float = 0.9, dtype: str = "auto", seed: int = 0,
                 rope_scaling: Optional[str] = None, rope_theta: Optional[float] = None, **_ignored):
        vllm = import_vllm()
        import torch
        import transformers

        chat = load_chat_tokenizer(model_name, hf_token=hf_token, eot_token=eot_token, max_model_len=max_model_len)
        super().__init__(model_name, chat)
        model = str(chat.directory) if chat.directory else model_name
        self.args = engine_args(
            model, tensor_parallel_size=tensor_parallel_size, visible_gpus=torch.cuda.device_count(),
            pipeline_parallel_size=pipeline_parallel_size,
            distributed_executor_backend=distributed_executor_backend, max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, seed=seed, rope_scaling=rope_scaling,
            rope_theta=rope_theta, transformers_major=int(transformers.__version__.split(".")[0]))
        if "max_model_len" in self.args:
            chat.max_model_len = self.args["max_model_len"]
        self._vllm = vllm
        self.llm = vllm.LLM(**self.args)

    def describe(self) -> dict:
        return {**super().describe(), "engine_args": {k: v for k, v in self.args.items() if k != "model"}}

    def predict(self, prompts, labels, temperature, seed):
        if not prompts:
            return []
        params = make_sampling_params(self._vllm, labels, temperature, seed, max_tokens=max_label_tokens(labels))
        # Token ids, not text: the rendered template already holds its begin-of-text token.
        requests = [{"prompt_token_ids": self.chat.encode(p)} for p in prompts]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        return [parse_output(o.outputs[0].text, labels) for o in outputs]

