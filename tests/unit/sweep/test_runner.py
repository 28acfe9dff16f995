"""Sweeps (run_sweep.py): expansion, presets, dry run, shards; lock-step runs write exactly the
records of runs alone; resume after an interruption; a failing run does not stop the others."""

from __future__ import annotations

import csv
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import TOY_TASK, run_records
from icrl.backends.fake import FakeBackend
from icrl.cli import build_parser, parse_args
from icrl.run.experiment import Experiment
from icrl.sweep import runner
from icrl.sweep.grid import expand, parse_grid_option, parse_shard, shard_indices
from icrl.cli.presets import preset_runs

REPO = Path(__file__).resolve().parents[3]
PUBLISHED_TAIL = ("--debug_k 10 --seed 100 --training_seed 100 --test_seed 100 --no-verbose")


# -- expansion (pure) -------------------------------------------------------------------------------
def test_paper_main_is_the_20_published_commands(tmp_path):
    runs = preset_runs("paper_main")
    assert len(runs) == 20 and len({tuple(r) for r in runs}) == 20
    model = tmp_path / "Meta-Llama-3.1-8B-Instruct"  # a local model folder: no Hub lookup offline
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')  # what a model folder must hold to pass
    (model / "tokenizer.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"")
    parsed = [parse_args(r + ["--model_name", str(model)]) for r in runs]
    families = {}
    for a in parsed:
        families.setdefault((a.spec.context_strategy_name, a.spec.temperature, a.spec.context_p_keep, a.spec.icrl), []).append(a.spec.task_name)
    tasks = ["banking77", "clinic150", "trec_coarse", "trec_fine", "nlu"]
    assert families == {("random_biased_end", 1.0, 1.0, True): tasks,
                        ("random_biased_end_only_positive", 2.0, 1.0, True): tasks,
                        ("random_unbiased_only_positive", 1.0, 0.1, True): tasks,
                        ("random_unbiased", 1.0, 1.0, False): tasks}
    for a in parsed:
        assert a.spec.train_k == (5000 if a.spec.task_name.startswith("trec") else 10000)
        assert (a.spec.test_every, a.options.debug_k, a.spec.seed, a.spec.training_seed, a.spec.test_seed) == (500, 10, 100, 100, 100)
        assert not a.spec.icrl_omit_feedback and not a.spec.icrl_flip_feedback and a.spec.max_context_examples is None
    # As published: the Naive and Naive+ clinic150 commands give no --test_k (whole test split).
    no_test_k = [(a.spec.context_strategy_name, a.spec.task_name) for a in parsed if a.spec.test_k == -1]
    assert no_test_k == [("random_biased_end", "clinic150"), ("random_biased_end_only_positive", "clinic150")]
    assert all(shlex.join(r).endswith(PUBLISHED_TAIL) for r in runs)


def test_learners_and_llm_runs_in_one_sweep(tmp_path, capsys):
    """Crossing a learner with LLM settings names the fix; docs/sweeps.md's [[run]] file works."""
    common = ["--task_name", "trec_coarse", "--seed", "1", "--training_seed", "1", "--test_seed", "1",
              "--output_dir", str(tmp_path), "--dry_run"]
    assert runner.main(["--name", "mixed", "--grid", "agent=llm,linucb", "--icrl", "--context_strategy_name",
                        "random_unbiased", *common]) == 1
    out = capsys.readouterr().out
    assert "2 runs, 1 invalid" in out and "give learners and LLM runs their own [[run]] tables" in out
    doc = (REPO / "docs" / "sweeps.md").read_text()
    example = doc.split("Put each kind in its own `[[run]]` table", 1)[1].split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "mixed.toml").write_text(example)
    assert runner.main(["--config", str(tmp_path / "mixed.toml"), *common]) == 0
    out = capsys.readouterr().out
    assert "2 runs, 0 invalid" in out and "/agent+linucb+tfidf/" in out and "random_unbiased_only_positive" in out
    assert not any(p.name != "mixed.toml" for p in tmp_path.iterdir()), "a dry run writes nothing"


