"""run_sweep.py --ray on a local Ray instance (CPU): the records of a Ray sweep are those of the
same sweep without Ray, also when a worker is killed mid-run; bad input is one line, exit 2,
nothing written. The sweeps join the session's one Ray instance (`ray_address`, tests/conftest.py)
with --ray_address, as a sweep joins a cluster; run_sweep.py --ray starting Ray itself is
bench/chaos.py's test (tests/bench/test_chaos.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import run_records

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[3]
TINY = ["--task_name", "trec_coarse", "--train_k", "8", "--test_k", "4", "--test_every", "4",
        "--max_context_examples", "3", "--icrl", "--test_seed", "5", "--temperature", "1.0"]
GRID = ["--grid", "context_strategy_name=random_biased_end,random_unbiased_only_positive",
        "--grid", "seed+training_seed=100,101"]


def run_dirs(root: Path) -> dict:
    return {p.parent.relative_to(root): p.parent for p in sorted(root.rglob("train.jsonl"))}


def sweep(argv, data_dir, env=None, **kwargs):
    environment = {**os.environ, "ICRL_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.Popen([sys.executable, str(REPO / "run_sweep.py"), *argv], cwd=REPO, env=environment,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def finish(proc, timeout=300) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def kill_a_worker(root: Path, driver_pid: int, timeout: float = 120) -> int:
    """SIGKILL the process that holds a run's lock once that run has written a step (a worker:
    the driver writes no run); returns its pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for lock in root.rglob(".lock"):
            train = lock.parent / "train.jsonl"
            try:
                holder = json.loads(lock.read_text() or "{}")
                steps = len(train.read_text().splitlines()) if train.is_file() else 0
            except (OSError, ValueError):
                continue
            pid = holder.get("pid")
            if pid and pid != driver_pid and steps >= 2:
                os.kill(pid, signal.SIGKILL)
                return pid
        time.sleep(0.05)
    raise AssertionError("no worker wrote a step in time")


def same_records(a: Path, b: Path) -> None:
    ours, theirs = run_dirs(a), run_dirs(b)
    assert list(ours) == list(theirs) and ours
    for rel in ours:
        assert run_records(ours[rel], args=True) == run_records(theirs[rel], args=True), rel


def test_ray_sweep_writes_the_records_of_the_sweep_without_ray_also_after_a_worker_dies(data_dir, tmp_path,
                                                                                       ray_address):
    common = [*GRID, "--model_name", "smollm2-135m", "--backend", "fake", *TINY]
    code, out, err = finish(sweep([*common, "--output_dir", str(tmp_path / "local")], data_dir))
    assert code == 0, err

    # A slow fake model so that a worker can be killed mid-run; 2 workers, 2 runs each.
    ray = ["--ray", "--ray_address", ray_address, "--ray_workers", "2"]
    proc = sweep([*common, *ray, "--output_dir", str(tmp_path / "ray"), "--name", "r"],
                 data_dir, env={"ICRL_FAKE_DELAY_S": "0.3"})
    killed = kill_a_worker(tmp_path / "ray", proc.pid)
    code, out, err = finish(proc)
    assert code == 0, err
    assert "a Ray worker died" in err and "resume on another worker" in err
    assert "4 of 4 runs finished" in out
    same_records(tmp_path / "ray", tmp_path / "local")
    assert killed not in {json.loads(p.read_text() or "{}").get("pid") for p in (tmp_path / "ray").rglob(".lock")}

    # A second launch of the same sweep: every run already finished, no worker started.
    code, out, err = finish(sweep([*common, *ray, "--output_dir", str(tmp_path / "ray"), "--name", "r"], data_dir))
    assert code == 0, err
    assert out.count("already finished") == 4 and "Ray:" not in out
    same_records(tmp_path / "ray", tmp_path / "local")


def test_ray_sweep_on_smollm2_writes_the_records_of_the_sweep_without_ray(data_dir, tmp_path, ray_address):
    """The real model (two workers, each loading SmolLM2 once), one killed mid-run."""
    common = ["--grid", "context_strategy_name=random_unbiased,random_unbiased_only_positive",
              "--grid", "seed+training_seed=100,101", "--model_name", "smollm2-135m", "--backend", "transformers",
              *TINY]
    code, _, err = finish(sweep([*common, "--output_dir", str(tmp_path / "local")], data_dir), timeout=600)
    assert code == 0, err
    proc = sweep([*common, "--ray", "--ray_address", ray_address, "--ray_workers", "2", "--output_dir",
                  str(tmp_path / "ray")], data_dir)
    kill_a_worker(tmp_path / "ray", proc.pid, timeout=300)
    code, out, err = finish(proc, timeout=600)
    assert code == 0, err
    assert "a Ray worker died" in err
    same_records(tmp_path / "ray", tmp_path / "local")


def _bad(argv, data_dir, tmp_path, alone: bool = False) -> str:
    """The one error line; ``alone``: the only line on stderr (no word of Ray's before it)."""
    code, out, err = finish(sweep([*argv, "--output_dir", str(tmp_path / "out")], data_dir), timeout=180)
    assert code == 2, (out, err)
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert not alone or err.strip().splitlines() == lines, err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.jsonl")), "nothing half-written"
    return lines[0]


def test_bad_ray_input_is_one_line_exit_2_and_writes_nothing(data_dir, tmp_path, ray_address):
    fake = ["--model_name", "smollm2-135m", "--backend", "fake", *TINY, "--grid", "seed+training_seed=100,101",
            "--context_strategy_name", "random_unbiased"]
    with_free_port = __import__("socket").socket()
    with_free_port.bind(("127.0.0.1", 0))
    port = with_free_port.getsockname()[1]
    with_free_port.close()  # nothing listens there now
    line = _bad([*fake, "--ray_address", f"127.0.0.1:{port}"], data_dir, tmp_path)
    assert "nothing answers there" in line
    line = _bad([*fake, "--ray_address", ray_address, "--ray_workers", "1", "--ray_gpus_per_worker", "1"], data_dir,
                tmp_path, alone=True)
    assert "1 GPUs, but the Ray cluster has 0" in line
    # Weights that cannot load (a damaged weights file): said before any run starts.
    tokenizer_only = tmp_path / "damaged-weights"
    from icrl.backends.embedded import converted_dir

    try:
        source = converted_dir("smollm2-135m")
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"the embedded model is not available: {exc}")
    tokenizer_only.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json", "special_tokens_map.json"):
        if (source / name).is_file():
            (tokenizer_only / name).write_bytes((source / name).read_bytes())
    (tokenizer_only / "model.safetensors").write_bytes(b"not a safetensors file")
    line = _bad(["--model_name", str(tokenizer_only), "--backend", "transformers", *TINY, "--context_strategy_name",
                 "random_unbiased", "--seed", "1", "--training_seed", "1", "--ray_address", ray_address, "--ray_workers",
                 "1"], data_dir, tmp_path)
    assert "a Ray worker could not load the model" in line
