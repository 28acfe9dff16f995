"""What many tests share: the repository's path, the toy task shipped with the tests
(tests/data/toy: four intents, 91 training and 24 test rows, a hierarchy for the graded reward),
and reading a run's records less their timings."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Sequence

from icrl.backends.fake import FakeBackend
from icrl.backends.usage import Usage
from icrl.method.episode import Episode
from icrl.method.prompts import build_messages

REPO = Path(__file__).resolve().parents[1]
TOY_TASK = str(REPO / "tests" / "data" / "toy" / "toy.toml")
# A fake-backend run on the toy task with every seed given (add the method's flags).
TOY = ["--backend", "fake", "--model_name", "fake", "--task_name", TOY_TASK, "--no-progress",
       "--seed", "100", "--training_seed", "100", "--test_seed", "100"]


def untimed(rows: list) -> list:
    """Records less their timings (``time_s``: the only field that differs between equal runs)."""
    return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]


def untimed_records(run_dir: Path, args: bool = False) -> dict:
    """train and test records less their timings; with ``args``, also config.json's args."""
    out = {}
    for name in ("train", "test"):
        path = Path(run_dir) / f"{name}.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []
        out[name] = untimed(lines)
    if args:
        out["args"] = json.loads((Path(run_dir) / "config.json").read_text())["args"]
    return out


def run_records(run_dir: Path, args: bool = False) -> dict:
    """A finished run's train and test records and results.json, less their timings (each file
    must exist); with ``args``, also config.json's args. Two runs of one command compare equal."""
    out = {}
    for name in ("train.jsonl", "test.jsonl"):
        out[name] = untimed([json.loads(line) for line in (Path(run_dir) / name).read_text().splitlines()])
    results = json.loads((Path(run_dir) / "results.json").read_text())
    out["results"] = {k: v for k, v in results.items() if "time" not in k}
    if args:
        out["args"] = json.loads((Path(run_dir) / "config.json").read_text())["args"]
    return out


# A tiny explorative run on the toy task: 6 steps, tests at 0, 2, 5 on 4 test inputs.
TINY_ARGS = ["--task_name", TOY_TASK, "--context_strategy_name", "random_unbiased_only_positive",
             "--context_p_keep", "0.5", "--max_context_examples", "4", "--train_k", "6", "--test_every", "3",
             "--test_k", "4", "--temperature", "1.0", "--no-progress", "--backend", "fake",
             "--icrl", "--seed", "100", "--training_seed", "100", "--test_seed", "100"]


def tiny_argv(out, *extra) -> list:
    """run_experiment.py's words for the tiny run under ``out`` (``extra`` flags win)."""
    return [*TINY_ARGS, "--output_dir", str(out), *extra]


# Subprocesses that run the package from this checkout (fault injection: kills, signals).
SUBPROCESS_ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
# A fake backend slow enough (0.1 s a call) to be signalled mid-run.
SLOW_ENV = {**SUBPROCESS_ENV, "ICRL_FAKE_DELAY_S": "0.1"}


def tiny_run_dir(out, *extra) -> Path:
    """The run folder of the tiny run under ``out``."""
    from icrl.cli import parse_args
    from icrl.records import experiment_dir

    return experiment_dir(out, parse_args(tiny_argv(out, *extra)).spec.as_record())


def train_test(run_dir) -> tuple:
    """(train lines, test lines) of a run, less their timings."""
    records = untimed_records(Path(run_dir))
    return records["train"], records["test"]


def lines_of(path) -> list:
    """A records file's lines, each with its newline."""
    return Path(path).read_text().splitlines(keepends=True)


def one_error_line(capsys) -> str:
    """The one line a refusal prints (``error: ...``, no traceback); fails the test otherwise."""
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    return err


