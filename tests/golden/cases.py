"""The golden cases: commands of the five scripts whose outputs are frozen under tests/golden/.

A case is a list of commands (script name, arguments, extra environment) run one after the
other in one fresh folder, in this process (the scripts' ``main(argv)``, so a case takes
milliseconds on the fake backend). ``snapshot(case, root)`` returns what a user sees of it,
normalized: each command's exit code, stdout and stderr, and every file it leaves under the
folder (JSON parsed, JSON lines parsed line by line, CSV parsed row by row). Only what truly
varies is replaced by a placeholder: timestamps, the environment record, timings, the folder's
absolute path and the repository's. Dictionaries compare as dictionaries (key order is free).

``ICRL_DATA_DIR`` must name the raw dataset files (the runs use trec_coarse).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
RECORDS = HERE / "records"
HELP = HERE / "help"
DRY_RUN = HERE / "dry_run"
INTERRUPT_ENV = "ICRL_FAKE_INTERRUPT_AT_CALL"

SCRIPTS = {
    "run_experiment.py": "icrl.cli.run",
    "run_sweep.py": "icrl.sweep.runner",
    "run_draw_plots.py": "icrl.cli.figures",
    "run_count_tokens.py": "icrl.cli.tokens",
    "find_max_examples_given_max_window.py": "icrl.cli.window",
}

# A small ICRL run on the fake backend: 8 steps, tests at 0, 3, 7 on 6 test examples.
BASE = ["--backend", "fake", "--model_name", "fake", "--task_name", "trec_coarse",
        "--train_k", "8", "--test_every", "4", "--test_k", "6",
        "--seed", "3", "--training_seed", "3", "--test_seed", "3", "--no-progress", "--output_dir", "{root}/data"]


def exp(*words: str, env: Optional[dict] = None, base=BASE) -> tuple:
    return ("run_experiment.py", [*base, *words], env or {})


SWEEP = ["--name", "golden", "--grid", "context_strategy_name=random_biased_end,random_unbiased_only_positive",
         "--grid", "seed=1,2", "--icrl", "--max_context_examples", "4",
         *[w for i, w in enumerate(BASE) if w not in ("--seed", "--no-progress") and BASE[i - 1] != "--seed"]]

NAIVE = ("--icrl", "--context_strategy_name", "random_biased_end", "--temperature", "1.0",
         "--max_context_examples", "4")

# name -> commands (script, argv, env); "{root}" is the case's folder.
CASES: dict[str, list[tuple]] = {
    "naive": [exp(*NAIVE)],
    "naive_plus_only_positive": [exp("--icrl", "--context_strategy_name", "random_biased_end_only_positive",
                                     "--temperature", "2.0", "--max_context_examples", "4")],
    "naive_plus_unbiased": [exp("--icrl", "--context_strategy_name", "random_unbiased", "--max_context_examples", "4")],
    "explorative": [exp("--icrl", "--context_strategy_name", "random_unbiased_only_positive",
                        "--context_p_keep", "0.1", "--max_context_examples", "4")],
    "approximate_uniform": [exp("--icrl", "--context_strategy_name", "approximate", "--max_contexts", "3",
                                "--approximate_context_sampling_method", "uniform", "--max_context_examples", "4")],
    "approximate_exact_only_positive": [exp("--icrl", "--context_strategy_name", "approximate_only_positive",
                                            "--max_contexts", "2", "--approximate_context_sampling_method", "exact",
                                            "--max_context_examples", "4")],
    "supervised_icl": [exp("--no-icrl", "--context_strategy_name", "random_unbiased", "--max_context_examples", "4")],
    "zero_shot": [exp("--icrl", "--max_context_examples", "0")],
    "greedy": [exp("--icrl", "--context_strategy_name", "random_biased_end", "--temperature", "0",
                   "--max_context_examples", "4")],
    # The automatic context size (fake window 300 tokens), ICRL then ICL: one cache file, two keys.
    "automatic_size": [exp("--icrl", "--context_strategy_name", "random_unbiased", "--max_model_len", "300"),
                       exp("--no-icrl", "--context_strategy_name", "random_unbiased", "--max_model_len", "300"),
                       exp("--icrl", "--context_strategy_name", "random_unbiased", "--max_model_len", "300")],
    "exemplars": [exp("--icrl", "--context_strategy_name", "random_biased_end", "--exemplars_per_label", "1",
                      "--max_context_examples", "9")],
    "flip_feedback": [exp(*NAIVE, "--icrl_flip_feedback", "--icrl_flip_feedback_prob", "0.5")],
    "omit_feedback": [exp(*NAIVE, "--icrl_omit_feedback")],
    # Finished at 8 steps, reported again, then extended to 12 and reported again.
    "extended": [exp(*NAIVE), exp(*NAIVE), exp(*NAIVE, "--train_k", "12"), exp(*NAIVE, "--train_k", "12")],
    # Ctrl-C during a model call, then the same command resumes: the records equal "naive"'s.
    # Calls of naive: 0 step 0 train, 1 step 0 test, 2 step 1, 3 step 2, 4 step 3 train, 5 step 3 test.
    "interrupted_train_call": [exp(*NAIVE, env={INTERRUPT_ENV: "3"}), exp(*NAIVE)],
    "interrupted_test_call": [exp(*NAIVE, env={INTERRUPT_ENV: "5"}), exp(*NAIVE)],
    # A usage error: one line, exit 2, nothing written.
    "usage_error": [exp("--icrl", "--context_strategy_name", "random_biased_end", "--temperature", "-1")],
    # A lock-step sweep: 2 strategies x 2 seeds on one fake backend, then run again (all finished).
    # --seed is a grid axis; the sweep sets --no-progress itself.
    "sweep_lockstep": [("run_sweep.py", SWEEP, {}), ("run_sweep.py", SWEEP, {})],
}

# The toy task shipped with the tests (tests/data/toy): every method beyond the paper, and the
# published strategies, with no raw dataset. Its path is relative to the repository, where the
# cases run (``snapshot`` changes into it), so the recorded task name is the same everywhere.
TOY_TASK = "tests/data/toy/toy.toml"
TOY = list(BASE)
TOY[TOY.index("--task_name") + 1] = TOY_TASK
TOY[TOY.index("--train_k") + 1] = "12"


def toy(*words: str, env: Optional[dict] = None) -> tuple:
    return exp(*words, env=env, base=TOY)


KNN = ("--icrl", "--context_strategy_name", "knn_lexical_only_positive", "--max_context_examples", "4")
UCB = ("--icrl", "--context_strategy_name", "approximate", "--max_contexts", "3",
       "--approximate_context_sampling_method", "uniform", "--max_context_examples", "4", "--ucb_alpha", "1.0")
LEARNER = [w for i, w in enumerate(TOY) if w not in ("--backend", "--model_name")
           and TOY[i - 1] not in ("--backend", "--model_name")]

CASES.update({
    "toy_explorative": [toy("--icrl", "--context_strategy_name", "random_unbiased_only_positive",
                            "--context_p_keep", "0.1", "--max_context_examples", "4")],
    "toy_naive_flip": [toy(*NAIVE, "--icrl_flip_feedback", "--icrl_flip_feedback_prob", "0.3")],
    "toy_approximate_exact_graded": [toy("--icrl", "--context_strategy_name", "approximate", "--max_contexts", "3",
                                         "--approximate_context_sampling_method", "exact", "--context_p_keep", "0.5",
                                         "--max_context_examples", "4", "--reward", "coarse_credit")],
    "toy_icl_exemplars": [toy("--no-icrl", "--context_strategy_name", "random_unbiased", "--exemplars_per_label", "1",
                              "--max_context_examples", "8")],
    "toy_zero_shot": [toy("--icrl", "--max_context_examples", "0")],
    "toy_knn_lexical": [toy(*KNN)],
    "toy_knn_lexical_explore_reset": [toy(*KNN, "--p_exploration", "0.2", "--prob_reset", "0.2")],
    "toy_epsilon_resets": [toy("--icrl", "--context_strategy_name", "random_unbiased_only_positive",
                               "--context_p_keep", "0.5", "--max_context_examples", "4", "--p_exploration", "0.3",
                               "--prob_reset", "0.2")],
    "toy_ucb": [toy(*UCB)],
    "toy_ucb_reset_graded": [toy("--icrl", "--context_strategy_name", "approximate_only_positive", "--max_contexts",
                                 "2", "--approximate_context_sampling_method", "exact", "--max_context_examples", "4",
                                 "--ucb_alpha", "0.5", "--prob_reset", "0.15", "--p_exploration", "0.1",
                                 "--reward", "coarse_credit")],
    "toy_published_quirks": [toy("--icrl", "--context_strategy_name", "approximate_only_positive", "--max_contexts",
                                 "2", "--approximate_context_sampling_method", "uniform", "--max_context_examples",
                                 "4", "--published_quirks")],
    "toy_linucb": [exp("--agent", "linucb", base=LEARNER)],
    "toy_linucb_extended": [exp("--agent", "linucb", "--bandit_alpha", "0.5", base=LEARNER),
                            exp("--agent", "linucb", "--bandit_alpha", "0.5", "--train_k", "20", base=LEARNER)],
    "toy_epsilon_greedy_learner": [exp("--agent", "epsilon_greedy", "--bandit_epsilon", "0.3", base=LEARNER)],
    "toy_supervised_learner": [exp("--agent", "supervised", base=LEARNER)],
    # Ctrl-C during a model call, then the same command resumes: the records equal the
    # uninterrupted run's (knn: calls 0 step 0 train, 1 step 0 test, 2-4 steps 1-3, 5 step 3 test).
    "toy_interrupted_knn": [toy(*KNN, env={INTERRUPT_ENV: "5"}), toy(*KNN)],
    "toy_interrupted_ucb": [toy(*UCB, env={INTERRUPT_ENV: "6"}), toy(*UCB)],
    "toy_sweep": [("run_sweep.py", ["--name", "toy", "--grid", "context_strategy_name=knn_lexical,approximate",
                                    "--grid", "seed=1,2", "--icrl", "--max_context_examples", "4", "--max_contexts",
                                    "2", "--approximate_context_sampling_method", "uniform",
                                    *[w for i, w in enumerate(TOY) if w not in ("--seed", "--no-progress")
                                      and TOY[i - 1] != "--seed"]], {})],
})

# Resumed runs must leave exactly the uninterrupted run's files.
SAME_FILES_AS = {"interrupted_train_call": "naive", "interrupted_test_call": "naive",
                 "toy_interrupted_knn": "toy_knn_lexical", "toy_interrupted_ucb": "toy_ucb"}

# The real SmolLM2 (transformers backend), once: marked `model` in test_golden.py.
MODEL_CASES: dict[str, list[tuple]] = {
    "smollm2_naive": [("run_experiment.py", [
        "--backend", "transformers", "--model_name", "smollm2-135m", "--task_name", "trec_coarse",
        "--icrl", "--context_strategy_name", "random_biased_end", "--max_context_examples", "3",
        "--train_k", "4", "--test_every", "2", "--test_k", "3", "--seed", "3", "--training_seed", "3",
        "--test_seed", "3", "--no-progress", "--output_dir", "{root}/data"], {})],
}

# all-MiniLM-L6-v2 (sentence-transformers, offline): marked `model` too.
MODEL_CASES.update({
    "toy_knn_embedding": [toy("--icrl", "--context_strategy_name", "knn_embedding", "--max_context_examples", "4")],
    "toy_linucb_minilm": [exp("--agent", "linucb", "--features", "minilm", base=LEARNER)],
})

PRESET_NAMES = ("paper_main", "paper_unsemantic")




# -- running --------------------------------------------------------------------------------
@dataclass
class Result:
    code: int
    stdout: str
    stderr: str
    extra: dict = field(default_factory=dict)


def call(script: str, argv: list, env: Optional[dict] = None) -> Result:
    """Run one script's main(argv) in this process; stdout, stderr and the exit code."""
    import importlib

    main: Callable = importlib.import_module(SCRIPTS[script]).main
    out, err = io.StringIO(), io.StringIO()
    logger = logging.getLogger("icrl")
    handlers, level = list(logger.handlers), logger.level
    saved_env = {k: os.environ.get(k) for k in (env or {})}
    saved_argv0 = sys.argv[0]
    os.environ.update(env or {})
    sys.argv[0] = script
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(argv))
            except SystemExit as exc:  # --help, argparse errors
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv[0] = saved_argv0
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for h in list(logger.handlers):
            if h not in handlers:
                logger.removeHandler(h)
        logger.setLevel(level)
    return Result(int(code or 0), out.getvalue(), err.getvalue())