def test_preset_dry_run_prints_every_command_and_directory(tmp_path, capsys):
    code = runner.main(["--preset", "paper_main", "--model_name", "smollm2-135m", "--train_k", "30",
                        "--test_k", "20", "--test_every", "15", "--output_dir", str(tmp_path), "--dry_run"])
    out = capsys.readouterr().out
    assert code == 0
    commands = [line for line in out.splitlines() if line.startswith("#")]
    dirs = [line.split("-> ", 1)[1] for line in out.splitlines() if "-> " in line]
    assert len(commands) == 20 and len(set(dirs)) == 20
    assert all("--train_k 30" in c and c.endswith(f"--output_dir {tmp_path}") for c in commands)
    assert all(d.startswith(str(tmp_path / "smollm2-135m")) for d in dirs)
    assert "20 runs, 0 invalid" in out
    assert not any(tmp_path.iterdir()), "a dry run writes nothing"
    # Command-line values win over the preset's: every run has --train_k 30.
    _, runs = runner.plan(["--preset", "paper_main", "--model_name", "smollm2-135m", "--train_k", "30"])
    assert {r.args.spec.train_k for r in runs} == {30} and {r.args.spec.model_name for r in runs} == {"smollm2-135m"}


def test_grid_ties_booleans_and_order():
    parser = build_parser()
    runs = expand(parser, grid=[parse_grid_option("task_name=banking77,trec_coarse"),
                                parse_grid_option("seed+training_seed=1,2"), ("icrl", ["true", "false"])],
                  extra=["--test_seed", "3"])
    assert len(runs) == 8
    assert runs[0] == ["--task_name", "banking77", "--seed", "1", "--training_seed", "1", "--icrl", "--test_seed", "3"]
    assert runs[1][-3:] == ["--no-icrl", "--test_seed", "3"]
    assert runs[-1][:2] == ["--task_name", "trec_coarse"]


def test_toml_base_runs_and_grid(tmp_path):
    path = tmp_path / "study.toml"
    path.write_text('name = "study"\n[base]\nmodel_name = "smollm2-135m"\nicrl = true\ntrain_k = 10\n'
                    'seed = 1\ntraining_seed = 1\ntest_seed = 1\n'
                    '[grid]\ntask_name = ["banking77", "nlu"]\n'
                    '[[run]]\ncontext_strategy_name = "random_biased_end"\n'
                    '[[run]]\ncontext_strategy_name = "random_unbiased_only_positive"\ncontext_p_keep = 0.1\n')
    opts, runs = runner.plan(["--config", str(path), "--train_k", "5"])
    assert opts.sweep_name == "study" and len(runs) == 4
    got = [(r.args.spec.task_name, r.args.spec.context_strategy_name, r.args.spec.context_p_keep, r.args.spec.train_k)
           for r in runs]
    assert got == [("banking77", "random_biased_end", 1.0, 5), ("nlu", "random_biased_end", 1.0, 5),
                   ("banking77", "random_unbiased_only_positive", 0.1, 5), ("nlu", "random_unbiased_only_positive", 0.1, 5)]


@pytest.mark.parametrize("argv, message", [
    (["--preset", "paper_main"], "needs --model_name"),
    (["--preset", "nope"], "unknown --preset"),
    (["--grid", "sead=1,2"], "unknown flag --sead"),
    (["--grid", "seed"], "FLAG=VALUE1,VALUE2"),
    (["--grid", "seed=1,2", "--seed", "3"], "both in the grid and given"),
    (["--grid", "icrl=maybe"], "yes/no flag"),
    # --batch_size changes how a run executes, not what it computes: both would be one run
    (["--grid", "batch_size=4,8", "--task_name", "nlu", "--icrl", "--context_strategy_name", "random_unbiased",
      "--seed", "1", "--training_seed", "1", "--test_seed", "1"], "same run directory"),
    (["--shard", "3/2", "--task_name", "nlu"], "between 1 and N"),
    ([], "nothing to sweep"),
    (["--config", "/nonexistent.toml"], "no such file"),
])
def test_bad_sweeps_are_one_line_errors(argv, message, capsys):
    assert runner.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_shards_are_disjoint_and_cover_the_sweep():
    for n in (1, 2, 3, 7):
        slices = [shard_indices(20, parse_shard(f"{i}/{n}")) for i in range(1, n + 1)]
        flat = [k for s in slices for k in s]
        assert sorted(flat) == list(range(20)) and len(flat) == 20
    assert shard_indices(5, (2, 2)) == [1, 3]
    _, runs = runner.plan(["--preset", "paper_main", "--model_name", "x", "--shard", "2/3"])
    assert [r.index for r in runs] == list(range(1, 20, 3))


# -- lock-step on the fake backend (the scheduling logic; a real model's lock-step: the vLLM test) ------
TINY = ["--model_name", "smollm2-135m", "--backend", "fake", "--train_k", "3", "--test_k", "2",
        "--test_every", "2", "--max_context_examples", "3", "--icrl", "--test_seed", "5"]
MIXED = ["--grid", f"task_name={TOY_TASK},{TOY_TASK}_top3",
         "--grid", "context_strategy_name=random_biased_end,random_unbiased_only_positive,random_unbiased",
         "--grid", "seed+training_seed=100,101", "--context_p_keep", "0.5", *TINY]


