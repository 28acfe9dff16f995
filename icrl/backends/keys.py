"""An API backend's key: where it comes from (``--api_key``, else the first of the provider's
environment variables that is set) and the lines that name it when it is missing or refused.

    key = find_key(api_key, ("GEMINI_API_KEY", "GOOGLE_API_KEY", "API_KEY"))
    if not key: raise missing_key("Gemini", key)
    ... refused_key("Gemini", url, key, 400)   # names where the key came from

The key itself is registered for masking (``icrl.infra.masking``) as it is found: it is never
shown or written, whichever of the places it came from."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

from ..errors import UsageError
from ..infra.masking import register


@dataclass(frozen=True)
class ApiKey:
    """The key (None when there is none), where it came from ("--api_key" or a variable's name,
    "" when none) and the variables the provider reads, in order."""

    value: Optional[str] = field(repr=False)
    source: str
    variables: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.value)

    @property
    def where(self) -> str:
        """How a line says where a key goes: ``set GEMINI_API_KEY, GOOGLE_API_KEY or API_KEY, or
        pass --api_key``."""
        names = list(self.variables)
        either = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
        return f"set {either}{',' if len(names) > 1 else ''} or pass --api_key"


def find_key(api_key: Optional[str], variables: Sequence[str]) -> ApiKey:
    """``--api_key``, else the first variable of ``variables`` that is set (all of them masked)."""
    for name in variables:
        register(os.environ.get(name))
    register(api_key)
    if api_key:
        return ApiKey(api_key, "--api_key", tuple(variables))
    found = next((v for v in variables if os.environ.get(v)), "")
    return ApiKey(os.environ[found] if found else None, found, tuple(variables))


def missing_key(provider: str, key: ApiKey) -> UsageError:
    """One line for a run with no key at all."""
    return UsageError(f"no {provider} API key: {key.where}")


def refused_key(provider: str, url: str, key: ApiKey, status: Optional[int]) -> UsageError:
    """One line for a key the API refused, naming where it came from."""
    given = f"the API key from {key.source}" if key else "a request without an API key"
    return UsageError(f"the {provider} API at {url} refused {given} (HTTP {status}): {key.where} with a valid key")