def help_text(script: str) -> str:
    """``SCRIPT --help`` at a fixed width of 100 columns."""
    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        result = call(script, ["--help"])
    finally:
        if saved is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved
    assert result.code == 0, result.stderr
    return result.stdout


def dry_run_text(preset: str) -> str:
    result = call("run_sweep.py", ["--preset", preset, "--model_name", "smollm2-135m", "--dry_run"])
    return f"exit {result.code}\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}"


# -- normalizing ----------------------------------------------------------------------------
TIME = "<time>"
TIMING_KEYS = {"time_s", "mean_step_time_s", "total_time_s"}


_TOY_FOLDER = re.compile(r"\btoy-[0-9a-f]{8}\b")


def _paths(text: str, root: Path) -> str:
    for path, name in ((root.resolve(), "<root>"), (root, "<root>"), (REPO, "<repo>")):
        text = text.replace(str(path), name)
    return _TOY_FOLDER.sub("toy-<hash>", text)  # the toy task's folder: a hash of its absolute path


def _deep(value, root: Path, key: Optional[str] = None):
    if isinstance(value, dict):
        return {k: _deep(v, root, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep(v, root) for v in value]
    if key in TIMING_KEYS and value is not None:
        return TIME
    if isinstance(value, str):
        return _paths(value, root)
    return value


def normalize_record(name: str, data, root: Path):
    """One parsed record file, with what varies replaced."""
    data = _deep(data, root)
    if name == "config.json" and isinstance(data, dict):
        if "created" in data:
            data["created"] = "<created>"
        if "environment" in data:
            data["environment"] = "<environment>"
        for entry in data.get("extended", []):
            if isinstance(entry, dict) and "at" in entry:
                entry["at"] = "<at>"
    return data


def _sweep_table(text: str) -> str:
    """The sweep's console table: whitespace collapsed, the time_s column and seconds replaced."""
    lines = []
    for line in text.splitlines():
        words = line.split()
        if len(words) >= 8 and (words[0].isdigit() or words[0] == "run") and words[1] != "of":
            if words[0] != "run":
                words[6] = TIME
            line = " ".join(words)
        line = re.sub(r"finished in \d+ s", "finished in <n> s", line)
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


_BAR = re.compile(r"^\s*$|%\|")


def _sweep_output(text: str) -> str:
    """The sweep's console: its progress bar dropped (rates, redraws); the runs' own lines
    (``#i ... test accuracy``, ``already finished: ...``), printed by the runs' threads in the
    order they happen to run, sorted; the table as above."""
    lines = [line for line in text.splitlines() if not _BAR.search(line)]

    def from_a_run(line: str) -> bool:
        return line.startswith(("#", "already finished: "))

    runs = sorted(line for line in lines if from_a_run(line))
    if runs:
        first = next(i for i, line in enumerate(lines) if from_a_run(line))
        rest = [line for line in lines if not from_a_run(line)]
        lines = rest[:first] + runs + rest[first:]
    return _sweep_table("\n".join(lines) + "\n") if lines else ""


def normalize_output(script: str, text: str, root: Path) -> str:
    """Paths replaced; progress bars (ours and the libraries', e.g. "Loading weights") dropped."""
    text = _paths(text, root)
    if script == "run_sweep.py":
        return _sweep_output(text)
    lines = [line for line in text.splitlines() if not _BAR.search(line)]
    return "\n".join(lines) + "\n" if lines else ""


def read_files(root: Path) -> dict:
    """Every file under ``root``, parsed where it is JSON, JSON lines or CSV; log.txt lines less
    their timestamps; the lock file by name only."""
    files = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = _paths(str(path.relative_to(root)), root)
        name = path.name
        if name.endswith(".json"):
            files[rel] = normalize_record(name, json.loads(path.read_text(encoding="utf-8")), root)
        elif name.endswith(".jsonl"):
            files[rel] = [normalize_record(name, json.loads(line), root)
                          for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        elif name.endswith(".csv"):
            with open(path, newline="", encoding="utf-8") as f:
                rows = [normalize_record(name, dict(row), root) for row in csv.DictReader(f)]
            files[rel] = rows
        elif name == "log.txt":
            files[rel] = "<log>"  # timestamps and timings on every line; its events are checked elsewhere
        else:
            files[rel] = "<present>"
    return files


def snapshot(commands: list[tuple], root: Path) -> dict:
    """Run a case's commands in ``root``; the normalized record of what they did."""
    root.mkdir(parents=True, exist_ok=True)
    outputs = []
    for script, argv, env in commands:
        words = [w.replace("{root}", str(root)) for w in argv]
        with contextlib.chdir(REPO):  # the toy task's relative path
            result = call(script, words, env)
        outputs.append({"command": " ".join([script, *argv]), "env": dict(env), "exit": result.code,
                        "stdout": normalize_output(script, result.stdout, root),
                        "stderr": normalize_output(script, result.stderr, root)})
    return {"commands": outputs, "files": read_files(root)}


def golden_path(name: str) -> Path:
    return RECORDS / f"{name}.json"


def load_golden(name: str) -> dict:
    return json.loads(golden_path(name).read_text(encoding="utf-8"))


def dump(data) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
