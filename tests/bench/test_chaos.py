"""bench/chaos.py at CI size, so that the study under chaos does not rot: a Ray sweep of 8 runs on
2 workers with Ray workers killed and the driver killed once and restarted, and a sweep of 3 runs
against a stand-in server that fails a fifth of its requests; both end with the records of the
same sweep run quietly, every run folder and line once. Starts Ray twice (about 20 s each on a
busy machine), not the session's Ray of tests/conftest.py: the study kills the driver and with
it the Ray instance the driver started (run_sweep.py --ray without an address, the path no other
test takes), and finds the workers to kill in the driver's session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("ray")

REPO = Path(__file__).resolve().parents[2]


def test_chaos_bench_survives_kills_and_server_errors_with_the_quiet_sweeps_records(data_dir, tmp_path):
    out = tmp_path / "chaos.json"
    env = {**os.environ, "ICRL_DATA_DIR": str(data_dir), "HF_HUB_OFFLINE": "1"}
    result = subprocess.run([sys.executable, str(REPO / "bench" / "chaos.py"), "--ray_runs", "8", "--workers", "2",
                             "--train_k", "6", "--test_every", "3", "--test_k", "3", "--delay_s", "0.3",
                             "--max_parallel", "2", "--kill_every_s", "1", "--max_kills", "2",
                             "--driver_kill_at", "0.5", "--quiet_without_ray", "--server_runs", "3",
                             "--sweep_timeout_s", "400", "--keep", str(tmp_path / "work"), "--out", str(out)],
                            capture_output=True, text=True, cwd=tmp_path, env=env, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.read_text())
    assert report["passed"], report
    ray, server = report["ray"], report["server"]
    assert ray["identical"] and ray["problems"] == [] and ray["run_folders"] == 8
    assert ray["lines"] == 8 * (6 + 3)  # 6 training steps and tests at steps 0, 3 and 5, each once
    assert 1 <= ray["worker_kills"] <= 2 and ray["deaths_seen_by_driver"] >= 1
    assert ray["driver_killed_at_steps"] >= 8 * 6 * 0.5
    assert server["identical"] and server["run_folders"] == 3 and server["lines"] == 3 * (6 + 3)
    assert server["errors_injected"] >= 1 and set(server["by_status"]) <= {"429", "500"}
    assert "A. Ray, 8 runs on 2 workers" in result.stdout and "B. Server, 3 runs" in result.stdout
    assert not [line for line in result.stdout.splitlines() if "Traceback" in line]
