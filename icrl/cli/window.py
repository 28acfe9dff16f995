"""find_max_examples_given_max_window.py's command line: how many ICRL episodes fit in a
context window (the search: :mod:`icrl.run.window`)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING, Optional, Sequence, Union

from ..errors import UsageError
from ..run.window import WINDOW_FRACTION, MaxExamplesResult, search_max_examples
from ..infra.masking import register, scrub
from .parser import ArgumentParser, add_plugin_flag, parse_flags

if TYPE_CHECKING:
    from ..backends import Backend
    from ..backends.chat import ChatTokenizer
    from ..tasks import Task

API_COUNTERS = ("gemini", "anthropic")  # backends whose API counts tokens (count_many) for the search


def build_parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="find_max_examples_given_max_window.py", description=(
        "Print how many ICRL episodes fit in a context window for a model and a task, using "
        "the model's tokenizer and chat template only (worst case: longest prompts, longest "
        "label and feedback, 95% of the window). By default it prints what the published "
        "script prints and its runner uses: one more than the largest n that fits."))
    parser.add_argument("--model_name", required=True,
                        help="Hugging Face id (org/name), local tokenizer directory, or smollm2-135m")
    parser.add_argument("--task_name", required=True,
                        help="e.g. banking77, clinic150_top10_unsemantic, my/task.toml_top5")
    parser.add_argument("--max_window_tokens", type=int, default=None,
                        help="window in tokens (default: the model's maximum length)")
    parser.add_argument("--rope_scaling", default=None,
                        help="as run_experiment.py: auto (default; YaRN x4 over 32768 for Qwen2.5), none, "
                             "or TYPE:FACTOR:ORIGINAL_LEN; sets the default window")
    parser.add_argument("--data_dir", default=None,
                        help="raw dataset folder (default: $ICRL_DATA_DIR, else ../shared/datasets beside the "
                             "checkout, "
                             "else the Hugging Face Hub; README: Data)")
    parser.add_argument("--hf_token", default=None,
                        help="token for gated models on the hub, never stored (default: $HF_TOKEN)")
    parser.add_argument("--backend", choices=["local", *API_COUNTERS], default="local",
                        help="local: the model's tokenizer here (default); gemini: the Gemini API's token counter and "
                             "window (the key from $GEMINI_API_KEY, $GOOGLE_API_KEY or $API_KEY); anthropic: the "
                             "Anthropic API's token counter and window, where the API gives one (the key from "
                             "$ANTHROPIC_API_KEY)")
    parser.add_argument("--base_url", default=None,
                        help="--backend gemini or anthropic: another endpoint of that API (default: the provider's)")
    parser.add_argument("--api_key", default=None,
                        help="--backend gemini or anthropic: the API key, never stored (default: as run_experiment.py "
                             "reads it, from $GEMINI_API_KEY, $GOOGLE_API_KEY or $API_KEY, or $ANTHROPIC_API_KEY)")
    parser.add_argument("--no-icrl", dest="icrl", action="store_false",
                        help="search under the supervised ICL system prompt (as the published search "
                             "does for a --no-icrl run; default: the ICRL system prompt)")
    parser.add_argument("--largest_fitting", action="store_true",
                        help="print the largest n that fits instead of the published number (which "
                             "is n + 1, the context size the published runner uses)")
    parser.add_argument("--published_convention", action="store_true",
                        help="accepted for compatibility: the published number is the default now")
    parser.add_argument("--verbose", action="store_true",
                        help="also write the worst case and the token counts to stderr")
    add_plugin_flag(parser)
    return parser


def _short(text: str, limit: int = 200) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def main(argv: Optional[Sequence[str]] = None) -> int:
    start = time.perf_counter()
    try:
        args = parse_flags(build_parser, argv)
        register(args.api_key)  # never shown
        for flag in ("base_url", "api_key"):
            if getattr(args, flag) and args.backend not in API_COUNTERS:
                raise UsageError(f"--{flag} is for --backend gemini or anthropic: drop it, or add one of them")
        if args.max_window_tokens is not None and args.max_window_tokens <= 0:
            raise UsageError(f"--max_window_tokens must be positive, got {args.max_window_tokens}")
        from icrl.tasks import load_task  # the task first: a bad name fails before any tokenizer load

        task = load_task(args.task_name, data_dir=args.data_dir)
        _quiet_transformers()  # once the flags and the task are checked: transformers loads here
        chat = _load_chat(args.model_name, args.hf_token, args.rope_scaling) if args.backend == "local" else \
            _load_api(args.backend, args.model_name, args.base_url, args.max_window_tokens, args.api_key)
        try:
            # the window the Anthropic API gives (its backend alone has one)
            if args.backend == "anthropic" and args.max_window_tokens is None \
                    and not getattr(chat, "max_input_tokens", None):
                raise UsageError(f"the Anthropic API does not say the window of {args.model_name!r}: give "
                                 f"--max_window_tokens (its window in tokens, e.g. 200000)")
            result = search_max_examples(chat, task, args.max_window_tokens, icrl=args.icrl)
        finally:
            getattr(chat, "close", lambda: None)()
    except UsageError as exc:
        print(f"error: {scrub(str(exc).splitlines()[0]) if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    if args.verbose:
        _report(result, args, chat, task, time.perf_counter() - start)
    print(result.max_examples if args.largest_fitting else result.published_convention)
    return 0


def _quiet_transformers() -> None:
    """Silence warnings such as 'sequence length is longer than the maximum' (counting only)."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
    except Exception:  # noqa: BLE001 - transformers missing: the tokenizer load reports it
        pass


