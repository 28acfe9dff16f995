"""Cheap facts about the Hugging Face Hub, known before anything is downloaded or loaded.

Used by the early checks (icrl/cli.py) and the Hub dataset loader (icrl/tasks/sources.py):
whether offline mode is on, whether a model is in the local cache, whether a name could be
a Hub id, and whether the Hub answers at all (one request, a few seconds at most, instead
of the libraries' five retries with backoff).
"""

from __future__ import annotations

import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import Optional

_TRUE = {"1", "ON", "YES", "TRUE"}
# org/name: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 characters.
_HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")


def offline() -> bool:
    """HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE / HF_DATASETS_OFFLINE) is set: no Hub requests."""
    return any(os.environ.get(name, "").upper() in _TRUE
               for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"))


def plausible_id(name: str) -> bool:
    """Could ``name`` be a Hub repository id (``org/name``)?"""
    return (len(name) <= 96 and _HUB_ID.fullmatch(name) is not None
            and "--" not in name and ".." not in name and not name.endswith("."))


def hub_cache() -> Path:
    """The huggingface_hub cache folder ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface")
    return Path(home).expanduser() / "hub"


def model_cached(repo_id: str) -> bool:
    """A snapshot of the model ``repo_id`` is in the local huggingface_hub cache."""
    snapshots = hub_cache() / f"models--{repo_id.replace('/', '--')}" / "snapshots"
    return snapshots.is_dir() and any(snapshots.iterdir())


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def unreachable(timeout: float = 5.0) -> Optional[str]:
    """None when the Hub answers (any HTTP status), else why not, in a few words."""
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint() + "/api/whoami-v2", method="HEAD"),
                               timeout=timeout).close()
    except urllib.error.HTTPError:
        return None  # it answered (401 without a token)
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{endpoint()} is unreachable: {reason}"
    return None
