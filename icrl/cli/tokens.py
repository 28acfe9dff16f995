"""run_count_tokens.py's command line (the counting: :mod:`icrl.analysis.tokens`, imported once the
flags are checked: a refusal comes before pandas loads)."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from ..errors import UsageError
from .parser import ArgumentParser, add_plugin_flag, parse_flags
from .report import check_data_dir


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog="run_count_tokens.py",
                description="Count the tokens of finished runs by replaying their records (no model is loaded): the "
                            "paper's processed tokens (the published run_count_tokens.py's figure), every prompt "
                            "token of the training and test calls, and what a perfect prefix cache would still "
                            "compute; for runs on hosted APIs, the usage their API recorded and its dollars.")
    p.add_argument("--data_dir", default="data", help="results root (as run_experiment.py --output_dir)")
    p.add_argument("--model", action="append", default=[], help="only runs of this model (repeatable)")
    p.add_argument("--task", action="append", default=[], help="only runs of this task (repeatable)")
    p.add_argument("--strategy", action="append", default=[],
                   help="only runs of this context strategy or method (e.g. explorative) (repeatable)")
    p.add_argument("--tokenizer", default=None,
                   help="count with this tokenizer (HF id, directory or smollm2-135m) (default: each run's own model)")
    p.add_argument("--csv", default=None, help="also write the combined table to this CSV file (default: none)")
    p.add_argument("--force", action="store_true", help="count again even when token_counts.json is current")
    p.add_argument("--full_tokenization", action="store_true",
                   help="tokenize every prompt whole (slower; the default is checked to give the same ids)")
    p.add_argument("--verify", type=int, default=32,
                   help="prompts per run, besides the first 8, also tokenized whole to check the incremental ids")
    p.add_argument("--explorative_p_keep", type=float, default=0.1, help="p_keep that names a run explorative")
    p.add_argument("--prices", metavar="FILE", default=None,
                   help="a price file (TOML, US dollars per million input, cached-input and output tokens per "
                        "model) for the dollars of runs on hosted APIs (default: the dated one shipped with icrl; "
                        "docs/backends.md)")
    add_plugin_flag(p)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args = parse_flags(build_parser, argv)
        if args.verify < 0:
            raise UsageError(f"--verify must be >= 0, got {args.verify}")
        if not 0 < args.explorative_p_keep <= 1:  # nan and inf too
            raise UsageError(f"--explorative_p_keep must be in (0, 1], got {args.explorative_p_keep}")
        check_data_dir(args.data_dir)
        from ..analysis.tokens import CountOptions, count_tokens  # pandas: only now

        return count_tokens(CountOptions(**{**vars(args), "model": tuple(args.model), "task": tuple(args.task),
                                            "strategy": tuple(args.strategy)}))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