def _load_chat(model_name: str, hf_token: Optional[str], rope_scaling: Optional[str] = None) -> ChatTokenizer:
    from icrl.backends.chat import load_chat_tokenizer

    try:
        return load_chat_tokenizer(model_name, hf_token=hf_token, rope_scaling=rope_scaling)
    except UsageError:
        raise
    except Exception as exc:  # noqa: BLE001 - unreadable or incomplete tokenizer files
        first = str(exc).splitlines()[0] if str(exc) else ""
        raise UsageError(f"cannot load the tokenizer of {model_name!r} ({type(exc).__name__}: {first})") from None


def _load_api(backend: str, model_name: str, base_url: Optional[str], window: Optional[int],
              api_key: Optional[str] = None) -> Backend:
    """An API backend as the counter: its token counter, and its window (Gemini's from the API)."""
    from icrl.backends import load_backend

    extra = {"max_model_len": window} if backend == "anthropic" else {}  # Gemini's is checked against its API
    return load_backend(model_name, backend, base_url=base_url, api_key=api_key, **extra)


def _report(result: MaxExamplesResult, args: argparse.Namespace, chat: Union[ChatTokenizer, Backend], task: Task,
            seconds: float) -> None:
    n = result.max_examples
    lines = [
        f"model: {args.model_name} (maximum length {chat.max_model_len} tokens)",
        f"task: {task.name} ({result.num_prompts} prompts, {len(task.labels)} labels)",
        f"window: {result.window} tokens; bound: {result.bound:g} tokens ({WINDOW_FRACTION:.0%})",
        f"longest label: {result.longest_label!r} (with its feedback: {result.episode_label_tokens} tokens)",
        f"longest feedback: {result.feedback_text!r} "
        f"({'positive' if result.longest_feedback else 'negative'})",
        f"longest prompt: {_short(result.longest_prompt)} ({result.longest_prompt_tokens} tokens)",
        f"tokens at n={n}: {result.tokens} <= {result.bound:g}",
        (f"capped: all {result.num_prompts} prompts fit (n={n} episodes)" if result.capped
         else f"tokens at n={n + 1}: {result.tokens_next} > {result.bound:g}"),
        f"published convention (n + 1, the runner's default context size): {result.published_convention}",
        f"full prompts rendered: {result.renders}; time: {seconds:.2f} s",
    ]
    print("\n".join(lines), file=sys.stderr)
