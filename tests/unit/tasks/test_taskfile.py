"""Task files (icrl/tasks/taskfile.py, rows.py; docs/tasks.md).

- Each built-in task, now built from its task file, equals the task the package built before
  task files existed (digests frozen at commit 8d7e326 from the raw files).
- Every bad task file is a one-line error with exit code 2 before any model loads.
- A task file for data in a format the package never read (a CSV made from the raw TREC
  files; the example of docs/tasks.md) runs through every script, on the fake backend.
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import json
import os
import re
from pathlib import Path

import pytest

from icrl.errors import UsageError
from icrl.tasks import TASK_NAMES, load_task, parse_task_name, prompt_parts, sources, task_folder
from icrl.tasks.taskfile import BUILTIN_DIR

REPO = Path(__file__).resolve().parents[3]
TOKENIZERS = Path(os.environ.get("ICRL_TOKENIZERS_DIR") or REPO.parent / "shared" / "tokenizers")
QWEN = "Qwen/Qwen2.5-7B-Instruct"  # a tokenizer-only copy in ICRL_TOKENIZERS_DIR

# sha256 (first 16 hex digits) over name, labels, template, prefix, description, every train and
# test row (id, text, label id, prompt, answer) in order, and the seed-100 training order,
# computed with the registry code of commit 8d7e326 (before task files).
BEFORE = {
    "banking77": "9000ae33f9edc9c9", "banking77_top5": "825624b59d5ee6f4",
    "banking77_unsemantic": "40c5e3e541efafaa", "banking77_top3_unsemantic": "dc29f86a95a16538",
    "clinic150": "3884b620e2e0bd9a", "clinic150_top5": "f469c8b8b912b911",
    "clinic150_unsemantic": "3485b4555fd3a1b3", "clinic150_top3_unsemantic": "ccf43e6efa2ed29f",
    "clinic150_oos": "778f8036b60b4cef", "clinic150_oos_top5": "0b1353f7e4678d93",
    "clinic150_oos_unsemantic": "b23e32bd7c615b44", "clinic150_oos_top3_unsemantic": "48848ecfcd1a41c4",
    "trec_coarse": "b45acd2995db8384", "trec_coarse_top5": "4686b34ab0c695de",
    "trec_coarse_unsemantic": "bdaf2d1f29dc8f38", "trec_coarse_top3_unsemantic": "23532f1baeb74ab7",
    "trec_fine": "de0d28bd8f827a59", "trec_fine_top5": "0cf1d58ac7e4bd56",
    "trec_fine_unsemantic": "bc883aac376fdcca", "trec_fine_top3_unsemantic": "26a73c0f33f57685",
}


def digest(task) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([task.name, task.labels, task.prompt_template, task.prediction_prefix,
                         task.description]).encode())
    for split, rows in (("train", task.train), ("test", task.test)):
        for ex in rows:
            h.update(json.dumps([split, ex.id, ex.text, ex.label, task.prompt(ex), task.answer(ex)],
                                ensure_ascii=False).encode())
    h.update(json.dumps([e.id for e in task.training_examples(-1, 100)]).encode())
    return h.hexdigest()[:16]


def script(name: str):
    """A top-level script's module (its main), however the package behind it is arranged."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), REPO / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def fresh_source_cache():
    sources.load_source.cache_clear()
    yield
    sources.load_source.cache_clear()


# --------------------------------------------------------------- built-in tasks --
def test_every_builtin_task_has_its_task_file():
    assert sorted(p.stem for p in BUILTIN_DIR.glob("*.toml")) == sorted(TASK_NAMES)


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_builtin_task_from_its_file_is_todays_task(data_dir, name):
    task = load_task(name, data_dir)
    assert digest(task) == BEFORE[name]


