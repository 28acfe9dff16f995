"""Shared pytest fixtures."""

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def data_dir() -> Path:
    """Folder with the raw dataset files: $ICRL_DATA_DIR, else ../shared/datasets."""
    env = os.environ.get("ICRL_DATA_DIR")
    if env:
        return Path(env)
    shared = REPO.parent / "shared" / "datasets"
    if shared.is_dir():
        return shared
    pytest.skip("raw dataset files not found: set ICRL_DATA_DIR to the datasets folder")
