"""The on-disk records: layout, crash-tolerant reading, and what a resume keeps."""

import json

import pytest

from helpers import TOY_TASK
from icrl.records import RunRecords, experiment_dir, find_runs, read_jsonl, write_json_atomic
from icrl.records.schema import TestLine, TrainLine

ARGS = {"model_name": "meta-llama/Meta-Llama-3.1-8B-Instruct", "task_name": "banking77",
        "max_context_examples": None, "icrl": True, "context_strategy_name": "approximate_only_positive",
        "approximate_context_sampling_method": "uniform", "max_contexts": 8, "exemplars_per_label": 0,
        "context_p_keep": 0.1, "icrl_omit_feedback": False, "icrl_flip_feedback": False,
        "icrl_flip_feedback_prob": None, "temperature": 1.0, "training_seed": 100,
        "seed": 100, "test_seed": 100, "test_k": -1, "test_every": 500}


def test_published_layout(tmp_path):
    path = experiment_dir(tmp_path, ARGS)
    assert path.relative_to(tmp_path).parts == (
        "meta-llama", "Meta-Llama-3.1-8B-Instruct", "banking77", "auto", "True",
        "approximate_only_positive_uniform_8", "0.1", "False", "False", "1.0", "100",
        "seed100_testseed100_testkall_every500")
    other = dict(ARGS, context_strategy_name="random_unbiased", exemplars_per_label=2,
                 icrl_flip_feedback=True, icrl_flip_feedback_prob=0.1, max_context_examples=16)
    assert experiment_dir(tmp_path, other).relative_to(tmp_path).parts[3:9] == (
        "16", "True", "random_unbiased_exemplars2", "0.1", "False", "True_0.1")


def test_every_argument_that_changes_results_gets_its_own_directory(tmp_path):
    """Runs differing in any identity argument but --train_k (which extends a run) must not share
    a directory: a shared one refuses the second run or, with --overwrite, destroys the first."""
    from icrl.cli import parse_args

    base = ["--task_name", "trec_coarse", "--context_strategy_name", "random_unbiased", "--icrl",
            "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--max_context_examples", "8"]
    other_model = tmp_path / "models" / "other"  # a local model folder: no Hub lookup offline
    other_model.mkdir(parents=True)
    (other_model / "config.json").write_text('{"model_type": "llama"}')
    for file in ("tokenizer.json", "model.safetensors"):  # a model folder holds a tokenizer and weights
        (other_model / file).write_text("{}")
    changes = {"model_name": ["--model_name", str(other_model)], "task_name": ["--task_name", "trec_fine"],
               "context_strategy_name": ["--context_strategy_name", "random_biased_end"],
               "temperature": ["--temperature", "0.5"], "context_p_keep": ["--context_p_keep", "0.5"],
               "max_context_examples": ["--max_context_examples", "9"], "icrl": ["--no-icrl"],
               "icrl_omit_feedback": ["--icrl_omit_feedback"],
               "icrl_flip_feedback": ["--icrl_flip_feedback", "--icrl_flip_feedback_prob", "0.1"],
               "exemplars_per_label": ["--exemplars_per_label", "1"],
               "seed": ["--seed", "2"], "training_seed": ["--training_seed", "2"], "test_seed": ["--test_seed", "2"],
               "test_k": ["--test_k", "50"], "test_every": ["--test_every", "10"],
               "max_model_len": ["--max_model_len", "4096"], "backend": ["--backend", "transformers"],
               "device": ["--device", "cpu"], "dtype": ["--dtype", "bfloat16"], "eot_token": ["--eot_token", "<|im_end|>"],
               "rope_scaling": ["--rope_scaling", "none"], "published_tokenization": ["--published_tokenization"]}
    api = base + ["--backend", "openai"]  # the API's own arguments: refused by a backend that does not read them
    changes_api = {"api_model": ["--api_model", "m"], "api_mode": ["--api_mode", "completions"]}
    # the approximate strategy's own arguments change its folder name
    approx = base[:3] + ["approximate_only_positive", "--max_contexts", "2",
                         "--approximate_context_sampling_method", "uniform"] + base[4:]
    changes_approx = {"max_contexts": ["--max_contexts", "3"],
                      "approximate_context_sampling_method": ["--approximate_context_sampling_method", "exact"]}
    seen = {}
    for argv, variants in ((base, changes), (approx, changes_approx), (api, changes_api)):
        args = parse_args(argv)
        seen.setdefault(experiment_dir(tmp_path, args.spec.as_record()), "base")
        for name, extra in variants.items():
            changed = parse_args(argv + extra)
            assert changed.spec.as_record()[name] != args.spec.as_record()[name], name
            path = experiment_dir(tmp_path, changed.spec.as_record())
            assert path not in seen, f"--{name} shares {path} with {seen.get(path)}"
            seen[path] = name
    covered = set(changes) | set(changes_approx) | set(changes_api) | {"icrl_flip_feedback_prob", "train_k"}
    assert set(parse_args(base).spec.as_record()) <= covered, set(parse_args(base).spec.as_record()) - covered
    # train_k: the same directory (a larger one extends the run)
    assert experiment_dir(tmp_path, parse_args(base + ["--train_k", "9"]).spec.as_record()) == \
        experiment_dir(tmp_path, parse_args(base).spec.as_record())