@pytest.mark.parametrize("base", ["banking77", "clinic150", "trec_fine"])
def test_builtin_task_file_given_as_a_path_gives_the_same_rows(data_dir, base, monkeypatch):
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    by_name, by_path = load_task(base + "_top5", data_dir), load_task(f"{BUILTIN_DIR / base}.toml_top5")
    assert by_path.labels == by_name.labels
    assert by_path.train == by_name.train and by_path.test == by_name.test
    assert [by_path.prompt(e) for e in by_path.test] == [by_name.prompt(e) for e in by_name.test]
    assert by_path.prediction_prefix == by_name.prediction_prefix


def test_nlu_task_file(data_dir):
    path = data_dir / "nlu_evaluation_data" / "NLU-Data-Home-Domain-Annotated-All.csv"
    if not path.is_file():
        pytest.skip("no NLU file in ICRL_DATA_DIR (nlu_evaluation_data/MISSING.md): nlu cannot be "
                    "compared with the raw file here")
    task = load_task("nlu", data_dir)
    assert len(task.labels) == 68 and task.prediction_prefix == "Intent:"


def test_trec_fine_hierarchy_follows_top_k_and_unsemantic(data_dir):
    fine = load_task("trec_fine", data_dir)
    assert fine.hierarchy["human individual"] == "human" and len(fine.hierarchy) == 50
    top = load_task("trec_fine_top3_unsemantic", data_dir)
    assert set(top.hierarchy) == set(top.labels) == {"label_1000", "label_1001", "label_1002"}
    assert load_task("trec_coarse", data_dir).hierarchy == {}


# ------------------------------------------------------------- the CSV example --
def trec_csv(folder: Path) -> None:
    """train.csv and test.csv (question, coarse type code) from the raw TREC files."""
    raw = Path(os.environ.get("ICRL_DATA_DIR") or REPO.parent / "shared" / "datasets") / "trec"
    if not raw.is_dir():
        pytest.skip("raw TREC files not found: set ICRL_DATA_DIR")
    for source, target in (("train_5500.label", "train.csv"), ("TREC_10.label", "test.csv")):
        with open(raw / source, "rb") as f, open(folder / target, "w", newline="", encoding="utf-8") as out:
            writer = csv.writer(out)
            writer.writerow(["question", "type"])
            for line in f:
                label, _, question = line.replace(b"\xf0", b" ").strip().decode().partition(" ")
                writer.writerow([question, label.split(":")[0]])


def docs_example() -> str:
    text = (REPO / "docs" / "tasks.md").read_text(encoding="utf-8")
    section = text.split("## A complete example", 1)[1]
    return re.search(r"```toml\n(.*?)```", section, re.S).group(1)


@pytest.fixture
def questions(tmp_path) -> Path:
    """The docs/tasks.md example over a CSV built from the raw TREC files."""
    folder = tmp_path / "my tasks"
    folder.mkdir()
    trec_csv(folder)
    path = folder / "questions.toml"
    path.write_text(docs_example(), encoding="utf-8")
    return path


def test_the_docs_example_reads_the_csv(questions, data_dir):
    task = load_task(str(questions))
    builtin = load_task("trec_coarse", data_dir)
    assert task.labels == ["abbreviation", "entity", "description", "person", "place", "number"]
    assert [(e.id, e.text, e.label) for e in task.train] == [(e.id, e.text, e.label) for e in builtin.train]
    assert task.prompt(task.test[0]) == "Question: " + builtin.test[0].text
    assert task.description.startswith("Classify each question")
    assert task.hierarchy == {"person": "named thing", "place": "named thing"}
    assert prompt_parts(str(questions)) == {"prediction_prefix": "Answer type:",
                                            "description": task.description}
    top = load_task(f"{questions}_top2_unsemantic")
    assert len(top.labels) == 2 and top.labels[0] == "label_1000"


def run_flags(task_name, out: Path, *extra: str) -> list:
    task = ["--task_name", task_name] if task_name else []
    return [*task, "--backend", "fake", "--model_name", QWEN, "--icrl",
            "--context_strategy_name", "random_unbiased_only_positive", "--context_p_keep", "0.1",
            "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--train_k", "40",
            "--test_k", "20", "--test_every", "20", "--output_dir", str(out), *extra]


