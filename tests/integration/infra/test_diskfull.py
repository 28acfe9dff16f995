"""A full disk or a read-only folder: one line, exit 2, resumable. The disk
cases mount a small tmpfs (root only; skipped with the reason elsewhere)."""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from icrl.standin.openai_server import MODEL, FakeOpenAIServer

ROOT = Path(__file__).resolve().parents[3]
RUN = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl", "--seed", "1",
       "--training_seed", "1", "--test_seed", "1", "--backend", "openai", "--model_name", MODEL,
       "--max_context_examples", "3", "--test_k", "20", "--test_every", "2", "--train_k", "30", "--no-progress"]
ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
TOKENIZER = Path(os.environ.get("ICRL_TOKENIZERS_DIR", "/work/shared/tokenizers")) / "Qwen__Qwen2.5-7B-Instruct"


class Full:
    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def flush(self):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_log_file_on_a_full_disk_is_one_line_once_when_the_run_goes_on(tmp_path, capsys):
    """Said once a step is on disk (the run's LogFailure observer); a run whose records cannot be
    written either stops with that error alone (test_an_output_disk_with_a_few_kib_free...)."""
    from icrl.run.environment import attach_log_file as _attach_log_file
    from icrl.run.observers import LogFailure

    handler = _attach_log_file(tmp_path)
    handler.stream.close()
    handler.stream = Full()
    try:
        for i in range(30):
            logging.getLogger("icrl").info("message %d", i)
        assert capsys.readouterr().err == ""  # not yet: the run may be stopping for the same reason
        for step in range(3):
            LogFailure(handler).on_step(step, None)
    finally:
        logging.getLogger("icrl").removeHandler(handler)
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "log" in err and "Traceback" not in err, err


@pytest.mark.parametrize("free_kib", [4, 8, 12, 16, 24])
def test_an_output_disk_with_a_few_kib_free_is_one_line_and_leaves_no_run(tmp_path, free_kib):
    with tmpfs(tmp_path / "mnt", "64k") as mnt:
        with contextlib.suppress(OSError):
            (mnt / "filler").write_bytes(b"x" * (64 - free_kib) * 1024)
        proc = subprocess.run([sys.executable, "run_experiment.py", *FAKE_RUN, "--output_dir", str(mnt / "out")],
                              cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=180)
        err = proc.stderr.strip()
        if proc.returncode == 0:  # enough room after all
            return
        assert proc.returncode == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err
        assert "Traceback" not in err and str(mnt / "out") in err, err


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a small tmpfs needs root (to fill a disk for real)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount(path: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(path)], check=True, capture_output=True)


def records_of(out: Path) -> dict:
    (run_dir,) = [p.parent for p in out.rglob("config.json")]
    return {n: [{k: v for k, v in json.loads(x).items() if k != "time_s"} for x in (run_dir / n).read_text().splitlines()]
            for n in ("train.jsonl", "test.jsonl")}


def run(server, out, *extra, tool="run_experiment.py"):
    return subprocess.run([sys.executable, tool, *RUN, "--base_url", server.base_url, "--output_dir", str(out),
                           *extra], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=180)


def test_a_run_on_a_full_disk_stops_in_one_line_and_resumes_once_there_is_space(tmp_path):
    with FakeOpenAIServer() as server:
        reference = run(server, tmp_path / "ref")
        assert reference.returncode == 0, reference.stderr
        with tmpfs(tmp_path / "mnt", "40k") as mnt:
            full = run(server, mnt / "out", "--debug_k", "50")
            assert full.returncode == 2, full.stderr
            assert len(full.stderr.strip().splitlines()) == 1 and "rerun" in full.stderr, full.stderr
            remount(mnt, "size=4m")
            again = run(server, mnt / "out")
            assert again.returncode == 0, again.stderr
            assert records_of(mnt / "out") == records_of(tmp_path / "ref")


@pytest.mark.parametrize("state", ["full", "read-only"])
def test_a_sweep_summary_that_cannot_be_written_is_one_line(tmp_path, state):
    with FakeOpenAIServer() as server, tmpfs(tmp_path / "mnt", "16k") as mnt:
        if state == "full":
            with contextlib.suppress(OSError):
                (mnt / "filler").write_bytes(b"x" * 64 * 1024)
        else:
            remount(mnt, "ro")
        words = [w for w in RUN if w != "--no-progress"]
        proc = subprocess.run([sys.executable, "run_sweep.py", *words, "--base_url", server.base_url, "--output_dir",
                               str(tmp_path / "out"), "--summary", str(mnt / "sweep" / "summary.csv")], cwd=ROOT,
                              env=ENV, capture_output=True, text=True, timeout=180)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("error: ")
        assert not [p for p in mnt.rglob("*") if p.is_file() and p.name != "filler"]  # nothing half-written


