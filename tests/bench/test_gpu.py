"""bench/gpu.py at tiny size on the CPU, so that the GPU benchmark does not rot: it runs to the
end, its correctness check passes (the backend's predictions, per call and packed across runs,
equal a plain forward pass's, and so does the text it generates), every way of running the lock-step runs writes the same records,
and the JSON has every figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_gpu_bench_runs_at_tiny_size_and_its_checks_pass(data_dir, tmp_path):
    from icrl.backends import embedded

    try:
        embedded.converted_dir("smollm2-135m")  # its tokenizer: the bench's fallback
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"the embedded model's tokenizer is not available: {exc}")
    out = tmp_path / "gpu.json"
    env = {**os.environ, "ICRL_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": ""}
    env.pop("ICRL_TOKENIZERS_DIR", None)  # the embedded SmolLM2 tokenizer, whatever this machine has
    result = subprocess.run([sys.executable, str(REPO / "bench" / "gpu.py"), "--size", "tiny", "--prompts", "6",
                             "--context_tokens", "200", "--check_prompts", "2", "--steps", "3", "--runs", "2",
                             "--lockstep_steps", "4", "--test_k", "2", "--retrieval_prompts", "6", "--retrieval_k", "4",
                             "--reasoning_prompts", "4", "--reasoning_tokens", "8", "--assets", str(tmp_path / "none"),
                             "--out", str(out)], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["correctness"]["passed"] and report["correctness"]["prompts"] == 6
    assert report["test_step"]["prompts"] == 6 and report["test_step"]["prompt_tokens_per_s"] > 0
    assert 0 < report["test_step"]["share_of_matmul"] < 1.5
    assert report["training"]["steps"] == 3
    assert report["correctness"]["reasoning"]["passed"] and report["correctness"]["reasoning"]["prompts"] == 2
    retrieval = report["retrieval_step"]
    assert retrieval["prompts"] == 6 and retrieval["prompt_tokens_per_s"] > 0 and 0 < retrieval["share_of_matmul"] < 1.5
    assert retrieval["shared_prefix_tokens"] < retrieval["mean_prompt_tokens"] / 2  # each prompt its own context
    reasoning = report["reasoning_step"]
    assert reasoning["prompts"] == 4 and 0 < reasoning["generated_tokens"] <= 4 * 8
    assert "6. retrieval test step" in result.stdout and "7. reasoning step" in result.stdout
    lockstep = report["lockstep"]
    assert all(lockstep["records_identical"].values()), lockstep["records_identical"]
    assert lockstep["measured_choice"] in ("packed", "call_by_call")
    assert "1. correctness" in result.stdout and "passed" in result.stdout
