"""What the API backends (openai, anthropic, gemini) check before they send anything: that their
SDK is installed (``import_sdk``: the module, else the backend's one line saying how to install
it) and that the request limits make sense (``check_limits``: --max_concurrency, --timeout,
--max_retries and --first_answer_timeout)."""

from __future__ import annotations

import importlib
from types import ModuleType

from ..errors import UsageError


def import_sdk(module: str, install_hint: str) -> ModuleType:
    """``module`` imported; a UsageError of ``install_hint`` when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise UsageError(install_hint) from None


def check_limits(max_concurrency: int, timeout: float, max_retries: int, first_answer_timeout: float) -> None:
    """One line when a request limit is out of range: at least one request at a time, timeouts
    above 0, no negative number of retries."""
    if max_concurrency < 1 or timeout <= 0 or max_retries < 0 or first_answer_timeout <= 0:
        raise UsageError("--max_concurrency must be >= 1, --timeout and --first_answer_timeout > 0 and "
                         "--max_retries >= 0")