# Damaged fields of the tiny run's records (helpers.tiny_argv: 6 training lines, 3 test lines): (file,
# line, field, value). A resume refuses some (a model's output the steps after it depend on) and
# repairs the others (what follows from the data and the predictions; a test line, recomputed);
# every reader gives each the resume's verdict (``resume_verdict``).
BAD_FIELDS = [("train.jsonl", 2, "reasoning", 3),          # a field the run does not write: repaired
              ("train.jsonl", 3, "context", "0 1"),        # a string where the context shown stands: refused
              ("train.jsonl", 4, "feedback", "yes"),       # text where the reward shown stands: repaired
              ("train.jsonl", 5, "step", "4"),             # a string step: refused
              ("train.jsonl", 1, "example_id", True),      # a boolean for an integer: refused
              ("test.jsonl", 2, "reasoning", 3),           # a test line's field the run does not write
              ("test.jsonl", 1, "predictions", "a b"),     # a string where a list stands: recomputed
              ("test.jsonl", 3, "accuracy", "yes"),        # text where a number stands: recomputed
              ("test.jsonl", 2, "step", "2"),              # a string step: recomputed
              ("test.jsonl", 3, "context_size", False)]    # a boolean for an integer: repaired


def corrupt_field(run_dir, name: str, line: int, field: str, value) -> None:
    """Set ``field`` of line ``line`` (from 1) of a run's records file ``name`` to ``value``."""
    path = Path(run_dir) / name
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = json.dumps({**json.loads(lines[line - 1]), field: value}) + "\n"
    path.write_text("".join(lines))


def resume_verdict(out, capsys):
    """The one line a resume refuses the (damaged) tiny run under ``out`` with, or None where it
    repairs it: run on a copy, its paths said as the original's."""
    from icrl.cli.run import main

    copy = Path(f"{out}-resumed")
    shutil.copytree(out, copy)
    capsys.readouterr()
    code = main(tiny_argv(copy))
    err = capsys.readouterr().err.strip()
    shutil.rmtree(copy)
    if code == 0:
        return None
    assert code == 2 and err.startswith("error: ") and "\n" not in err, err
    return err.replace(str(copy), str(out))


def reader_verdict(capsys, code: int, expected) -> str:
    """A reader's exit ``code`` and output against the resume's verdict ``expected`` (its refusal,
    or None: it repairs): the same one line, or the run read as damaged; what the reader said."""
    captured = capsys.readouterr()
    if expected is not None:
        assert code == 2 and captured.err.strip() == expected, (code, captured.err)
        return captured.err
    assert code == 0, captured.err
    return captured.out + captured.err


def files_under(path: Path) -> list:
    """Every file and folder under ``path``, relative (nothing left behind: an empty list)."""
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# A published-style command on the vLLM engine (the vLLM tests): explorative ICRL on banking77.
VLLM_PAPER_STYLE = ["--backend", "vllm", "--model_name", "smollm2-135m", "--task_name", "banking77",
               "--context_strategy_name", "random_unbiased_only_positive", "--temperature", "1.0",
               "--context_p_keep", "0.1", "--icrl", "--no-icrl_omit_feedback", "--no-icrl_flip_feedback",
               "--max_context_examples", "16", "--train_k", "16", "--test_every", "8", "--test_k", "10",
               "--debug_k", "1", "--seed", "100", "--training_seed", "100", "--test_seed", "100", "--no-verbose",
               "--no-progress"]


def icrl_prompts(backend, task, n_context: int, n_queries: int, seed: int = 0) -> list[str]:
    """`n_queries` test prompts after one ICRL context of `n_context` real training episodes
    (predictions alternate between right and wrong, as in a run)."""
    train = task.training_examples(size=n_context, seed=seed)
    context = []
    for i, e in enumerate(train):
        answer = task.answer(e)
        prediction = answer if i % 2 == 0 else task.labels[(task.labels.index(answer) + 1) % len(task.labels)]
        context.append(Episode(task.prompt(e), prediction, int(prediction == answer), answer,
                               int(prediction == answer)))
    out = []
    for e in task.test_examples(size=n_queries, seed=seed):
        messages, prefix = build_messages(task, context, task.prompt(e), "icrl",
                                          supports_system_role=backend.supports_system_role)
        out.append(backend.render(messages, prefix))
    return out


def reasoning_run_resumes(backend, out: Path, budget: int = 8) -> tuple[dict, dict]:
    """A tiny --reasoning run on ``backend`` (already loaded) under ``out``, then the same run
    resumed after its last two steps were lost: (records of the whole run, records after the
    resume). A backend whose reasoning is seeded gives equal ones."""
    from icrl.cli import parse_args
    from icrl.run.experiment import Experiment

    words = [*[w for w in TOY if w not in ("--backend", "fake", "--model_name")], "--icrl",
             "--context_strategy_name", "random_biased_end", "--max_context_examples", "2", "--train_k", "4",
             "--test_every", "2", "--test_k", "2", "--reasoning", str(budget), "--temperature", "1.0",
             "--output_dir", str(out)]
    experiment = Experiment(parse_args(words), backend=backend)
    assert experiment.run()["finished"]
    whole = untimed_records(experiment.out_dir)
    train = (experiment.out_dir / "train.jsonl").read_text().splitlines(keepends=True)
    (experiment.out_dir / "train.jsonl").write_text("".join(train[:2]))
    resumed = Experiment(parse_args(words), backend=backend)
    assert resumed.run()["finished"]
    return whole, untimed_records(resumed.out_dir)