def test_zero_shot_needs_no_strategy_and_automatic_size_is_not_none(tmp_path):
    from icrl.cli import parse_args

    common = ["--task_name", "trec_coarse", "--icrl", "--seed", "1", "--training_seed", "1", "--test_seed", "1"]
    zero = parse_args(common + ["--max_context_examples", "0"])
    parts = experiment_dir(tmp_path, zero.spec.as_record()).relative_to(tmp_path).parts
    assert parts[2] == "0" and parts[4] == "none"
    given = parse_args(common + ["--max_context_examples", "0", "--context_strategy_name", "random_unbiased"])
    assert experiment_dir(tmp_path, given.spec.as_record()) == experiment_dir(tmp_path, zero.spec.as_record())  # the same run
    auto = parse_args(common + ["--context_strategy_name", "random_unbiased"])
    assert experiment_dir(tmp_path, auto.spec.as_record()).relative_to(tmp_path).parts[2] == "auto"


def _write(path, lines, tail=""):
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + tail)


def test_truncated_last_line_is_dropped_and_repaired(tmp_path):
    path = tmp_path / "train.jsonl"
    _write(path, [{"step": 0}, {"step": 1}], tail='{"step": 2, "pred')
    assert read_jsonl(path) == [{"step": 0}, {"step": 1}]
    assert path.read_text().endswith('"pred')  # reading alone changes nothing
    assert read_jsonl(path, repair=True) == [{"step": 0}, {"step": 1}]
    assert path.read_text() == '{"step": 0}\n{"step": 1}\n'
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def _config(steps=4, test_steps=(0, 2, 3), mode="icrl", num_test=2):
    return {"args": {}, "resolved": {"mode": mode, "steps": steps, "test_steps": list(test_steps)},
            "train_example_ids": [10 + i for i in range(steps)] if mode != "zero_shot" else [],
            "test_set": {"ids": list(range(num_test))}}


def _train(step):
    return TrainLine(step, 10 + step, "Q", "a", 1, "a", 1, 0, [], {})


def _test(step, n=2):
    return TestLine(step, 0.5, {"a": 0.5}, ["a"] * n, 0, [])


def test_create_replaces_old_records_and_finished_checks_the_records(tmp_path):
    from helpers import run_config
    from icrl.records import read_log

    records = RunRecords(tmp_path / "run")
    records.create({**run_config(1, labels=["a"], test_answers=["a", "a"]), "train_example_ids": [10]})
    records.append_test(_test(0))
    records.append_train(_train(0))
    assert records.exists and read_log(records.directory).finished
    records.create({"args": {"a": 2}})
    assert json.loads((records.directory / "config.json").read_text()) == {"args": {"a": 2}}
    assert not read_log(records.directory).finished
    assert read_jsonl(records.directory / "train.jsonl") == []
    assert find_runs(tmp_path) == [records.directory]


