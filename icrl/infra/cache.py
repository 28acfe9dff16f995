"""Where icrl keeps what it makes once and reuses (converted models, sentence embeddings)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """$ICRL_CACHE_DIR, else ~/.cache/icrl."""
    return Path(os.environ.get("ICRL_CACHE_DIR") or Path.home() / ".cache" / "icrl")
