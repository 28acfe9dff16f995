"""Stand-ins for the hosted APIs: local servers on 127.0.0.1 that speak each API's protocol as its
official SDK sends it and answer from icrl's fake model, so a hosted backend can be tried, and
is tested, with no network and no key (docs/backends.md, "Trying a hosted backend offline").

    python -m icrl.standin anthropic                  # serves until Ctrl-C; prints what to set
    python -m icrl.standin gemini -- python run_experiment.py --backend gemini ...   # one command

``STANDINS``: per API, how its stand-in starts and what a run sets to reach it (the
``--base_url``, the environment variables of the URL and the key). ``start_standin(api, ...)``
starts one: ``openai_server.FakeOpenAIServer``, ``anthropic_server.FakeAnthropicServer`` or
``gemini_server.GeminiServer``; ``silent=True`` a server that accepts connections and answers
nothing (``openai_server.SilentServer``), ``stuck=True`` one that answers its model list or
lookup and never a completion. The tests use the same classes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence, Union

from . import anthropic_server, gemini_server, openai_server
from .http import Served

# A stand-in: one that answers (``Served``), or one that accepts connections and answers nothing.
StandIn = Union[Served, openai_server.SilentServer]


@dataclass(frozen=True)
class HostedApi:
    api: str  # the --backend it stands in for
    what: str  # the API, in words
    key: str  # the key it takes
    url_variable: str  # the environment variable of the URL the backend reads
    key_variable: str  # ... and of the key
    prefix: str  # its models' names start with this (the default price file's models it serves)
    make: Callable[[list[str], int, Optional[int], bool], Served]  # (models, port, window, stuck) -> the server
    path: str = ""  # what the base URL has after host:port


def _openai(models: list[str], port: int, window: Optional[int], stuck: bool) -> Served:
    return openai_server.FakeOpenAIServer("hang" if stuck else "ok", key=OPENAI_KEY, models=models, port=port)


def _anthropic(models: list[str], port: int, window: Optional[int], stuck: bool) -> Served:
    return anthropic_server.FakeAnthropicServer(models=models, port=port, window=window or 200_000,
                                                fail_all="hang" if stuck else None)


def _gemini(models: list[str], port: int, window: Optional[int], stuck: bool) -> Served:
    return gemini_server.GeminiServer("hang" if stuck else "ok", models=models, port=port,
                                      window=window or 1_048_576)


OPENAI_KEY = "sk-standin-openai"
STANDINS = {
    "openai": HostedApi("openai", "an OpenAI-compatible chat API", OPENAI_KEY, "OPENAI_BASE_URL", "OPENAI_API_KEY",
                      "gpt-", _openai, "/v1"),
    "anthropic": HostedApi("anthropic", "Anthropic's Messages API", anthropic_server.KEY, "ANTHROPIC_BASE_URL",
                         "ANTHROPIC_API_KEY", "claude-", _anthropic),
    "gemini": HostedApi("gemini", "Google's Gemini API", gemini_server.KEY, "GOOGLE_GEMINI_BASE_URL", "GEMINI_API_KEY",
                      "gemini-", _gemini),
}


def default_models(api: str) -> list[str]:
    """The models a stand-in serves unless told: those of its provider in the default price file."""
    from ..backends.prices import load_prices

    return sorted(name for name in load_prices(None).models if name.startswith(STANDINS[api].prefix))


def start_standin(api: str, models: Sequence[str] = (), port: int = 0, window: Optional[int] = None,
                  silent: bool = False, stuck: bool = False) -> StandIn:
    """The stand-in of ``api`` (a context manager: ``with start_standin("gemini") as server: server.base_url``)."""
    standin = STANDINS[api]
    if silent:
        return _Silent(port, standin.path)
    return standin.make(list(models) or default_models(api), port, window, stuck)


class _Silent(openai_server.SilentServer):
    """A server that accepts connections and never answers, at the base URL of its API."""

    def __init__(self, port: int, path: str) -> None:
        super().__init__(port)
        self.base_url = f"http://{openai_server.HOST}:{self.port}{path}"