def run_and_resume(tmp_path, monkeypatch, argv: list, at_call: int) -> tuple[Path, Path]:
    """run_experiment.py ``argv`` on the fake backend, whole under tmp_path/"whole" and stopped at
    its model call ``at_call`` then resumed under tmp_path/"cut": (whole run folder, resumed run
    folder). The caller compares their records."""
    from icrl.backends.fake import INTERRUPT_ENV
    from icrl.cli.run import main

    assert main([*argv, "--output_dir", str(tmp_path / "whole")]) == 0
    monkeypatch.setenv(INTERRUPT_ENV, str(at_call))
    assert main([*argv, "--output_dir", str(tmp_path / "cut")]) != 0
    monkeypatch.delenv(INTERRUPT_ENV)
    cut = next((tmp_path / "cut").rglob("config.json")).parent
    steps = len(lines_of(cut / "train.jsonl")) if (cut / "train.jsonl").exists() else 0
    assert steps < len(lines_of(next((tmp_path / "whole").rglob("train.jsonl"))))
    assert main([*argv, "--output_dir", str(tmp_path / "cut")]) == 0
    return next((tmp_path / "whole").rglob("config.json")).parent, cut


# Headless Chromium for the pages' tests (the viewer's and the report's): a driver, or a skip
# that says what is missing.
def chromium_driver(profile_dir, window: str = "1400,1600"):
    import shutil

    import pytest

    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e .[dev])")
    from selenium.webdriver.chrome.service import Service

    browser = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)
    chromedriver = shutil.which("chromedriver")
    if not browser or not chromedriver:
        pytest.skip("Chromium or chromedriver not found (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", f"--window-size={window}",
                 f"--user-data-dir={profile_dir}"):
        options.add_argument(flag)
    options.binary_location = browser
    return webdriver.Chrome(options=options, service=Service(chromedriver))


LLAMA_TOKENIZER = Path(os.environ.get("ICRL_TOKENIZERS_DIR", "../shared/tokenizers")) / "meta-llama__Meta-Llama-3.1-8B-Instruct"
MODEL_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "max_position_embeddings": 131072}


def gpu_assets(data: Path) -> Path:
    """A folder shaped like ``make gpu-assets``'s: a tokenizer with its model's config.json, raw
    dataset files; no run in it."""
    assets = data / "gpu-assets"
    tokenizer = assets / "meta-llama__Meta-Llama-3.1-8B-Instruct"
    tokenizer.mkdir(parents=True)
    (tokenizer / "config.json").write_text(json.dumps(MODEL_CONFIG))
    (tokenizer / "tokenizer_config.json").write_text("{}")
    if (LLAMA_TOKENIZER / "config.json").is_file():  # the real one where ../shared is here
        shutil.copy(LLAMA_TOKENIZER / "config.json", tokenizer / "config.json")
    (assets / "datasets" / "banking77").mkdir(parents=True)
    (assets / "datasets" / "banking77" / "train.csv").write_text("text,category\nhi,greeting\n")
    return assets


