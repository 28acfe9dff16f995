"""Plugins end to end, through the real scripts on the fake backend and the toy task: the example
plugin of tests/data/plugins (a strategy with one parameter, a reward, a figure) given with
--plugin, ICRL_PLUGINS or an installed entry point runs through run_experiment.py, run_sweep.py
(also --ray), run_draw_plots.py, run_report.py and run_view.py like a built-in; config.json
records it only when a run uses it; a missing or changed plugin is refused in one line; a
plugin failing during a run stops it in one line, its steps kept and resumable."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, TOY, run_records
from icrl.infra.plugins import source_hash

PLUGINS = REPO / "tests" / "data" / "plugins"
EXAMPLE = PLUGINS / "icrl_example_plugin"
FLAKY = PLUGINS / "flaky.py"
CRITIC = PLUGINS / "critic.py"
RUN = [*TOY, "--icrl", "--max_context_examples", "3", "--train_k", "12", "--test_every", "6", "--test_k", "4"]
EXAMPLE_RUN = [*RUN, "--context_strategy_name", "every_other", "--every", "3", "--reward", "same_first_letter"]


def script(name: str, *argv, env: dict = None, cwd=REPO) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "ICRL_PLUGINS"}
    environment.update({"PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", **(env or {})})
    return subprocess.run([sys.executable, str(REPO / name), *map(str, argv)], cwd=cwd, env=environment,
                          capture_output=True, text=True, timeout=300)


def run_dir(root: Path) -> Path:
    """The one run under ``root`` that is not zero-shot."""
    (config,) = [c for c in root.rglob("config.json") if "/0/" not in str(c.relative_to(root))]
    return config.parent


def one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    return lines[0]


@pytest.fixture(scope="module")
def example_run(tmp_path_factory) -> Path:
    """One finished run of the example plugin's strategy and reward, and the zero-shot run its
    verdict compares it with (their data folder)."""
    out = tmp_path_factory.mktemp("example") / "data"
    done = script("run_experiment.py", "--plugin", EXAMPLE, *EXAMPLE_RUN, "--output_dir", out)
    assert done.returncode == 0, done.stderr
    zero_shot = [*RUN[:RUN.index("--max_context_examples")], "--max_context_examples", "0", "--train_k", "12",
                 "--test_every", "6", "--test_k", "4"]
    done = script("run_experiment.py", *zero_shot, "--output_dir", out)
    assert done.returncode == 0, done.stderr
    return out


def test_a_plugins_parts_are_choices_flags_and_records(example_run):
    helped = script("run_experiment.py", "--plugin", EXAMPLE, "--help").stdout
    assert "every_other_only_positive" in helped and "--every EVERY" in helped and "same_first_letter" in helped
    directory = run_dir(example_run)
    assert directory.name.endswith("_rewardsame-first-letter_every3")  # the folder names its parameter
    config = json.loads((directory / "config.json").read_text())
    assert config["args"]["every"] == 3 and config["args"]["reward"] == "same_first_letter"
    (plugin,) = config["plugins"]
    assert plugin["module"] == "icrl_example_plugin" and len(plugin["sha256"]) == 64
    train = [json.loads(line) for line in (directory / "train.jsonl").read_text().splitlines()]
    assert len(train) == 12 and {r["reward"] for r in train} <= {0, 0.5, 1}
    assert all(all(i % 3 == 0 for i in r["context"]) for r in train)  # every third step's episodes
    refused = script("run_experiment.py", "--plugin", EXAMPLE, *RUN, "--context_strategy_name", "every_other",
                     "--every", "0", "--output_dir", example_run.parent / "bad")
    assert one_line(refused) == "error: --every must be a number of steps >= 1, got 0"
    assert not (example_run.parent / "bad").exists()


def test_a_run_without_plugins_records_no_plugins_entry(tmp_path):
    done = script("run_experiment.py", "--plugin", EXAMPLE, *RUN, "--context_strategy_name", "random_unbiased",
                  "--output_dir", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "plugins" not in json.loads((run_dir(tmp_path) / "config.json").read_text())


def test_draw_report_and_view_a_plugins_runs(example_run, tmp_path):
    plots = tmp_path / "plots"
    drawn = script("run_draw_plots.py", "--plugin", EXAMPLE, "--data_dir", example_run, "--out_dir", plots,
                   "--only", "context_size", "--only", "beyond_paper")
    assert drawn.returncode == 0, drawn.stderr
    assert (plots / "context_size.png").stat().st_size > 0 and (plots / "beyond_paper.png").is_file()
    verdict = next(line for line in drawn.stdout.splitlines() if line.startswith("verdict: "))
    assert "every_other (p=1, m=3, reward same_first_letter, every 3)" in verdict  # labelled like a built-in
    assert "every 3" in (plots / "summary.csv").read_text()  # the parameter's label
    report = script("run_report.py", example_run, "--plugin", EXAMPLE, "--out", tmp_path / "report.html")
    assert report.returncode == 0, report.stderr
    assert "every_other" in (tmp_path / "report.html").read_text()
    view = script("run_view.py", example_run, "--plugin", EXAMPLE, "--out", tmp_path / "view.html")
    assert view.returncode == 0, view.stderr


def test_reading_a_plugins_runs_without_it_is_refused(example_run, tmp_path):
    commands = {"run_draw_plots.py": ["--data_dir", example_run, "--out_dir", tmp_path / "plots"],
                "run_report.py": [example_run, "--out", tmp_path / "report.html"],
                "run_view.py": [example_run, "--out", tmp_path / "view.html"],
                "run_count_tokens.py": ["--data_dir", example_run]}
    for name, argv in commands.items():
        line = one_line(script(name, *argv))
        assert line.endswith("was made with plugin icrl_example_plugin, which is not loaded: give it with --plugin "
                             "(or ICRL_PLUGINS)"), (name, line)
    assert list(tmp_path.iterdir()) == []


def test_resume_needs_the_plugin_unchanged(tmp_path):
    plugin = shutil.copytree(EXAMPLE, tmp_path / "icrl_example_plugin")
    out = tmp_path / "data"
    stopped = script("run_experiment.py", "--plugin", plugin, *EXAMPLE_RUN, "--output_dir", out,
                     env={"ICRL_FAKE_INTERRUPT_AT_CALL": "5"})
    assert stopped.returncode == 130, stopped.stderr
    records = {p.name: p.read_bytes() for p in run_dir(out).iterdir() if p.suffix in (".json", ".jsonl")}
    without = script("run_experiment.py", *EXAMPLE_RUN, "--output_dir", out)
    assert one_line(without) == (f"error: unrecognized arguments: --every 3 (see run_experiment.py --help); runs "
                                 f"under {out} were made with plugin icrl_example_plugin, not loaded: give it with "
                                 f"--plugin")
    (plugin / "strategy.py").write_text((plugin / "strategy.py").read_text() + "# changed\n")
    changed = one_line(script("run_experiment.py", "--plugin", plugin, *EXAMPLE_RUN, "--output_dir", out))
    assert f"was made with plugin icrl_example_plugin ({plugin}) as it was before it changed" in changed
    assert "restore its source, or pass --overwrite" in changed
    assert {p.name: p.read_bytes() for p in run_dir(out).iterdir() if p.suffix in (".json", ".jsonl")} == records
    figure_only = script("run_draw_plots.py", "--plugin", plugin, "--data_dir", out, "--out_dir", tmp_path / "p")
    assert "as it was before it changed" in one_line(figure_only)


def test_a_plugin_failing_in_select_stops_the_run_resumably(tmp_path):
    argv = ["--plugin", FLAKY, *RUN, "--context_strategy_name", "flaky"]
    failed = script("run_experiment.py", *argv, "--output_dir", tmp_path / "a", env={"FLAKY_DOWN_FROM": "4"})
    assert one_line(failed) == (f"error: plugin flaky ({FLAKY}) failed in select at step 4: ConnectionError: the "
                                f"index does not answer; the 4 steps before it are kept: once the plugin works, "
                                f"rerun the same command to resume")
    directory = run_dir(tmp_path / "a")
    assert [json.loads(line)["step"] for line in (directory / "train.jsonl").read_text().splitlines()] == [0, 1, 2, 3]
    resumed = script("run_experiment.py", *argv, "--output_dir", tmp_path / "a")
    assert resumed.returncode == 0 and "resuming" in resumed.stderr + resumed.stdout, resumed.stderr
    whole = script("run_experiment.py", *argv, "--output_dir", tmp_path / "b")
    assert whole.returncode == 0, whole.stderr
    assert run_records(directory) == run_records(run_dir(tmp_path / "b"))
    swept = script("run_sweep.py", *argv, "--grid", "temperature=1.0,2.0", "--output_dir", tmp_path / "c",
                   env={"FLAKY_DOWN_FROM": "2"})
    assert swept.returncode == 1  # some runs failed
    assert f"error: run #1 failed: plugin flaky ({FLAKY}) failed in select at step 2: ConnectionError: " in swept.stderr


def test_a_plugins_model_call_is_recorded_counted_viewed_and_resumed(tmp_path):
    """A reward of a plugin that asks the acting model declares its call: the answer is a field
    of the training line, the counter counts its calls, the viewer reads it, and a run killed
    mid-way resumes to the records of a run never killed (the records check answers the call
    from the field)."""
    argv = ["--plugin", CRITIC, *RUN, "--context_strategy_name", "random_unbiased", "--reward", "self_critic"]
    whole = script("run_experiment.py", *argv, "--output_dir", tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    train = [json.loads(line) for line in (run_dir(tmp_path / "whole") / "train.jsonl").read_text().splitlines()]
    assert len(train) == 12 and all(r["critic"] in ("right", "wrong") for r in train)
    assert all(r["reward"] == int(r["critic"] == "right") for r in train)
    assert all(list(r)[-2:] == ["critic", "time_s"] for r in train)
    stopped = script("run_experiment.py", *argv, "--output_dir", tmp_path / "cut", env={"ICRL_FAKE_INTERRUPT_AT_CALL": "9"})
    assert stopped.returncode == 130, stopped.stderr
    resumed = script("run_experiment.py", *argv, "--output_dir", tmp_path / "cut")
    assert resumed.returncode == 0, resumed.stderr
    assert run_records(run_dir(tmp_path / "cut")) == run_records(run_dir(tmp_path / "whole"))
    counted = script("run_count_tokens.py", "--plugin", CRITIC, "--data_dir", tmp_path / "whole", "--tokenizer",
                     "smollm2-135m", "--csv", tmp_path / "counts.csv")
    assert counted.returncode == 0, counted.stderr
    (row,) = csv.DictReader((tmp_path / "counts.csv").open())
    assert row["critic_calls"] == "12" and "also 12 critic calls" in counted.stdout
    view = script("run_view.py", tmp_path / "whole", "--plugin", CRITIC, "--out", tmp_path / "view.html")
    assert view.returncode == 0, view.stderr


def test_icrl_plugins_and_an_entry_point_are_ways_in(tmp_path):
    listed = script("run_experiment.py", "--help", env={"ICRL_PLUGINS": f"{FLAKY}:{EXAMPLE}"}).stdout
    assert "every_other" in listed and "flaky" in listed
    site = tmp_path / "site"
    info = site / "icrl_example_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: icrl-example-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[icrl.plugins]\nexample = icrl_example_plugin\n")
    path = os.pathsep.join([str(REPO), str(site), str(PLUGINS)])
    done = script("run_experiment.py", *EXAMPLE_RUN, "--output_dir", tmp_path / "data", env={"PYTHONPATH": path})
    assert done.returncode == 0, done.stderr
    recorded = json.loads((run_dir(tmp_path / "data") / "config.json").read_text())["plugins"]
    assert recorded == [{"module": "icrl_example_plugin", "sha256": source_hash(EXAMPLE, package=True)}]
    given = script("run_experiment.py", "--plugin", EXAMPLE, *EXAMPLE_RUN, "--output_dir", tmp_path / "data",
                   env={"PYTHONPATH": path})  # the same source both ways: loaded once, the same run
    assert given.returncode == 0 and "already finished" in given.stdout, given.stderr


def test_a_sweep_runs_a_plugins_grid(tmp_path):
    grid = ["--plugin", EXAMPLE, "--grid", "every=2,3", *EXAMPLE_RUN[:-6], "--context_strategy_name", "every_other",
            "--reward", "same_first_letter", "--output_dir", tmp_path / "sweep"]
    dry = script("run_sweep.py", *grid, "--dry_run")
    assert dry.returncode == 0 and f"run_experiment.py --plugin {EXAMPLE} " in dry.stdout, dry.stderr
    done = script("run_sweep.py", *grid)
    assert done.returncode == 0, done.stderr
    alone = script("run_experiment.py", "--plugin", EXAMPLE, *EXAMPLE_RUN, "--output_dir", tmp_path / "alone")
    assert alone.returncode == 0, alone.stderr
    swept = [p.parent for p in (tmp_path / "sweep").rglob("config.json")]
    assert len(swept) == 2 and all("plugins" in json.loads((d / "config.json").read_text()) for d in swept)
    (every3,) = [d for d in swept if d.name.endswith("_every3")]
    assert run_records(every3) == run_records(run_dir(tmp_path / "alone"))


def test_a_ray_sweep_loads_the_plugin_in_its_workers(tmp_path, ray_address):
    grid = ["--plugin", EXAMPLE, "--grid", "every=2,3", *EXAMPLE_RUN[:-6], "--context_strategy_name", "every_other",
            "--reward", "same_first_letter"]
    on_ray = script("run_sweep.py", *grid, "--output_dir", tmp_path / "ray", "--ray", "--ray_address", ray_address,
                    "--ray_workers", "2")
    assert on_ray.returncode == 0, on_ray.stderr
    here = script("run_sweep.py", *grid, "--output_dir", tmp_path / "here")
    assert here.returncode == 0, here.stderr
    ray_runs = {p.parent.relative_to(tmp_path / "ray") for p in (tmp_path / "ray").rglob("train.jsonl")}
    assert len(ray_runs) == 2
    for rel in ray_runs:
        assert run_records(tmp_path / "ray" / rel) == run_records(tmp_path / "here" / rel)