def test_task_file_runs_through_every_script(questions, tmp_path, capsys):
    if not (TOKENIZERS / QWEN.replace("/", "__")).is_dir():
        pytest.skip(f"the {QWEN} tokenizer is not in ICRL_TOKENIZERS_DIR")
    os.environ.setdefault("ICRL_TOKENIZERS_DIR", str(TOKENIZERS))
    out = tmp_path / "runs"
    name = f"{questions}_top4"

    # run_experiment.py: the context size found from the window, exemplars, then a resume
    assert script("run_experiment.py").main(run_flags(name, out, "--exemplars_per_label", "1")) == 0
    runs = sorted(p.parent for p in out.rglob("config.json"))
    assert len(runs) == 1 and runs[0].is_relative_to(out)
    assert runs[0].relative_to(out).parts[2] == task_folder(name) and task_folder(name).startswith("questions-")
    config = json.loads((runs[0] / "config.json").read_text())
    assert config["args"]["task_name"] == name and len(config["dataset"]["labels"]) == 4
    assert config["test_set"]["prompts"][0].startswith("Question: ")
    assert (out / QWEN / task_folder(name) / "maximum_context_length.json").is_file()
    capsys.readouterr()
    assert script("run_experiment.py").main(run_flags(name, out, "--exemplars_per_label", "1")) == 0
    assert "already finished" in capsys.readouterr().out

    # run_sweep.py: a grid over the task file's variants
    sweep = ["--grid", f"task_name={questions},{questions}_unsemantic", "--max_context_examples", "6",
             "--summary", str(tmp_path / "sweep.csv"), *run_flags(None, out)]
    assert script("run_sweep.py").main(sweep) == 0
    assert len(list(out.rglob("results.json"))) == 3

    # find_max_examples_given_max_window.py: the real tokenizer over the file's prompts
    capsys.readouterr()
    assert script("find_max_examples_given_max_window.py").main(
        ["--model_name", QWEN, "--task_name", name, "--max_window_tokens", "1024"]) == 0
    assert int(capsys.readouterr().out.strip()) > 1

    # run_count_tokens.py: replays the records with the task file's prefix and description
    assert script("run_count_tokens.py").main(["--data_dir", str(out)]) == 0
    assert str(questions) in capsys.readouterr().out

    # run_draw_plots.py (--other_runs: a given context size is not one of the paper's settings)
    plots = tmp_path / "plots"
    assert script("run_draw_plots.py").main(["--data_dir", str(out), "--out_dir", str(plots), "--other_runs"]) == 0
    assert (plots / "main_results.png").is_file()
    assert str(questions) in (plots / "summary.csv").read_text()


# ----------------------------------------------------------- other data formats --
def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_jsonl_with_a_held_out_ratio(tmp_path):
    rows = [{"t": f"text {i}", "y": ["a", "b", "c"][i % 3]} for i in range(30)]
    write(tmp_path / "rows.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    task_file = write(tmp_path / "t.toml", 'prompt_template = "In: {text}"\nprediction_prefix = "Out:"\n'
                      '[data]\ntrain = "rows.jsonl"\ntest_ratio = 0.2\nsplit_seed = 3\ntext_column = "t"\n'
                      'label_column = "y"\n[labels]\nnames = ["c", "b", "a"]\n')
    task = load_task(str(task_file))
    assert (task.num_train, task.num_test) == (24, 6)
    expected = sources.split_like_paper({"t": tuple(r["t"] for r in rows), "y": tuple(r["y"] for r in rows)},
                                        test_size=0.2, seed=3)
    assert [e.text for e in task.test] == list(expected["test"]["t"])
    assert [task.answer(e) for e in task.test] == list(expected["test"]["y"])
    assert task.labels == ["c", "b", "a"]
    assert [e.text for e in load_task(str(task_file)).test] == [e.text for e in task.test]


