"""The offline walk-throughs of docs/backends.md ("Trying a hosted backend offline"), run as
written: for each hosted backend, a run against its stand-in (python -m icrl.standin), the run's
report (its recorded usage in dollars, with the date of the price; the study report) and the
estimate of a larger run in dollars. Each block of the doc is run line by line in bash, in a
folder of its own holding the scripts, so the doc cannot drift from what the code does."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers import REPO

pytest.importorskip("anthropic")
pytest.importorskip("google.genai")
DOC = REPO / "docs" / "backends.md"
SECTION = "## Trying a hosted backend offline"
MODELS = {"anthropic": "claude-haiku-4-5", "gemini": "gemini-2.5-flash", "openai": "gpt-4o-mini"}
CONFIRMED = {"anthropic": True, "gemini": False, "openai": False}  # the default price file's word on each


def walkthroughs() -> dict:
    """api -> the shell lines of the section's code block that starts ``python -m icrl.standin API --``."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION):]
    section = section[:section.index("\n## ", len(SECTION))]
    blocks, inside, lines = {}, False, []
    for line in section.splitlines():
        if line.startswith("```"):
            if inside and lines and lines[0].startswith("python -m icrl.standin "):
                blocks[lines[0].split()[3]] = lines
            inside, lines = not inside, []
        elif inside:
            if lines and lines[-1].endswith("\\"):
                lines[-1] = lines[-1][:-1] + line.strip()
            else:
                lines.append(line)
    return blocks


def run_block(lines: list, folder: Path, env: dict, out: dict, api: str) -> None:
    for script in [*REPO.glob("run_*.py"), *REPO.glob("find_max*.py")]:
        (folder / script.name).symlink_to(script)
    done = subprocess.run(["bash", "-e", "-c", "\n".join(lines)], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=900)
    out[api] = done


def test_the_docs_offline_walkthroughs_run_as_written(tmp_path, data_dir):
    blocks = walkthroughs()
    assert set(blocks) == set(MODELS), blocks
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_"))}
    env.update(PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}", ICRL_DATA_DIR=str(data_dir),
               HF_HUB_OFFLINE="1")
    results: dict = {}
    threads = []
    for api, lines in blocks.items():
        (tmp_path / api).mkdir()
        threads.append(threading.Thread(target=run_block, args=(lines, tmp_path / api, env, results, api)))
        threads[-1].start()
    for thread in threads:
        thread.join()
    for api, model in MODELS.items():
        done = results[api]
        out = done.stdout + done.stderr
        assert done.returncode == 0 and "Traceback" not in out, (api, out[-3000:])
        dated = "(price of 2026-12-02)" if CONFIRMED[api] else "(price of 2025-06-30, unconfirmed)"
        row = next(line for line in done.stdout.splitlines() if line.startswith("explorative") and model in line)
        assert row.rstrip().endswith(dated), (api, row)  # the run's recorded usage, in dollars, dated
        assert f"results: offline-runs/{model}/banking77_top10/8/True/random_unbiased_only_positive" in out
        assert "wrote offline-runs/report.html (1 runs in 1 configurations" in out
        estimate = done.stdout.split("token estimate", 1)[1]
        assert "dollars: $" in estimate and dated in estimate and f"price of {model}: $" in estimate, (api, estimate)
        assert ("read 2026-12-02 from" in estimate) is CONFIRMED[api], (api, estimate)
        config = next((tmp_path / api / "offline-runs").rglob("config.json")).read_text()
        assert '"base_url": "http://127.0.0.1:' in config  # the stand-in answered, not the service
