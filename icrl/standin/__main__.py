"""``python -m icrl.standin {openai,anthropic,gemini} [--port N] [--model NAME] [--window N]
[--silent | --stuck] [-- COMMAND ...]``: a stand-in on 127.0.0.1 (``icrl.standin``) until Ctrl-C,
or for the time of COMMAND (run with the stand-in's environment set)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import Optional, Sequence

from ..cli.standin import parse_standin_args
from ..errors import UsageError
from . import STANDINS, StandIn, start_standin


def lines(api: str, server: StandIn, silent: bool, stuck: bool) -> list[str]:
    """What the stand-in says it is, and what to set to reach it."""
    standin = STANDINS[api]
    how = ("accepts connections and answers nothing" if silent else
           "answers its model list and never a completion" if stuck else "answers from icrl's fake model")
    models = getattr(server, "models", None) or []
    return [f"stand-in for {standin.what} at {server.base_url} (127.0.0.1 only; not the service: it {how})",
            *([f"models: {', '.join(models)}"] if models else []),
            f"set: export {standin.url_variable}={server.base_url} {standin.key_variable}={standin.key}",
            f"or give: --backend {api} --base_url {server.base_url} --api_key {standin.key}"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    try:
        args, command = parse_standin_args(sys.argv[1:] if argv is None else argv)
        server = start_standin(args.api, args.model, args.port, args.window, args.silent, args.stuck)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # the port is taken
        print(f"error: cannot listen on 127.0.0.1:{args.port} ({exc.strerror or exc}); give another --port or 0",
              file=sys.stderr)
        return 2
    standin = STANDINS[args.api]
    with server:
        try:
            for line in lines(args.api, server, args.silent, args.stuck):
                print(line, file=sys.stderr if command else sys.stdout, flush=True)
            if command:
                return _run(command, {standin.url_variable: server.base_url, standin.key_variable: standin.key})
            print("Ctrl-C stops it", flush=True)
            threading.Event().wait()
        except KeyboardInterrupt:
            if command:  # the command had the Ctrl-C too, and said so
                return 130
            print("stand-in stopped", file=sys.stderr)
    return 0


def _run(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` with ``env`` added to the environment; its exit code."""
    try:
        return subprocess.run(command, env={**os.environ, **env}).returncode
    except FileNotFoundError:
        print(f"error: no such command: {command[0]}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))  # a stop ends it as Ctrl-C does, its server closed
    sys.exit(main())