def test_parquet_classlabel_and_a_local_dataset_folder(tmp_path):
    datasets = pytest.importorskip("datasets")
    features = datasets.Features({"text": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["neg", "pos", "other"])})
    folder = tmp_path / "ds"
    folder.mkdir()
    for split, n in (("train", 12), ("test", 6)):
        datasets.Dataset.from_dict({"text": [f"{split} {i}" for i in range(n)], "label": [i % 3 for i in range(n)]},
                                   features=features).to_parquet(str(folder / f"{split}.parquet"))
    parquet = write(tmp_path / "p.toml", 'prompt_template = "{text}"\nprediction_prefix = "Label:"\n'
                    '[data]\ntrain = "ds/train.parquet"\ntest = "ds/test.parquet"\n'
                    '[labels]\nclasslabel = true\ndrop = ["other"]\n')
    task = load_task(str(parquet))
    assert task.labels == ["neg", "pos"] and task.num_train == 8 and task.num_test == 4
    assert [e.id for e in task.test] == [0, 1, 3, 4]  # ids are positions before dropping
    hub = write(tmp_path / "h.toml", 'prompt_template = "{text}"\nprediction_prefix = "Label:"\n'
                '[data]\nhub = "ds"\ntest_split = "test"\n'
                '[labels]\nclasslabel = true\ndrop = ["other"]\n[labels.mapping]\nneg = "negative"\npos = "positive"\n')
    from_hub = load_task(str(hub))
    assert from_hub.labels == ["negative", "positive"]
    assert [(e.id, e.text, e.label) for e in from_hub.train] == [(e.id, e.text, e.label) for e in task.train]


def test_integer_labels_through_a_mapping(tmp_path):
    write(tmp_path / "d.csv", "text,label\nfine,1\nawful,0\nok,1\n")
    task_file = write(tmp_path / "t.toml", 'prompt_template = "Review: {text}"\nprediction_prefix = "Sentiment:"\n'
                      '[data]\ntrain = "d.csv"\ntest = "d.csv"\n[labels.mapping]\n0 = "negative"\n1 = "positive"\n')
    task = load_task(str(task_file))
    assert [task.answer(e) for e in task.train] == ["positive", "negative", "positive"]


# ------------------------------------------------------------------ run folders --
@pytest.mark.parametrize("name", ["../../escape.toml", "/tmp/a b/ü?*.toml_top2", "x/../../..toml", "./q.toml_unsemantic"])
def test_task_folder_is_one_safe_path_component(name):
    folder = task_folder(name)
    assert "/" not in folder and folder not in (".", "..") and not folder.startswith(".")
    assert re.fullmatch(r"[A-Za-z0-9_.-]+", folder)


def test_task_folder_tells_files_apart_and_keeps_builtin_names(tmp_path):
    assert task_folder("banking77_top10_unsemantic") == "banking77_top10_unsemantic"
    a, b = task_folder(str(tmp_path / "a" / "q.toml")), task_folder(str(tmp_path / "b" / "q.toml"))
    assert a != b and a.startswith("q-") and b.startswith("q-")
    assert task_folder(str(tmp_path / "a" / "q.toml") + "_top3").startswith(a + "_top3")


# ---------------------------------------------------------------- bad task files --
GOOD = ('prompt_template = "Q: {text}"\nprediction_prefix = "A:"\n[data]\ntrain = "d.csv"\ntest = "d.csv"\n'
        '[labels]\nnames = ["x", "y"]\n')
DATA = "text,label\none,x\ntwo,y\nthree,x\nfour,y\n"


def bad_case(tmp_path, toml: str, data: str = DATA) -> str:
    write(tmp_path / "d.csv", data)
    return str(write(tmp_path / "t.toml", toml))


