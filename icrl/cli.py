"""Command line of run_experiment.py: the published flags, ours, the demo preset, validation.

Validation runs before any model loads and before anything is written; a bad combination
raises UsageError (one line; the script exits with code 2).
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Optional, Sequence

from .backends import BACKEND_CHOICES
from .backends.embedded import DEFAULT_MODEL
from .context import SAMPLING_METHODS, STRATEGY_NAMES
from .errors import ArgumentParser, UsageError
from . import badinput
from .masking import register_args
from .tasks import parse_task_name

# With no arguments at all, run_experiment.py runs this: SmolLM2 on TREC coarse with
# explorative ICRL, sized to finish in a few minutes on 2 CPU cores.
DEMO_ARGS = [
    "--model_name", DEFAULT_MODEL, "--task_name", "trec_coarse",
    "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.1",
    "--temperature", "1.0", "--max_context_examples", "16", "--icrl",
    "--train_k", "150", "--test_every", "50", "--test_k", "100",
    "--seed", "100", "--training_seed", "100", "--test_seed", "100", "--output_dir", "data/demo",
]

# Arguments that change how a run executes but not what it computes: they may differ
# between an interrupted run and its resumption.
RUNTIME_ARGS = frozenset({
    "verbose", "progress", "debug_k", "hf_token", "output_dir", "overwrite", "wandb", "batch_size",
    "data_dir", "tensor_parallel_size", "pipeline_parallel_size", "distributed_executor_backend",
    "gpu_memory_utilization", "enforce_eager", "ucb_alpha", "prob_reset", "p_exploration",
    "base_url", "api_key", "max_concurrency", "timeout", "max_retries",
})
# Never written to config.json, the log or the lock file.
SECRET_ARGS = frozenset({"hf_token", "api_key"})


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="run_experiment.py",
        description="Run one online ICRL (or ICL / zero-shot) experiment. With no arguments: the embedded demo.")
    bool_flag = argparse.BooleanOptionalAction
    pub = p.add_argument_group("published flags (same names and meaning as the paper's script)")
    pub.add_argument("--model_name", default=DEFAULT_MODEL,
                     help="Hugging Face id, local directory, or the embedded 'smollm2-135m'")
    pub.add_argument("--task_name", help="required: banking77, clinic150, clinic150_oos, trec_coarse, trec_fine, nlu "
                                         "[+ _top<K>][+ _unsemantic]")
    pub.add_argument("--context_strategy_name", help=f"required (not for zero-shot, --max_context_examples 0): one of "
                                                     f"{', '.join(STRATEGY_NAMES)}")
    pub.add_argument("--temperature", type=float, default=1.0,
                     help="sampling temperature of the model's label choice; 0 = greedy")
    pub.add_argument("--context_p_keep", type=float, default=1.0,
                     help="probability that each past episode is kept when the context is drawn (explorative "
                          "ICRL: 0.1)")
    pub.add_argument("--max_context_examples", type=int, default=None,
                     help="episodes in context; 0 = zero-shot; default: as many as fit the model window")
    pub.add_argument("--icrl", action=bool_flag, default=None,
                     help="required: ICRL (predictions + rewards) or --no-icrl, supervised ICL (the published "
                          "script silently runs supervised ICL when both are omitted)")
    pub.add_argument("--icrl_omit_feedback", action=bool_flag, default=False,
                     help="ICRL ablation: show the context episodes without their reward")
    pub.add_argument("--icrl_flip_feedback", action=bool_flag, default=False,
                     help="ICRL ablation: flip the shown reward with probability --icrl_flip_feedback_prob "
                          "(the recorded accuracy is not flipped)")
    pub.add_argument("--icrl_flip_feedback_prob", type=float, default=None,
                     help="probability of flipping a shown reward, in [0, 1]; required with --icrl_flip_feedback")
    pub.add_argument("--max_contexts", type=int, default=-1, help="approximate strategies: number of contexts K")
    pub.add_argument("--approximate_context_sampling_method", default=None,
                     help=f"approximate strategies: {' or '.join(SAMPLING_METHODS)} (required with them)")
    pub.add_argument("--train_k", type=int, default=-1,
                     help="training steps (-1 or omitted: the whole training split, as published)")
    pub.add_argument("--test_every", type=int, default=500,
                     help="test every this many steps (and always at the first and the last step)")
    pub.add_argument("--test_k", type=int, default=-1,
                     help="test examples (-1 or omitted: the whole test split, as published)")
    pub.add_argument("--exemplars_per_label", type=int, default=0, help="gold exemplars per label, first in every context")
    pub.add_argument("--debug_k", type=int, default=0, help="log the full prompt and output of the first k model calls")
    pub.add_argument("--seed", type=int, default=None,
                     help="required: seeds the context draws and the model's sampling (the paper: 100)")
    pub.add_argument("--training_seed", type=int, default=None,
                     help="required: seeds the order of the training examples and the exemplars (the paper: 100)")
    pub.add_argument("--test_seed", type=int, default=None,
                     help="required: seeds which test examples are used (the paper: 100)")
    pub.add_argument("--hf_token", default=None,
                     help="for gated models; never written to disk (default: $HF_TOKEN)")
    pub.add_argument("--verbose", action=bool_flag, default=False,
                     help="also show the run's log (as in log.txt) on the console")
    for name in ("ucb_alpha", "prob_reset", "p_exploration"):
        pub.add_argument(f"--{name}", type=float, default=None,
                         help="accepted for compatibility with the published script; changes nothing")
    ours = p.add_argument_group("icrl options")
    ours.add_argument("--backend", default="auto", choices=BACKEND_CHOICES,
                      help="auto: vLLM when installed and a CUDA GPU is visible, else transformers")
    ours.add_argument("--data_dir", default=None, help="raw dataset files (default: $ICRL_DATA_DIR, else the Hugging Face Hub)")
    ours.add_argument("--output_dir", default="data", help="results root")
    ours.add_argument("--overwrite", action="store_true", help="replace an existing run with other arguments")
    ours.add_argument("--batch_size", type=int, default=8, help="transformers backend: prompts per forward pass")
    ours.add_argument("--device", default=None, help="transformers backend: cpu, cuda, cuda:1 ... (default: cuda if visible)")
    ours.add_argument("--dtype", default="auto", help="auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16, float16")
    ours.add_argument("--eot_token", default=None, help="end-of-turn token (default: read from the tokenizer)")
    ours.add_argument("--max_model_len", type=int, default=None, help="context window in tokens (default: the model's maximum length)")
    ours.add_argument("--published_tokenization", action="store_true",
                      help="reproduce the published stack's tokenization quirks on any backend, for exact "
                           "replication: a second begin-of-text token on Llama-3 prompts (vLLM 0.6.4 text "
                           "prompts) and labels forced as encode(' ' + label) (an extra '▁' token on Phi-3.5)")
    ours.add_argument("--progress", action=bool_flag, default=True, help="progress bar (--no-progress: logs only)")
    ours.add_argument("--wandb", action="store_true", help="also log to Weights & Biases, offline mode")
    gpu = p.add_argument_group("vLLM options")
    gpu.add_argument("--tensor_parallel_size", type=int, default=None, help="default: all visible GPUs")
    gpu.add_argument("--pipeline_parallel_size", type=int, default=1, help="pipeline stages (GPUs or nodes)")
    gpu.add_argument("--distributed_executor_backend", default=None, choices=["mp", "ray"],
                     help="mp (one node) or ray (several nodes) (default: vLLM's choice)")
    gpu.add_argument("--gpu_memory_utilization", type=float, default=None,
                     help="share of memory for vLLM (default: 0.9 of the GPU memory; on the CPU build, a 4 GiB "
                          "KV cache, at most a third of the free memory, given as a share of the whole memory)")
    gpu.add_argument("--enforce_eager", action=argparse.BooleanOptionalAction, default=None,
                     help="vLLM without CUDA graphs / compilation (default: on for the CPU build, off on GPUs)")
    ours.add_argument("--rope_scaling", default=None,
                      help="RoPE scaling, both backends: TYPE:FACTOR:ORIGINAL_LEN (e.g. yarn:4.0:32768), none, or "
                           "auto (default): as published, yarn:4.0:32768 for any model whose name contains Qwen2.5 "
                           "(window 131072), none for the others")
    api = p.add_argument_group("server and API options (--backend openai)")
    api.add_argument("--base_url", default=None,
                     help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (vllm serve) (default: $OPENAI_BASE_URL)")
    api.add_argument("--api_key", default=None, help="API key, never written to disk (default: $OPENAI_API_KEY)")
    api.add_argument("--api_model", default=None, help="model name the server knows (default: --model_name)")
    api.add_argument("--api_mode", default="auto", choices=["auto", "completions", "chat"],
                     help="completions: prompt rendered here (chat template + prediction prefix) with a "
                          "structured-output choice; chat: messages with a JSON-schema enum of the labels; "
                          "auto: completions when the server supports it")
    api.add_argument("--max_concurrency", type=int, default=32, help="requests in flight at once")
    api.add_argument("--timeout", type=float, default=600.0, help="seconds per request")
    api.add_argument("--max_retries", type=int, default=5, help="retries (with backoff) on 429, 5xx, timeouts")
    return p


def validate(args: argparse.Namespace) -> None:
    """Reject bad combinations with a one-line UsageError (nothing loaded, nothing written)."""
    badinput.check(args)  # issue 25.6: combinations once accepted silently
    if not args.task_name:
        raise UsageError("--task_name is required (e.g. banking77); run with no arguments for the demo")
    parse_task_name(args.task_name)
    if args.max_context_examples == 0:
        args.context_strategy_name = None  # zero-shot has no context: any strategy is the same run
    elif not args.context_strategy_name:
        raise UsageError(f"--context_strategy_name is required; choose one of: {', '.join(STRATEGY_NAMES)}")
    if args.context_strategy_name is not None and args.context_strategy_name not in STRATEGY_NAMES:
        raise UsageError(f"unknown --context_strategy_name {args.context_strategy_name!r}; "
                         f"choose one of: {', '.join(STRATEGY_NAMES)}")
    if args.context_strategy_name and args.context_strategy_name.startswith("approximate"):
        if args.max_contexts is None or args.max_contexts < 1:
            raise UsageError(f"{args.context_strategy_name} needs --max_contexts >= 1 (e.g. 8)")
        if args.approximate_context_sampling_method not in SAMPLING_METHODS:
            raise UsageError(f"{args.context_strategy_name} needs --approximate_context_sampling_method "
                             f"{' or '.join(SAMPLING_METHODS)}")
    if args.icrl is None:
        raise UsageError("pass --icrl (in-context RL) or --no-icrl (supervised ICL): the published script "
                         "silently runs supervised ICL when both are omitted")
    unseeded = [f"--{name}" for name in ("seed", "training_seed", "test_seed") if getattr(args, name) is None]
    if unseeded:
        raise UsageError(f"pass {', '.join(unseeded)} (the paper uses 100 for each): the published script "
                         f"runs unseeded when they are omitted")
    if not (0 < args.context_p_keep <= 1):
        raise UsageError(f"--context_p_keep must be in (0, 1], got {args.context_p_keep}")
    if args.icrl_flip_feedback:
        q = args.icrl_flip_feedback_prob
        if q is None or math.isnan(q) or not 0 <= q <= 1:
            raise UsageError("--icrl_flip_feedback needs --icrl_flip_feedback_prob in [0, 1]")
        if not args.icrl:
            raise UsageError("--icrl_flip_feedback only applies to ICRL; drop it or use --icrl")
    if args.test_every is None or args.test_every <= 0:
        raise UsageError(f"--test_every must be a positive number of steps, got {args.test_every}")
    if not 0 <= args.temperature < math.inf:
        raise UsageError(f"--temperature must be a finite number >= 0, got {args.temperature}")
    if args.max_model_len is not None and args.max_model_len < 1:
        raise UsageError(f"--max_model_len must be a positive number of tokens, got {args.max_model_len}")
    if args.max_context_examples is not None and args.max_context_examples < 0:
        raise UsageError(f"--max_context_examples must be >= 0, got {args.max_context_examples}")
    for name in ("train_k", "test_k"):
        value = getattr(args, name)
        if value == 0 or value < -1:
            raise UsageError(f"--{name} must be positive or -1 (all), got {value}")
    if args.exemplars_per_label < 0:
        raise UsageError(f"--exemplars_per_label must be >= 0, got {args.exemplars_per_label}")
    if args.debug_k < 0 or args.batch_size < 1:
        raise UsageError("--debug_k must be >= 0 and --batch_size >= 1")
    if min(args.seed, args.training_seed, args.test_seed) < 0:
        raise UsageError("seeds must be >= 0")
    if not args.icrl and (args.context_strategy_name or "").endswith(("_only_positive", "_only_negative")):
        raise UsageError("supervised ICL (--no-icrl) episodes have no feedback to filter on; "
                         "use an unfiltered strategy such as random_unbiased")
    validate_backend_flags(args)
    if args.backend != "openai":
        validate_model_path(args.model_name)
        validate_device(args.device)


def validate_backend_flags(args: argparse.Namespace) -> None:
    """The vLLM flags are checked whatever the backend, so a typo never waits for a GPU run."""
    if args.max_concurrency < 1 or not args.timeout > 0 or args.max_retries < 0:
        raise UsageError("--max_concurrency must be >= 1, --timeout > 0 and --max_retries >= 0")
    from .backends.vllm_backend import engine_args  # pure functions; vLLM itself is not imported

    engine_args(args.model_name, tensor_parallel_size=args.tensor_parallel_size,
                pipeline_parallel_size=args.pipeline_parallel_size,
                distributed_executor_backend=args.distributed_executor_backend,
                gpu_memory_utilization=args.gpu_memory_utilization, rope_scaling=args.rope_scaling)


def validate_model_path(name: str) -> None:
    """A local model directory must exist and hold a model (not reported as a failed download)."""
    path = Path(name).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        return
    if path.is_dir():
        if not (path / "config.json").is_file() and not any(path.glob("*.gguf")):
            raise UsageError(f"--model_name {name!r} is a folder without a model (no config.json in it)")
        return
    from . import hub
    from .backends.chat import looks_like_path
    from .backends.embedded import EMBEDDED_MODELS

    if looks_like_path(name):
        raise UsageError(f"--model_name {name!r}: no such local folder")
    if name in EMBEDDED_MODELS:
        return
    if not hub.plausible_id(name):
        raise UsageError(f"unknown --model_name {name!r}: give a Hugging Face id (org/name), a local directory, "
                         f"or the embedded {', '.join(EMBEDDED_MODELS)}")
    if hub.offline() and not hub.model_cached(name):
        raise UsageError(f"--model_name {name!r} is not available offline: HF_HUB_OFFLINE is set and it is not in "
                         f"the Hugging Face cache ({hub.hub_cache()}); go online to download it once, or give a "
                         f"local directory")
    if not hub.offline() and not hub.model_cached(name):
        why = hub.unreachable()
        if why is not None:
            raise UsageError(f"cannot download --model_name {name!r} from the Hugging Face Hub ({why}); go online, "
                             f"or give a local directory")


def validate_device(device: Optional[str]) -> None:
    """--device cuda / cuda:N needs that GPU to be visible (checked before any data or model loads)."""
    if not device or not device.startswith("cuda"):
        return
    import torch

    from .backends.hf import _check_device

    _check_device(torch, device)


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    """Parse and validate; an empty argument list means the demo preset."""
    argv = list(argv or [])
    parser = build_parser()
    args = parser.parse_args(argv if argv else DEMO_ARGS)
    args.demo = not argv
    register_args(args)  # its secrets are masked wherever they would be written or shown
    validate(args)
    return args


def identity(args: argparse.Namespace) -> dict:
    """The arguments that define what a run computes (compared when resuming)."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in RUNTIME_ARGS and k not in SECRET_ARGS
            and k != "demo"}