@pytest.fixture
def fake(monkeypatch):
    """The deterministic fake backend (icrl/backends/fake.py): no model, milliseconds a run."""
    from icrl.backends import load_backend

    monkeypatch.delenv("ICRL_FAKE_INTERRUPT_AT_CALL", raising=False)
    monkeypatch.delenv("ICRL_FAKE_DELAY_S", raising=False)
    return load_backend("smollm2-135m", backend="fake")


def alone(runs, backend, root: Path) -> list[Path]:
    dirs = []
    for run in runs:
        args = parse_args(run.words + ["--output_dir", str(root), "--no-progress"])
        exp = Experiment(args, backend=backend)
        assert exp.run()["finished"]
        dirs.append(exp.out_dir)
    return dirs


def test_lock_step_writes_the_records_of_runs_alone(fake, tmp_path, monkeypatch):
    _, runs = runner.plan(MIXED + ["--output_dir", str(tmp_path / "sweep")])
    assert len(runs) == 12 and all(r.error is None for r in runs)
    calls = []
    original = fake.predict_calls
    fake.predict_calls = lambda c: calls.append(len(c)) or original(c)
    try:
        outcomes = runner.execute(runs, backend=fake, progress=False)
    finally:
        del fake.predict_calls
    assert [o.status for o in outcomes] == ["finished"] * 12
    assert max(calls) == 12, "all runs' calls go to the backend together"
    for run, solo in zip(runs, alone(runs, fake, tmp_path / "alone")):
        assert run_records(run.out_dir) == run_records(solo), run.label()
        config = json.loads((run.out_dir / "config.json").read_text())
        assert config["args"] == json.loads((solo / "config.json").read_text())["args"]



METHODS_BEYOND = [
    ("summary", "--summary_episodes", "2"), ("summary_knn", "--summary_episodes", "2"),
    ("reflection", "--reflect_every", "4"), ("knn_lexical_curated", "--curate_min_uses", "2"),
    ("random_unbiased", "--reward", "judge"), ("random_unbiased", "--reasoning", "8")]


def test_the_methods_beyond_the_paper_in_lock_step_write_the_records_of_runs_alone(fake, tmp_path):
    """Summaries, guides, curation, a judge and reasoning: their extra calls (a guide, a verdict,
    free text) go through the shared backend like the labels, and change nothing."""
    runs = []
    for i, (strategy, flag, value) in enumerate(METHODS_BEYOND):
        _, planned = runner.plan([*TINY, "--task_name", TOY_TASK, "--context_strategy_name", strategy, flag, value,
                                  "--train_k", "10", "--seed", "100", "--training_seed", "100",
                                  "--output_dir", str(tmp_path / "sweep")])
        assert planned[0].error is None, planned[0].error
        runs += planned
    for i, run in enumerate(runs):
        run.index = i
    outcomes = runner.execute(runs, backend=fake, progress=False)
    assert [o.status for o in outcomes] == ["finished"] * len(METHODS_BEYOND)
    for run, solo in zip(runs, alone(runs, fake, tmp_path / "alone")):
        assert run_records(run.out_dir) == run_records(solo), run.label()


class StopAfter:
    """The shared backend, interrupted (as by Ctrl-C in the main thread) in its n-th batch."""

    def __init__(self, backend, n: int):
        self.backend, self.n = backend, n

    def __getattr__(self, name):
        return getattr(self.backend, name)

    def predict_calls(self, calls):
        self.n -= 1
        if self.n == 0:
            raise KeyboardInterrupt
        return self.backend.predict_calls(calls)


def test_interrupted_sweep_resumes_every_run(fake, tmp_path, monkeypatch, capsys):
    argv = ["--grid", "context_strategy_name=random_biased_end,random_unbiased_only_positive",
            "--grid", "seed+training_seed=100,101", "--task_name", TOY_TASK, *TINY,
            "--output_dir", str(tmp_path / "sweep"), "--name", "resume"]
    monkeypatch.setattr(Experiment, "load_backend",
                        lambda self: setattr(self, "backend", StopAfter(fake, 4)) if self.backend is None else None)
    assert runner.main(argv) == 130
    assert "rerun the same command to resume" in capsys.readouterr().err
    _, runs = runner.plan(argv)
    done = [len((r.out_dir / "train.jsonl").read_text().splitlines()) for r in runs]
    assert all(0 < n < 3 for n in done), done
    assert all(json.loads((r.out_dir / "results.json").read_text())["finished"] is False for r in runs)

    monkeypatch.setattr(Experiment, "load_backend",
                        lambda self: setattr(self, "backend", fake) if self.backend is None else None)
    assert runner.main(argv) == 0
    out = capsys.readouterr().out
    assert "4 of 4 runs finished" in out
    for run, solo in zip(runs, alone(runs, fake, tmp_path / "alone")):
        assert run_records(run.out_dir) == run_records(solo), run.label()
    # Rerun: every run is already finished, no model is loaded.
    monkeypatch.setattr(Experiment, "load_backend", lambda self: pytest.fail("loaded a model for finished runs"))
    assert runner.main(argv) == 0
    assert capsys.readouterr().out.count("already finished") == 4
    rows = list(csv.DictReader((tmp_path / "sweep" / "sweeps" / "resume.csv").open()))
    assert [r["status"] for r in rows] == ["finished"] * 4 and all(r["steps_completed"] == "3" for r in rows)


