"""``python -m icrl.standin``'s command line (the servers: :mod:`icrl.standin`): which API, its port
and models, how it misbehaves, and a command to run against it."""

from __future__ import annotations

import argparse
from typing import Sequence

from ..errors import UsageError
from .parser import ArgumentParser

APIS = ("openai", "anthropic", "gemini")


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="python -m icrl.standin",
        description="A local stand-in for a hosted API on 127.0.0.1: it speaks the API's protocol as its official "
                    "SDK sends it and answers from icrl's fake model, so --backend openai, anthropic or gemini runs "
                    "with no network and no key. It prints the --base_url and the environment to set and serves "
                    "until Ctrl-C; with a command after --, it runs that command with the environment set and stops "
                    "when the command ends (exit code: the command's).",
        epilog="example: python -m icrl.standin anthropic -- python run_experiment.py --backend anthropic "
               "--model_name claude-haiku-4-5 ...")
    p.add_argument("api", choices=APIS, help="the API it stands in for (the --backend it serves)")
    p.add_argument("--port", type=int, default=0, help="the port on 127.0.0.1 (default: 0, a free one)")
    p.add_argument("--model", action="append", default=[], metavar="NAME",
                   help="a model it serves (repeatable; default: the provider's models in icrl's default price file)")
    p.add_argument("--window", type=int, default=None,
                   help="the input window in tokens the API reports for its models (anthropic: 200000, gemini: "
                        "1048576; the stand-in counts words as tokens)")
    how = p.add_mutually_exclusive_group()
    how.add_argument("--silent", action="store_true",
                     help="accept connections and answer nothing at all (a hung or unreachable server)")
    how.add_argument("--stuck", action="store_true",
                     help="answer the model list or lookup, never a completion (a server up but stuck)")
    return p


def parse_standin_args(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    """(the stand-in's options, the command after ``--``: [] when none)."""
    words = list(argv)
    command = words[words.index("--") + 1:] if "--" in words else []
    args = build_parser().parse_args(words[:words.index("--")] if "--" in words else words)
    if not 0 <= args.port < 65536:
        raise UsageError(f"--port must be from 0 (a free one) to 65535, got {args.port}")
    if args.window is not None and (args.window < 1 or args.api == "openai"):
        raise UsageError("--window is the input window the anthropic or gemini stand-in reports: a positive number of "
                         "tokens (an OpenAI-compatible server reports none)")
    if "--" in words and not command:
        raise UsageError("nothing after --: give the command to run against the stand-in, or leave out --")
    return args, command

