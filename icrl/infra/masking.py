"""Secrets never reach a file or the terminal.

- ``mask_words(words)``: a command line with the values of the secret flags replaced by
  ``***``, whatever spelling argparse accepts for them: ``--api_key K``, ``--api_key=K`` and
  every abbreviation (``--api_k``, ``--hf_tok=T``), resolved like the parser resolves them
  (a word that could only abbreviate a secret flag is one; an ambiguous prefix of one is
  masked too, to be safe). Each value masked is also remembered (``register``).
- ``strip_userinfo(url)``: ``http://user:pass@host/v1`` -> ``http://host/v1``.
- ``scrub(value)``: any string, list or dict with every remembered secret replaced by ``***``
  and the user info of every URL in it removed; used on records, summaries and log lines
  (``ScrubFilter`` for logging handlers).

Secrets are remembered per process: the values of ``--hf_token`` / ``--api_key`` once parsed
(``register_args``), ``$OPENAI_API_KEY`` / ``$HF_TOKEN``, and passwords found in URLs.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Iterable, Mapping, Optional, TypeVar, overload
from urllib.parse import urlsplit, urlunsplit

# The flags whose values are secrets: the fields of icrl.config.Secrets (it checks they agree).
SECRET_OPTIONS = ("--hf_token", "--api_key")
SECRET_ENV = ("OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
MASK = "***"
_URL_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<info>[^/@\s'\"]*)@")
_secrets: set[str] = set()
_T = TypeVar("_T")


def register(value: Optional[str]) -> None:
    """Remember a secret so that ``scrub`` removes it wherever it appears (short values,
    under 4 characters, are not searched for: they would mask ordinary words)."""
    if isinstance(value, str) and len(value) >= 4:
        _secrets.add(value)


def register_args(values: Mapping[str, Any]) -> None:
    """The secrets of parsed run arguments (the parser's values; and of the environment, and
    URL passwords)."""
    for flag in SECRET_OPTIONS:
        register(values.get(flag[2:]))
    for name in SECRET_ENV:
        register(os.environ.get(name))
    _register_url(values.get("base_url"))


def _register_url(url: Optional[str]) -> None:
    if not isinstance(url, str):
        return
    for match in _URL_USERINFO.finditer(url):
        user, _, password = match.group("info").partition(":")
        register(password)


def is_secret_option(word: str, options: Optional[Iterable[str]] = None, all_options: Iterable[str] = ()) -> bool:
    """Whether the option part of ``word`` (before ``=``) names a secret flag as argparse would
    resolve it: exactly, or as a prefix (abbreviation) of one. ``all_options``: the parser's
    option strings; an exact match of another option is not a secret."""
    options = SECRET_OPTIONS if options is None else list(options)
    flag = word.split("=", 1)[0]
    if not flag.startswith("--") or len(flag) < 3:
        return False
    if flag in options:
        return True
    if flag in set(all_options):
        return False
    return any(option.startswith(flag) for option in options)


def mask_words(words: Iterable[str], all_options: Iterable[str] = ()) -> list[str]:
    """``words`` with every secret flag's value replaced by ``***`` (see the module docstring),
    URL user info removed and any remembered secret masked."""
    out, hide = [], False
    for word in map(str, words):
        if hide:
            register(word)
            out.append(MASK)
            hide = False
            continue
        if word == "--":
            out.append(word)
            continue
        if is_secret_option(word, all_options=all_options):
            flag, eq, value = word.partition("=")
            if eq:
                register(value)
                word = f"{flag}={MASK}"
            else:
                hide = True
        _register_url(word)
        out.append(scrub(word))
    return out


@overload
def strip_userinfo(url: str) -> str: ...
@overload
def strip_userinfo(url: None) -> None: ...
@overload
def strip_userinfo(url: Optional[str]) -> Optional[str]: ...


def strip_userinfo(url: Optional[str]) -> Optional[str]:
    """A URL without its ``user:password@`` part (others unchanged; None stays None)."""
    if not isinstance(url, str) or "@" not in url:
        return url
    try:
        parts = urlsplit(url)
    except ValueError:
        return _URL_USERINFO.sub(r"\g<scheme>", url)
    if parts.username is None and parts.password is None:
        return _URL_USERINFO.sub(r"\g<scheme>", url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


@overload
def scrub(value: str) -> str: ...
@overload
def scrub(value: _T) -> _T: ...


def scrub(value: Any) -> Any:
    """``value`` (str, list, tuple, dict; others unchanged) with URL user info removed and
    every remembered secret replaced by ``***``."""
    if isinstance(value, str):
        if "@" in value:
            _register_url(value)
            value = _URL_USERINFO.sub(r"\g<scheme>", value)
        for secret in sorted(_secrets, key=len, reverse=True):
            if secret in value:
                value = value.replace(secret, MASK)
        return value
    if isinstance(value, dict):
        return {scrub(k) if isinstance(k, str) else k: scrub(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(scrub(v) for v in value)
    return value


class ScrubFilter(logging.Filter):
    """A handler filter: the formatted message is scrubbed before it is written."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string is logging's to report
            return True
        clean = scrub(message)
        if clean != message:
            record.msg, record.args = clean, None
        return True