def test_atomic_json_leaves_no_temporary_files(tmp_path):
    write_json_atomic(tmp_path / "x" / "results.json", {"b": [1, 2]})
    write_json_atomic(tmp_path / "x" / "results.json", {"b": [3]})
    assert json.loads((tmp_path / "x" / "results.json").read_text()) == {"b": [3]}
    assert [p.name for p in (tmp_path / "x").iterdir()] == ["results.json"]


def test_schema_names_every_field_of_a_real_run(tmp_path):
    """The schema of icrl/records/schema.py against the records of a real (fake-backend) run:
    every required field present, no field it does not name; the lines read back as the types
    that wrote them."""
    import dataclasses
    import json

    from icrl.cli.run import main
    from icrl.config import RunSpec
    from icrl.records import schema

    argv = ["--backend", "fake", "--task_name", TOY_TASK, "--context_strategy_name", "random_biased_end",
            "--icrl", "--max_context_examples", "2", "--train_k", "3", "--test_every", "2", "--test_k", "2",
            "--seed", "1", "--training_seed", "1", "--test_seed", "1", "--no-progress", "--output_dir", str(tmp_path)]
    assert main(argv) == 0
    assert main(argv[:argv.index("--train_k") + 1] + ["4"] + argv[argv.index("--train_k") + 2:]) == 0  # extended
    run_dir = find_runs(tmp_path)[0]

    def check(record, typed, where):
        keys = set(record)
        if dataclasses.is_dataclass(typed):  # the lines: written from these types
            assert typed.from_json(record).as_json() == record, where
            return
        assert typed.__required_keys__ <= keys, (where, typed.__required_keys__ - keys)
        assert keys <= typed.__required_keys__ | typed.__optional_keys__, (where, keys - typed.__annotations__.keys())

    from icrl.records.configfile import ConfigFile, runtime_types
    from icrl.records.typed import as_json

    config = json.loads((run_dir / "config.json").read_text())
    typed_config = ConfigFile.parse(config, "config.json")  # every section of its type, none unknown
    assert as_json(typed_config.resolved) == config["resolved"] and typed_config.extended[0].start == 3
    assert set(config["args"]) <= {f.name for f in dataclasses.fields(RunSpec)}, "args: the settings of RunSpec"
    assert set(config["runtime_args"]) <= set(runtime_types()), "runtime_args: the options of RunOptions"
    for section in ("environment", "dataset", "test_set"):
        assert as_json(getattr(typed_config, section)) == config[section], section
    for line in read_jsonl(run_dir / "train.jsonl"):
        check(line, schema.TrainLine, "train.jsonl")
    for line in read_jsonl(run_dir / "test.jsonl"):
        check(line, schema.TestLine, "test.jsonl")
    check(json.loads((run_dir / "results.json").read_text()), schema.ResultsFile, "results.json")


def test_one_atomic_writer(tmp_path):
    """JSON, JSON lines and CSV all go through write_atomic: no temporary file stays behind, and
    a write that fails leaves the old file whole."""
    import csv

    from icrl.records import write_atomic, write_csv_atomic, write_jsonl_atomic

    write_csv_atomic(tmp_path / "t.csv", ["a", "b"], [{"a": 1, "b": "x,y"}])
    assert list(csv.DictReader((tmp_path / "t.csv").open(newline=""))) == [{"a": "1", "b": "x,y"}]
    write_jsonl_atomic(tmp_path / "r.jsonl", [{"step": 0}, {"step": 1}])
    assert read_jsonl(tmp_path / "r.jsonl") == [{"step": 0}, {"step": 1}]

    def fail(f):
        f.write("half")
        raise RuntimeError("cut short")

    with pytest.raises(RuntimeError):
        write_atomic(tmp_path / "r.jsonl", fail)
    assert read_jsonl(tmp_path / "r.jsonl") == [{"step": 0}, {"step": 1}]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "t.csv"]