CASES = {
    "missing task file": (None, None, "task file not found"),
    "not TOML": ("prompt_template = Q: {text}\n", DATA, "not a valid TOML file"),
    "missing data file": (GOOD.replace('train = "d.csv"', 'train = "nope.csv"'), DATA, "data file not found"),
    "missing column": (GOOD.replace('test = "d.csv"', 'test = "d.csv"\nlabel_column = "intent"'), DATA,
                       "no column 'intent'"),
    "empty label name": (GOOD.replace('["x", "y"]', '["x", " "]'), DATA, "empty label name"),
    "duplicate label name": (GOOD.replace('["x", "y"]', '["x", "y", "x"]'), DATA, "duplicate label name 'x'"),
    "row label not listed": (GOOD, DATA + "five,z\n", "label 'z' is not in [labels]"),
    "template without text": (GOOD.replace("{text}", "{question}"), DATA, "no {text} field"),
    "test ratio 0": (GOOD.replace('test = "d.csv"', "test_ratio = 0"), DATA, "test_ratio must be a number in (0, 1)"),
    "test ratio 1": (GOOD.replace('test = "d.csv"', "test_ratio = 1.0"), DATA, "test_ratio must be a number in (0, 1)"),
    "test ratio above 1": (GOOD.replace('test = "d.csv"', "test_ratio = 1.5"), DATA, "in (0, 1)"),
    "test ratio negative": (GOOD.replace('test = "d.csv"', "test_ratio = -0.2"), DATA, "in (0, 1)"),
    "too few rows per label": (GOOD, DATA, "label 'x' has 2 training rows, fewer than --exemplars_per_label 3"),
    "unknown key": (GOOD.replace("[labels]", "[labels]\nname = 1"), DATA, "unknown key name in [labels]"),
    "top K above the labels": (GOOD, DATA, "K=3 but"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_task_file_is_one_line_exit_2_before_any_model(case, tmp_path, monkeypatch, capsys):
    import icrl.backends

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded for a bad task file")

    monkeypatch.setattr(icrl.backends, "load_backend", no_model)
    toml, data, expected = CASES[case]
    path = str(tmp_path / "absent.toml") if toml is None else bad_case(tmp_path, toml, data)
    name = path + ("_top3" if case == "top K above the labels" else "")
    out = tmp_path / "runs"
    argv = ["--task_name", name, "--backend", "fake", "--model_name", "fake", "--icrl",
            "--context_strategy_name", "random_unbiased", "--seed", "1", "--training_seed", "1",
            "--test_seed", "1", "--train_k", "4", "--test_every", "2", "--max_context_examples", "4",
            "--exemplars_per_label", "3" if case == "too few rows per label" else "0",
            "--output_dir", str(out)]
    assert script("run_experiment.py").main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert expected in err
    assert not out.exists() or not any(out.rglob("*.json")), "a bad task file left records"


def test_a_good_file_passes_the_same_run(tmp_path, capsys):
    """The bad cases above fail for their reason: the same run on the good file succeeds."""
    path = bad_case(tmp_path, GOOD)
    argv = ["--task_name", path, "--backend", "fake", "--model_name", "fake", "--icrl",
            "--context_strategy_name", "random_unbiased", "--seed", "1", "--training_seed", "1",
            "--test_seed", "1", "--train_k", "4", "--test_every", "2", "--max_context_examples", "4",
            "--exemplars_per_label", "1", "--output_dir", str(tmp_path / "runs")]
    assert script("run_experiment.py").main(argv) == 0


def test_bad_task_file_in_the_window_search(tmp_path, capsys):
    path = bad_case(tmp_path, GOOD.replace("{text}", ""))
    assert script("find_max_examples_given_max_window.py").main(
        ["--model_name", QWEN, "--task_name", path, "--max_window_tokens", "1024"]) == 2
    assert "no {text} field" in capsys.readouterr().err


def test_parse_task_name_reads_the_file_not_the_data(tmp_path):
    path = bad_case(tmp_path, GOOD, data="text,label\none,unlisted\n")
    assert parse_task_name(path + "_unsemantic_top2") == (path, 2, True)
    with pytest.raises(UsageError, match="is not in \\[labels\\]"):
        load_task(path)
    with pytest.raises(UsageError, match="bad or repeated suffix"):
        parse_task_name(path + "_top2_top1")