def render_page_script(package: str, data_id: str, data: dict, tmp_path: Path, actions: Sequence = ()) -> dict:
    """The DOM that ``package``'s page script (icrl/report/report.js, icrl/viewer/viewer.js, after
    the shared dom.js) builds from ``data``, drawn under node with tests/dom.js: a JSON tree of
    elements (tag, id, class, attrs, text, children), after ``actions`` ({id, value, event}: a
    value set and that event's listener called, e.g. the viewer's step box). Skips the test where
    node is missing."""
    import pytest

    node = shutil.which("node")
    if node is None:
        pytest.skip("node not found (apt-get install nodejs)")
    scripts = [REPO / "icrl" / "viewer" / "dom.js", REPO / "icrl" / package / f"{package}.js"]
    spec = tmp_path / f"{package}-page.json"
    spec.write_text(json.dumps({"scripts": [str(p) for p in scripts], "data_id": data_id, "data": data,
                                "actions": list(actions)}))
    import subprocess

    done = subprocess.run([node, str(REPO / "tests" / "dom.js"), str(spec)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def elements(tree: dict, where) -> list:
    """Every element of a rendered tree (render_page_script) for which ``where(element)`` holds, in
    document order."""
    found = [tree] if where(tree) else []
    for child in tree["children"]:
        found += elements(child, where)
    return found



class MeteredFake(FakeBackend):
    """The fake backend billed as a hosted API bills (``icrl.backends.usage.ReportsUsage``):
    each prompt predicted ``prompt`` tokens, ``cached`` of them served by a prompt cache, one
    output token, one request (``--backend metered_fake`` once ``register_metered_fake()``)."""

    prompt, cached = 10, 6

    def __init__(self, model_name, **options):
        super().__init__(model_name, **options)
        self.spent = Usage()

    def usage(self) -> Usage:
        return self.spent

    def predict(self, prompts, labels, temperature, seed, progress=None):
        n = len(prompts)
        self.spent = self.spent + Usage(self.prompt * n, self.cached * n, n, n)
        return super().predict(prompts, labels, temperature, seed, progress)


def register_metered_fake():
    """``--backend metered_fake`` (MeteredFake); returns what takes it out again."""
    from icrl import backends

    backends.register_backend("metered_fake", MeteredFake)
    return lambda: backends._unregister("metered_fake")


def run_config(steps: int, *, mode: str = "icrl", labels: Sequence[str] = ("a", "b"), test_answers: Sequence[str] = ("a",),
               test_every: int = 0, size: int = 4, args: dict | None = None, backend: dict | None = None) -> dict:
    """A complete config.json for hand-written records of ``steps`` steps (one a zero-shot run has):
    every section of the schema, its plan the one its arguments give (``test_every``: 0, tests at
    the first and the last step), on a task named "t" whose data is nowhere (the readers check such
    records from config.json alone)."""
    from icrl.config import RunOptions, RunSpec
    from icrl.records.plan import Plan

    size = 0 if mode == "zero_shot" else size
    every = test_every or max(steps, 1)
    spec = RunSpec(**{"model_name": "m", "task_name": "t", "context_strategy_name": None if size == 0 else
                      "random_biased_end", "max_context_examples": size, "icrl": mode != "icl", "train_k": steps or 1,
                      "test_every": every, "test_k": len(test_answers), "seed": 1, "training_seed": 1, "test_seed": 1,
                      **(args or {})})
    plan = Plan.of(mode != "icl", size, 0 if mode == "zero_shot" else steps, every)
    options = {**RunOptions().as_record(), "ucb_alpha": None, "prob_reset": None, "p_exploration": None}
    return {
        "format_version": 1, "created": "2026-01-01T00:00:00+00:00", "args": spec.as_record(),
        "runtime_args": dict(sorted(options.items())),
        "resolved": {"mode": mode, "max_context_examples": size, "steps": plan.steps, "test_steps": list(plan.test_steps),
                     "num_exemplars": 0, "train_examples": 0 if mode == "zero_shot" else steps,
                     "test_examples": len(test_answers)},
        "backend": backend or {"backend": "fake", "model_name": "m", "max_model_len": 4096, "supports_system_role": True,
                               "eot_token": "", "published_tokenization": False},
        "environment": {"icrl": "0", "python": "3", "platform": "test", "packages": {}, "git_commit": None,
                        "git_dirty": None, "device": "cpu"},
        "dataset": {"task": "t", "fingerprint": "f", "labels": list(labels), "num_train": steps,
                    "num_test": len(test_answers)},
        "test_set": {"ids": list(range(len(test_answers))), "prompts": [f"test {i}" for i in range(len(test_answers))],
                     "answers": list(test_answers)},
        "train_example_ids": [] if mode == "zero_shot" else list(range(plan.steps)), "exemplars": [],
    }


def typed_run(run_dir) -> tuple:
    """(config.json, training lines, test lines) of a run, typed, as the readers read them."""
    from icrl.run.readback import read_run

    run = read_run(Path(run_dir))
    return run.config, run.train, run.test
