"""Records you can trust (issue 11): one writer per run, finished runs verified against their
records, strict resume, clean failures and exits. Real runs of SmolLM2 on tiny sizes; the model
is loaded once and shared by the in-process runs, the fault-injection runs are subprocesses."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from icrl.cli import parse_args
from icrl.errors import UsageError
from icrl.cli.run import main
from icrl.records.lock import DirectoryLock, Locked
from icrl.run.data import load_data
from icrl.records import experiment_dir, find_runs, inspect_run, read_jsonl, write_json_atomic

REPO = Path(__file__).resolve().parents[2]
# 6 steps, tests at 0, 2, 5 on 4 test prompts.
ARGS = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased_only_positive",
        "--context_p_keep", "0.5", "--max_context_examples", "4", "--train_k", "6", "--test_every", "3",
        "--test_k", "4", "--temperature", "1.0", "--no-progress", "--backend", "fake",
        "--icrl", "--seed", "100", "--training_seed", "100", "--test_seed", "100"]


def argv(out, *extra):
    return [*ARGS, "--output_dir", str(out), *extra]


def run_dir_of(out, *extra) -> Path:
    return experiment_dir(out, parse_args(argv(out, *extra)).spec.as_record())


def strip(rows):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]


def records(run_dir):
    return strip(read_jsonl(run_dir / "train.jsonl")), strip(read_jsonl(run_dir / "test.jsonl"))


@pytest.fixture(autouse=True)
def _data(data_dir, monkeypatch):
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))


SUBPROCESS_ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
# A fake backend slow enough (0.1 s a call) to be signalled mid-run.
SLOW_ENV = {**SUBPROCESS_ENV, "ICRL_FAKE_DELAY_S": "0.1"}


@pytest.fixture(scope="module")
def _finished_once(tmp_path_factory):
    from runs_fixture import datasets_dir

    if datasets_dir() is None:
        pytest.skip("raw dataset files not found: set ICRL_DATA_DIR to the datasets folder")
    out = tmp_path_factory.mktemp("finished")
    old = os.environ.get("ICRL_DATA_DIR")
    os.environ["ICRL_DATA_DIR"] = str(datasets_dir())
    try:
        assert main(argv(out)) == 0
    finally:
        if old is None:
            os.environ.pop("ICRL_DATA_DIR", None)
        else:
            os.environ["ICRL_DATA_DIR"] = old
    return out


@pytest.fixture
def finished(_finished_once, tmp_path):
    """A copy of one finished tiny run: (output dir, run dir, its train and test records)."""
    out = tmp_path / "out"
    shutil.copytree(_finished_once, out)
    run_dir = find_runs(out)[0]
    return out, run_dir, records(run_dir)


def _lines(path):
    return path.read_text().splitlines(keepends=True)


# -- 1. one writer per run ------------------------------------------------------------------------
HOLD = ("import sys, time; from icrl.records.lock import DirectoryLock; DirectoryLock(sys.argv[1]).acquire(); "
        "print('held', flush=True); time.sleep(120)")


def test_second_writer_is_refused_naming_the_holder_and_a_killed_holder_frees_the_run(tmp_path, capsys):
    run_dir = run_dir_of(tmp_path)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], cwd=REPO, stdout=subprocess.PIPE,
                              text=True, env=SUBPROCESS_ENV)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(Locked, match=f"pid {holder.pid} on "):
            DirectoryLock(run_dir).acquire()
        assert main(argv(tmp_path)) == 2  # refused at once: before data or model
        err = capsys.readouterr().err.strip()
        assert "in use by another run" in err and f"pid {holder.pid}" in err and "\n" not in err
        assert not (run_dir / "config.json").exists()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert "--hf_token" not in DirectoryLock(run_dir).holder_text()
    sys_argv = sys.argv
    sys.argv = ["run_experiment.py", "--hf_token", "hf_SECRET", "--x", "--hf_token=hf_SECRET2"]
    try:
        with DirectoryLock(tmp_path / "other") as lock:
            assert "SECRET" not in (tmp_path / "other" / ".lock").read_text()
            assert "--hf_token *** --x --hf_token=***" in lock.holder_text()
    finally:
        sys.argv = sys_argv
    with DirectoryLock(run_dir) as lock:  # the kernel released it with the dead process
        assert lock.held
        with pytest.raises(Locked):  # one process, two locks on one run: still one writer
            DirectoryLock(run_dir).acquire()


# -- 2, 3. finished means verified; resume recomputes missing test steps ---------------------------
@pytest.mark.parametrize("damage", ["delete_test", "cut_test", "garbage_mid_test", "cut_train"])
def test_damaged_finished_run_is_repaired_to_the_same_records(finished, capsys, damage):
    out, run_dir, before = finished
    test_file, train_file = run_dir / "test.jsonl", run_dir / "train.jsonl"
    if damage == "delete_test":
        test_file.unlink()
    elif damage == "cut_test":
        lines = _lines(test_file)
        test_file.write_text("".join(lines[:-1]) + lines[-1][:20])
    elif damage == "garbage_mid_test":
        lines = _lines(test_file)
        test_file.write_text(lines[0] + "garbage\n" + "".join(lines[2:]))  # step 2 gone, step 5 after it
    else:
        lines = _lines(train_file)
        train_file.write_text("".join(lines[:-1]) + lines[-1][:30])
    state = inspect_run(run_dir)
    assert not state.finished and state.problems
    from icrl.analysis.results import Results

    results = Results(out)
    assert not results.runs["finished"].any() and any("damaged run" in n for n in results.notes)
    capsys.readouterr()
    assert main(argv(out)) == 0
    captured = capsys.readouterr()
    assert "already finished" not in captured.out and "resuming" in captured.err
    assert records(run_dir) == before
    assert inspect_run(run_dir).finished
    summary = json.loads((run_dir / "results.json").read_text())
    assert summary["finished"] and summary["test_accuracy"].keys() == {"0", "2", "5"}


def test_garbage_appended_to_train_of_a_finished_run_is_not_finished_and_is_one_line(finished, capsys):
    out, run_dir, _ = finished
    with open(run_dir / "train.jsonl", "a") as f:
        f.write('{"step": 0, "example_id": 1}\n')  # a duplicated / renumbered line
    assert main(argv(out)) == 2
    err = capsys.readouterr().err.strip()
    assert "train.jsonl line 7" in err and "\n" not in err
    from icrl.analysis.results import Results

    assert not Results(out).runs["finished"].any()


def test_token_counter_skips_a_damaged_run_with_a_note(finished, capsys):
    from icrl.cli.tokens import main as count_main

    out, run_dir, _ = finished
    (run_dir / "test.jsonl").unlink()
    assert count_main(["--data_dir", str(out), "--tokenizer", "smollm2-135m"]) == 2
    captured = capsys.readouterr()
    assert "damaged run" in captured.out and "no finished run" in captured.err


# -- 4. the test set is checked on resume ----------------------------------------------------------
def test_resume_refuses_a_changed_test_set(finished, data_dir, monkeypatch, capsys):
    out, run_dir, _ = finished
    lines = _lines(run_dir / "train.jsonl")
    (run_dir / "train.jsonl").write_text("".join(lines[:3]))  # an unfinished run
    changed = out.parent / "data"
    shutil.copytree(data_dir / "trec", changed / "trec")
    test_file = changed / "trec" / "TREC_10.label"
    test_file.chmod(0o644)
    text = test_file.read_text(encoding="latin-1").replace("What", "Which")
    test_file.write_text(text, encoding="latin-1")
    monkeypatch.setenv("ICRL_DATA_DIR", str(changed))
    assert main(argv(out)) == 2
    err = capsys.readouterr().err
    assert "dataset changed" in err and "--overwrite" in err
    assert len(read_jsonl(run_dir / "train.jsonl")) == 3


# -- 5. clean failures -----------------------------------------------------------------------------
def test_bad_records_and_outputs_are_one_line_errors(finished, tmp_path, capsys, monkeypatch):
    out, run_dir, _ = finished
    config = (run_dir / "config.json").read_text()
    for bad in ("", "{not json"):
        (run_dir / "config.json").write_text(bad)
        assert main(argv(out)) == 2
        err = capsys.readouterr().err.strip()
        assert "config.json" in err and "--overwrite" in err and "\n" not in err
    (run_dir / "config.json").write_text(config)
    # results.json is a function of the records: rewritten, never a traceback
    (run_dir / "results.json").write_text("")
    assert main(argv(out)) == 0
    assert "already finished" in capsys.readouterr().out
    assert json.loads((run_dir / "results.json").read_text())["finished"]
    # junk in the middle of train.jsonl
    lines = _lines(run_dir / "train.jsonl")
    (run_dir / "train.jsonl").write_text(lines[0] + "junk\n" + "".join(lines[1:]))
    assert main(argv(out)) == 2
    err = capsys.readouterr().err.strip()
    assert "train.jsonl line 2 is not JSON" in err and "\n" not in err
    # an --output_dir that is a file: refused before any model load
    import icrl.backends

    monkeypatch.setattr(icrl.backends, "load_backend", lambda *a, **k: pytest.fail("loaded a model"))
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert main(argv(a_file)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: cannot write the run directory") and "\n" not in err


def test_disk_full_mid_run_is_one_line_and_resumable(tmp_path, capsys, monkeypatch):
    from icrl.records import RunRecords

    real = RunRecords.append_train

    def full(self, line):
        if line.step == 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.directory / "train.jsonl"))
        return real(self, line)

    monkeypatch.setattr(RunRecords, "append_train", full)
    assert main(argv(tmp_path)) == 2
    err = capsys.readouterr().err.strip()
    assert "No space left on device" in err and "\n" not in err
    monkeypatch.setattr(RunRecords, "append_train", real)
    assert main(argv(tmp_path)) == 0
    assert "resuming" in capsys.readouterr().err


def test_corrupt_context_size_cache_is_recomputed(tmp_path, capsys):
    cache = tmp_path / "smollm2-135m" / "trec_coarse" / "maximum_context_length.json"
    cache.parent.mkdir(parents=True)
    cache.write_text("{garbage")
    args = [a for a in argv(tmp_path, "--train_k", "2", "--test_k", "2")]
    i = args.index("--max_context_examples")
    del args[i:i + 2]
    assert main(args) == 0
    from icrl.backends.fake import DEFAULT_MAX_MODEL_LEN

    key = f"icrl@{DEFAULT_MAX_MODEL_LEN}"
    sizes = json.loads(cache.read_text())["sizes"]
    assert list(sizes) == [key] and sizes[key] > 0


def test_malformed_dataset_and_bad_tool_outputs_are_one_line(tmp_path, data_dir, capsys, monkeypatch):
    from icrl.cli.figures import main as plots_main
    from icrl.cli.tokens import main as count_main

    bad = tmp_path / "data" / "trec"
    bad.mkdir(parents=True)
    (bad / "train_5500.label").write_bytes(b"DESC:manner How \xff\xfe ?\n")
    (bad / "TREC_10.label").write_bytes(b"NUM:date When ?\n")
    monkeypatch.setenv("ICRL_DATA_DIR", str(tmp_path / "data"))
    assert main(argv(tmp_path / "out")) == 2
    err = capsys.readouterr().err.strip()
    assert "malformed" in err and "\n" not in err
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert plots_main(["--data_dir", str(tmp_path), "--out_dir", str(a_file)]) == 2
    assert "--out_dir" in capsys.readouterr().err
    assert count_main(["--data_dir", str(tmp_path), "--csv", str(tmp_path / "missing" / "t.csv")]) == 2
    assert "--csv" in capsys.readouterr().err
    from icrl.backends.chat import local_model_dir

    with pytest.raises(UsageError, match="no such local folder"):  # the token counter's --tokenizer
        local_model_dir(str(tmp_path / "no_tokenizer_here"))


# -- 6. signals ------------------------------------------------------------------------------------
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_signal_stops_with_one_line_and_results_current(tmp_path, signum, code):
    out = tmp_path / "out"
    args = argv(out, "--train_k", "40", "--test_every", "2", "--test_k", "2")
    proc = subprocess.Popen([sys.executable, str(REPO / "run_experiment.py"), *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=SLOW_ENV)
    run_dir = run_dir_of(out, "--train_k", "40", "--test_every", "2", "--test_k", "2")
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None and len(read_jsonl(run_dir / "train.jsonl")) < 3:
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signum)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted at step ") and last.endswith("rerun the same command to resume")
    assert "Traceback" not in stderr
    done = len(read_jsonl(run_dir / "train.jsonl"))
    assert last == f"interrupted at step {done}; rerun the same command to resume"
    summary = json.loads((run_dir / "results.json").read_text())
    assert summary["steps_completed"] == done and not summary["finished"]
    assert not list(run_dir.glob(".*.json.*"))


# -- 7. a run with no completed step is not a run --------------------------------------------------
def test_run_failing_before_its_first_step_does_not_block_the_corrected_command(tmp_path, capsys):
    assert main(argv(tmp_path, "--max_model_len", "60")) == 2  # the prompts do not fit
    assert "tokens" in capsys.readouterr().err
    assert find_runs(tmp_path) == [] and not any(tmp_path.iterdir())
    run_dir = run_dir_of(tmp_path)
    run_dir.mkdir(parents=True)  # what an older version left: a config of other arguments, no step
    (run_dir / "config.json").write_text(json.dumps({"args": {"test_k": 99}}))
    (run_dir / "log.txt").write_text("failed\n")
    assert main(argv(tmp_path)) == 0
    assert inspect_run(run_dir).finished


# -- 8. no silent clamping, clear messages, every flag validated ------------------------------------
def test_oversized_splits_warn_and_are_recorded(tmp_path, capsys):
    args = parse_args(argv(tmp_path, "--train_k", "100000", "--test_k", "100000"))
    data = load_data(args)
    err = capsys.readouterr().err
    assert "--train_k 100000" in err and "--test_k 100000" in err and "warning" in err
    assert len(data.test) == 500 and len(data.train) < 100000


def test_empty_training_split_and_bad_paths_and_vllm_flags(tmp_path, data_dir, capsys, monkeypatch):
    folder = tmp_path / "data" / "banking77"
    folder.mkdir(parents=True)
    shutil.copy(data_dir / "banking77" / "test.csv", folder / "test.csv")
    (folder / "train.csv").write_text("text,category\n")
    monkeypatch.setenv("ICRL_DATA_DIR", str(tmp_path / "data"))
    args = [a if a != "trec_coarse" else "banking77" for a in argv(tmp_path / "out")]
    assert main(args) == 2
    assert "training split is empty" in capsys.readouterr().err
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    (tmp_path / "empty_model").mkdir()
    real = ["--backend", "transformers"]  # the fake backend takes any --model_name as a label
    for extra, needle in [(["--model_name", str(tmp_path / "nope"), *real], "no such local folder"),
                          (["--model_name", str(tmp_path / "empty_model"), *real], "without a model"),
                          (["--rope_scaling", "garbage"], "--rope_scaling"),
                          (["--gpu_memory_utilization", "5"], "--gpu_memory_utilization"),
                          (["--tensor_parallel_size", "0"], "--tensor_parallel_size")]:
        assert main(argv(tmp_path / "out", *extra)) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err
    assert not (tmp_path / "out").exists()


# -- 9. leftovers of kills inside atomic writes and model conversions ------------------------------
KILL_IN_WRITE = ("import os, signal, sys; from icrl import records; "
                 "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL); "
                 "records.write_json_atomic(records.Path(sys.argv[1]), {'half': True})")


def test_kill_inside_each_atomic_write_leaves_nothing_after_the_next_run(finished, capsys):
    out, run_dir, before = finished
    results = (run_dir / "results.json").read_text()
    for name in ("config.json", "results.json"):
        proc = subprocess.run([sys.executable, "-c", KILL_IN_WRITE, str(run_dir / name)], cwd=REPO,
                              env=SUBPROCESS_ENV)
        assert proc.returncode == -signal.SIGKILL
    assert len(list(run_dir.glob(".config.json.*"))) == 1 and len(list(run_dir.glob(".results.json.*"))) == 1
    assert main(argv(out)) == 0
    assert "already finished" in capsys.readouterr().out
    assert not list(run_dir.glob(".*.json.*")) and (run_dir / "results.json").read_text() == results
    assert records(run_dir) == before


def test_killed_model_conversion_folder_is_removed(tmp_path, monkeypatch):
    from icrl.backends import embedded

    monkeypatch.setenv("ICRL_CACHE_DIR", str(tmp_path))
    partial = tmp_path / "models" / ".smollm2-135m-abc123"
    partial.mkdir(parents=True)
    (partial / "model.safetensors").write_bytes(b"half")

    def convert(name, target):
        target.mkdir()
        (target / "config.json").write_text("{}")
        (target / "tokenizer_config.json").write_text("{}")
        return target

    monkeypatch.setattr(embedded, "_convert", convert)
    assert embedded.converted_dir("smollm2-135m") == tmp_path / "models" / "smollm2-135m"
    assert not partial.exists()


# -- 10. modes, a deleted config, --overwrite resumes the run it started ---------------------------
def test_json_records_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "results.json", {"a": 1})
    finally:
        os.umask(old)
    assert (tmp_path / "results.json").stat().st_mode & 0o777 == 0o644


def test_deleted_config_is_refused_and_overwrite_resumes_its_own_run(finished, capsys):
    out, run_dir, _ = finished
    assert (run_dir / "config.json").stat().st_mode & 0o044  # readable by colleagues
    config = (run_dir / "config.json").read_text()
    (run_dir / "config.json").unlink()
    assert main(argv(out)) == 2
    assert "no config.json" in capsys.readouterr().err
    (run_dir / "config.json").write_text(config)
    other = argv(out, "--overwrite")
    assert main(other) == 0  # starts the run again
    assert json.loads((run_dir / "config.json").read_text())["runtime_args"]["overwrite"]
    replaced = records(run_dir)
    lines = _lines(run_dir / "train.jsonl")
    (run_dir / "train.jsonl").write_text("".join(lines[:4]))  # as if killed after step 3
    capsys.readouterr()
    assert main(other) == 0
    assert "resuming" in capsys.readouterr().err
    assert records(run_dir) == replaced


# -- issue 12: cheap checks first ------------------------------------------------------------------
def test_finished_run_is_reported_before_the_data_load(finished, tmp_path, monkeypatch, capsys):
    out, run_dir, _ = finished
    monkeypatch.setenv("ICRL_DATA_DIR", str(tmp_path / "no_data_here"))
    assert main(argv(out)) == 0
    assert "already finished" in capsys.readouterr().out