def test_failing_runs_are_reported_and_the_others_finish(fake, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(Experiment, "load_backend",
                        lambda self: setattr(self, "backend", fake) if self.backend is None else None)
    summary = tmp_path / "summary.csv"
    # bogus: invalid flags (never starts); exemplars fill the context: fails once running.
    code = runner.main(["--grid", "context_strategy_name=random_biased_end,bogus", "--grid", "exemplars_per_label=0,1",
                        "--task_name", TOY_TASK, "--seed", "100", "--training_seed", "100", *TINY,
                        "--output_dir", str(tmp_path / "sweep"), "--summary", str(summary)])
    captured = capsys.readouterr()
    assert code == 1
    rows = list(csv.DictReader(summary.open()))
    assert [r["status"] for r in rows] == ["finished", "failed", "failed", "failed"]
    assert "unknown --context_strategy_name 'bogus'" in rows[2]["error"]
    assert "no room for context episodes" in rows[1]["error"]
    assert "1 of 4 runs finished" in captured.out
    assert "error: run #1 failed: no room for context episodes" in captured.err
    assert not (Path(rows[1]["run_dir"])).exists(), "a run that failed before its first step leaves nothing"


def test_run_sweep_script_help():
    out = subprocess.run([sys.executable, str(REPO / "run_sweep.py"), "--help"], capture_output=True, text=True,
                         cwd=REPO, timeout=120)
    assert out.returncode == 0 and "--preset" in out.stdout and "paper_main" in out.stdout


@pytest.mark.vllm
@pytest.mark.skipif(__import__("importlib.util").util.find_spec("vllm") is None,
                    reason="vLLM is not installed (make setup-vllm installs the CPU engine)")
def test_lock_step_on_the_vllm_engine_writes_the_records_of_runs_alone(engine, data_dir, tmp_path, monkeypatch):
    """The same mixed sweep on the real engine (the session's one `engine`): one engine call per
    lock-step batch, with per-prompt labels and seeds; records as alone."""
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    argv = [("vllm" if w == "fake" else w) for w in MIXED] + ["--output_dir", str(tmp_path / "sweep")]
    _, runs = runner.plan(argv)
    assert len(runs) == 12 and all(r.error is None for r in runs) and {r.args.spec.backend for r in runs} == {"vllm"}
    before = engine.stats["calls"]
    outcomes = runner.execute(runs, backend=engine, progress=False)
    assert [o.status for o in outcomes] == ["finished"] * 12
    lock_step_calls = engine.stats["calls"] - before
    for run, solo in zip(runs, alone(runs, engine, tmp_path / "alone")):
        assert run_records(run.out_dir) == run_records(solo), run.label()
    alone_calls = engine.stats["calls"] - before - lock_step_calls
    assert lock_step_calls * 6 <= alone_calls, (lock_step_calls, alone_calls)


def test_the_sweep_groups_by_backend_options_and_closes_each_group(tmp_path, monkeypatch):
    from icrl.sweep import runner

    closed = []
    monkeypatch.setattr(FakeBackend, "close", lambda self: closed.append(self), raising=False)
    argv = ["--grid", "seed+training_seed=100,101", "--grid", "max_model_len=3000,4000", "--grid", "timeout+test_seed=5,6",
            "--backend", "fake", "--model_name", "fake", "--task_name", TOY_TASK, "--train_k", "4",
            "--test_every", "2", "--test_k", "3", "--max_context_examples", "2", "--icrl",
            "--context_strategy_name", "random_unbiased", "--output_dir", str(tmp_path)]
    _, runs = runner.plan(argv)
    assert len(runs) == 8 and all(r.error is None for r in runs), [r.error for r in runs]
    groups = runner.groups_of(runs)
    # seed (vLLM's engine-wide seed) and --timeout (not a fake-backend option) do not split a group
    assert sorted(len(g) for g in groups) == [4, 4]
    assert {g[0].backend_key().options.max_model_len for g in groups} == {3000, 4000}
    outcomes = runner.run_all(runs, width=None, progress=False)
    assert all(o.status == "finished" for o in outcomes.values())
    assert len(closed) == 2 and closed[0] is not closed[1]


@pytest.mark.parametrize("where", ["a_folder", "a_folder_that_takes_no_file"])
def test_a_summary_that_cannot_be_written_is_one_line_naming_it_before_any_run(tmp_path, capsys, where):
    summary = tmp_path / "summaries"
    summary.mkdir()
    if where == "a_folder_that_takes_no_file":
        summary = Path("/proc/icrl-summary.csv")  # a folder no file can be created in, even by root
    code = runner.main(["--grid", "seed=1,2", "--task_name", TOY_TASK, "--backend", "fake", "--icrl",
                        "--context_strategy_name", "random_unbiased", "--max_context_examples", "2", "--train_k", "3",
                        "--training_seed", "1", "--test_seed", "1", "--output_dir", str(tmp_path / "out"),
                        "--summary", str(summary)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"error: cannot write the summary {summary} ") and "\n" not in err, err
    assert ".summar" not in err and ".icrl" not in err  # no temporary file's name
    assert not (tmp_path / "out").exists()  # said before any run


def test_an_epilogue_that_meets_a_wrong_record_is_one_error_line(tmp_path, monkeypatch, capsys):
    """The benchmark score after an icrl_bench sweep reads every run under --output_dir through the
    resume's records check (icrl.run.readback): a run it refuses ends the sweep with its one line and exit 2."""
    from icrl.records import DamagedRecords

    def refuse(name, output_dirs, run_dirs):
        raise DamagedRecords(f"{tmp_path}/other/train.jsonl line 2: field 'feedback' is 'yes', expected a number")

    monkeypatch.setattr(runner, "preset_epilogue", refuse)
    code = runner.main(["--grid", "seed=1", "--task_name", TOY_TASK, "--backend", "fake", "--icrl",
                        "--context_strategy_name", "random_unbiased", "--max_context_examples", "2", "--train_k", "3",
                        "--training_seed", "1", "--test_seed", "1", "--no-progress",
                        "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "Traceback" not in err
    said = f"error: {tmp_path}/other/train.jsonl line 2: field 'feedback' is 'yes', expected a number"
    assert err.splitlines()[-1] == said


def test_a_budget_the_window_cannot_hold_fails_each_run_of_a_lock_step_sweep_before_it_writes(fake, tmp_path,
                                                                                              monkeypatch, capsys):
    """The shared backend is loaded already, yet each run's budget is checked against the window
    before it writes anything (icrl.run.budgets): one line naming the flag, no run folder left."""
    monkeypatch.setattr(Experiment, "load_backend",
                        lambda self: setattr(self, "backend", fake) if self.backend is None else None)
    summary = tmp_path / "summary.csv"
    code = runner.main(["--grid", "context_strategy_name=random_biased_end,random_unbiased", "--task_name", TOY_TASK,
                        "--seed", "100", "--training_seed", "100", *TINY, "--reasoning", "100000",
                        "--output_dir", str(tmp_path / "sweep"), "--summary", str(summary)])
    assert code == 1
    rows = list(csv.DictReader(summary.open()))
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert all(r["error"].startswith("--reasoning 100000: ") and "lower --reasoning by at least" in r["error"]
               for r in rows), rows
    assert not any(Path(r["run_dir"]).exists() for r in rows)


def test_a_run_flag_no_run_of_the_sweep_reads_is_said_once(tmp_path, capsys):
    """--max_contexts given to a sweep of strategies that do not read it: one warning; given to
    a sweep where one run reads it: nothing (it is meant for that run)."""
    base = ["--backend", "fake", "--task_name", "nlu", "--icrl", "--seed", "1", "--training_seed", "1",
            "--test_seed", "1", "--max_contexts", "3", "--approximate_context_sampling_method", "uniform",
            "--output_dir", str(tmp_path / "out"), "--dry_run"]
    assert runner.main([*base, "--grid", "context_strategy_name=random_unbiased,random_biased_end"]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [f"warning: {flag} does nothing for any run of this sweep: ignored"
                                for flag in ("--max_contexts 3", "--approximate_context_sampling_method uniform")], err
    assert runner.main([*base, "--grid", "context_strategy_name=random_unbiased,approximate_only_positive"]) == 0
    assert "warning" not in capsys.readouterr().err
