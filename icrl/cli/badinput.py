"""Run arguments the audit found accepted silently or failing late (issue 25.6), refused up
front in one line (``check(args)``, called first by ``cli.validate``)."""

from __future__ import annotations

import argparse

from ..errors import UsageError

DTYPES = ("auto", "float32", "bfloat16", "float16", "half", "float")
MAX_WINDOW = 1 << 24  # 16M tokens: above any model's window; a bigger number is a typo


def check(args: argparse.Namespace) -> None:
    from ..method.strategies.base import REGISTRY as STRATEGIES  # registered ones included

    if not str(args.output_dir).strip():
        raise UsageError("--output_dir is empty; give the results folder (default: data)")
    if args.context_strategy_name is not None and args.context_strategy_name not in STRATEGIES:
        raise UsageError(f"unknown --context_strategy_name {args.context_strategy_name!r}; "
                         f"choose one of: {', '.join(STRATEGIES)}")
    if args.icrl_flip_feedback_prob is not None and not args.icrl_flip_feedback:
        raise UsageError("--icrl_flip_feedback_prob is set but --icrl_flip_feedback is not: add --icrl_flip_feedback, "
                         "or drop the probability")
    if args.icrl_omit_feedback and args.icrl is False:
        raise UsageError("--icrl_omit_feedback only applies to ICRL; drop it or use --icrl")
    if args.max_model_len is not None and args.max_model_len > MAX_WINDOW:
        raise UsageError(f"--max_model_len {args.max_model_len} is larger than any model's window "
                         f"(at most {MAX_WINDOW}); give the window in tokens, e.g. 8192")
    if args.base_url and args.backend not in ("openai", "auto"):
        raise UsageError(f"--base_url is for --backend openai, not {args.backend}; drop it or use --backend openai")
    if args.dtype not in DTYPES:
        raise UsageError(f"unknown --dtype {args.dtype!r}; use {', '.join(DTYPES[:4])}")