@pytest.mark.skipif(not TOKENIZER.is_dir(), reason="needs the Qwen2.5 tokenizer in $ICRL_TOKENIZERS_DIR")
def test_token_counts_on_a_full_disk_are_one_line(tmp_path):
    with FakeOpenAIServer() as server:
        assert run(server, tmp_path / "out").returncode == 0
    with tmpfs(tmp_path / "mnt", "16k") as mnt:
        with contextlib.suppress(OSError):
            (mnt / "filler").write_bytes(b"x" * 64 * 1024)
        proc = subprocess.run([sys.executable, "run_count_tokens.py", "--data_dir", str(tmp_path / "out"),
                               "--tokenizer", str(TOKENIZER), "--csv", str(mnt / "tokens.csv")], cwd=ROOT, env=ENV,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("error: ")
        assert not (mnt / "tokens.csv").exists()


def _fake_runs(out: Path) -> None:
    proc = subprocess.run([sys.executable, "run_experiment.py", *FAKE_RUN, "--output_dir", str(out)], cwd=ROOT,
                          env=ENV, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr


FAKE_RUN = [w for w in RUN if w not in ("openai", MODEL)]
FAKE_RUN[FAKE_RUN.index("--backend") + 1:FAKE_RUN.index("--backend") + 1] = ["fake"]
FAKE_RUN[FAKE_RUN.index("--model_name") + 1:FAKE_RUN.index("--model_name") + 1] = ["smollm2-135m"]


def _half_written(folder: Path) -> list:
    """Temporary files of an atomic write (``.<name>.<random>``) left behind."""
    return [p for p in folder.rglob(".*") if p.is_file()]


@pytest.mark.parametrize("state", ["full", "read-only"])
def test_figures_on_a_full_or_read_only_disk_are_one_line_and_drawn_once_there_is_room(tmp_path, state):
    _fake_runs(tmp_path / "runs")
    with tmpfs(tmp_path / "mnt", "16k") as mnt:
        if state == "full":
            with contextlib.suppress(OSError):
                (mnt / "filler").write_bytes(b"x" * 64 * 1024)
        else:
            remount(mnt, "ro")
        draw = [sys.executable, "run_draw_plots.py", "--data_dir", str(tmp_path / "runs"), "--out_dir",
                str(mnt / "plots"), "--only", "main_results"]
        proc = subprocess.run(draw, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        err = proc.stderr.strip()
        assert "Traceback" not in err and len(err.splitlines()) == 1 and err.startswith("error: "), err
        assert not _half_written(mnt)
        remount(mnt, "rw,size=16m")
        with contextlib.suppress(FileNotFoundError):
            (mnt / "filler").unlink()
        again = subprocess.run(draw, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0, again.stderr
        assert (mnt / "plots" / "summary.csv").is_file() and (mnt / "plots" / "diagnostics.png").is_file()


@pytest.mark.model  # converts the embedded model's GGUF (about 20 s, 520 MB of tmpfs)
def test_window_search_on_a_full_model_cache_is_one_line_and_leaves_no_partial_model(tmp_path):
    from icrl.backends.embedded import gguf_path

    try:
        gguf_path("smollm2-135m")
    except Exception as exc:  # noqa: BLE001 - the package is an optional extra
        pytest.skip(f"the embedded model is not installed: {exc}")
    search = [sys.executable, "find_max_examples_given_max_window.py", "--model_name", "smollm2-135m", "--task_name",
              "trec_coarse", "--max_window_tokens", "2048"]
    with tmpfs(tmp_path / "cache", "2m") as cache:
        env = {**ENV, "ICRL_CACHE_DIR": str(cache)}
        proc = subprocess.run(search, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 2, proc.stderr
        last = proc.stderr.strip().splitlines()[-1]
        assert "Traceback" not in proc.stderr and last.startswith("error: cannot write the converted"), proc.stderr
        assert [p.name for p in cache.rglob("*") if p.is_file()] in ([], [".lock-smollm2-135m"])  # no partial model
        remount(cache, "size=800m")
        again = subprocess.run(search, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert again.returncode == 0 and again.stdout.strip().isdigit(), again.stderr
        assert (cache / "models" / "smollm2-135m" / "config.json").is_file()
