"""One run (icrl.run.experiment) end to end through run_experiment.py, tiny sizes: the plan, the
loop and the records on the fake backend and the toy task (no model, no dataset); the real
SmolLM2 and trec_coarse where their behaviour is the point (the context size that fills the
model's window, the demo's command)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import TOY_TASK
from icrl.cli.run import main
from icrl.records.plan import plan_steps
from icrl.records import find_runs, read_jsonl

REPO = Path(__file__).resolve().parents[3]
TOY_LABELS = ["billing", "refund", "delivery", "account"]


def base_args(out, **over):
    args = {"task_name": TOY_TASK, "context_strategy_name": "random_unbiased_only_positive",
            "context_p_keep": "0.5", "max_context_examples": "4", "train_k": "6", "test_every": "3",
            "test_k": "6", "temperature": "1.0", "output_dir": str(out), "no-progress": None,
            "icrl": None, "seed": "100", "training_seed": "100", "test_seed": "100"}
    if "no-icrl" in over:
        del args["icrl"]
    args.update(over)
    argv = []
    for k, v in args.items():
        if v is False:
            continue
        argv += [f"--{k}"] + ([] if v is None else [str(v)])
    return argv


def run(out, **over):
    """A run on the fake backend unless ``backend`` says otherwise."""
    code = main(base_args(out, **{"backend": "fake", **over}))
    runs = find_runs(out)
    return code, runs


def records(run_dir):
    run_dir = Path(run_dir)
    return (json.loads((run_dir / "config.json").read_text()), read_jsonl(run_dir / "train.jsonl"),
            read_jsonl(run_dir / "test.jsonl"), json.loads((run_dir / "results.json").read_text()))


def test_plan_steps_published_protocol():
    assert plan_steps("icrl", 10, 3, 4) == (10, [0, 2, 5, 8, 9])
    assert plan_steps("icrl", 9, 3, 4) == (9, [0, 2, 5, 8])
    assert plan_steps("zero_shot", 0, 3, 0) == (1, [0])
    # supervised ICL stops at the first test step at or after a full context
    assert plan_steps("icl", 100, 3, 4) == (6, [0, 2, 5])
    assert plan_steps("icl", 100, 5, 10) == (15, [0, 4, 9, 14])  # step 9 has only 9 episodes


@pytest.mark.model
def test_stochastic_icrl_records(tmp_path):
    code, runs = run(tmp_path, context_p_keep="0.1", max_context_examples="4", backend="auto")
    assert code == 0 and len(runs) == 1
    parts = runs[0].relative_to(tmp_path).parts
    assert parts[0] == "smollm2-135m" and parts[1].startswith("toy-") and parts[2:] == (
        "4", "True", "random_unbiased_only_positive", "0.1", "False", "False", "1.0", "100",
        "seed100_testseed100_testk6_every3")
    config, train, test, results = records(runs[0])
    assert [r["step"] for r in train] == list(range(6))
    assert [r["step"] for r in test] == [0, 2, 5]
    assert config["resolved"]["mode"] == "icrl" and "hf_token" not in json.dumps(config)
    assert config["dataset"]["fingerprint"] and config["environment"]["packages"]["torch"]
    assert [r["example_id"] for r in train] == config["train_example_ids"]
    for r in train:
        assert r["prediction"] in TOY_LABELS and r["answer"] in TOY_LABELS
        assert r["accuracy"] == int(r["prediction"] == r["answer"]) and r["feedback"] == r["accuracy"]
        assert r["context_size"] == len(r["context"]) <= 4
        assert all(train[i]["feedback"] == 1 and i < r["step"] for i in r["context"])  # only positive, past
    for r in test:
        answers = config["test_set"]["answers"]
        assert len(r["predictions"]) == 6 and set(r["predictions"]) <= set(TOY_LABELS)
        assert r["accuracy"] == pytest.approx(sum(p == a for p, a in zip(r["predictions"], answers)) / 6)
        assert set(r["per_class_accuracy"]) == set(answers)
    assert results["finished"] and results["regret"] == sum(1 - r["accuracy"] for r in train)
    assert results["final_test_accuracy"] == test[-1]["accuracy"]
    assert results["best_test_accuracy"] == max(r["accuracy"] for r in test)
    assert results["test_accuracy"] == {str(r["step"]): r["accuracy"] for r in test}


def test_naive_icrl_keeps_the_most_recent_episodes(tmp_path):
    code, runs = run(tmp_path, context_strategy_name="random_biased_end", context_p_keep="1.0",
                     max_context_examples="3", train_k="7")
    _, train, test, _ = records(runs[0])
    for r in train:
        assert r["context"] == list(range(max(0, r["step"] - 3), r["step"]))
    assert test[-1]["step"] == 6 and test[-1]["context"] == [3, 4, 5]


@pytest.mark.parametrize("method", ["uniform", "exact"])
def test_approximate_icrl(tmp_path, method):
    code, runs = run(tmp_path, context_strategy_name="approximate_only_positive", context_p_keep="0.5",
                     max_contexts="3", approximate_context_sampling_method=method)
    assert code == 0
    assert runs[0].parts[-7] == f"approximate_only_positive_{method}_3"
    _, train, test, _ = records(runs[0])
    for r in train + test:
        assert 0 <= r["metrics"]["context_index"] < 3 and len(r["metrics"]["context_lengths"]) == 3
        assert r["context_size"] == r["metrics"]["context_lengths"][r["metrics"]["context_index"]]
        assert all(train[i]["feedback"] == 1 for i in r["context"])
    # contexts are append-only: lengths never shrink, and each context shown extends the one
    # shown earlier at the same index
    lengths = [r["metrics"]["context_lengths"] for r in train]
    assert all(a <= b for before, after in zip(lengths, lengths[1:]) for a, b in zip(before, after))
    shown: dict = {}
    for r in train:
        k, context = r["metrics"]["context_index"], r["context"]
        assert context[:len(shown.get(k, []))] == shown.get(k, [])
        shown[k] = context


def test_supervised_icl_makes_no_training_calls_and_stops_when_full(tmp_path):
    code, runs = run(tmp_path, context_strategy_name="random_unbiased", context_p_keep="1.0", **{"no-icrl": None},
                     max_context_examples="4", train_k="50", debug_k="100")
    config, train, test, results = records(runs[0])
    assert runs[0].parts[-8] == "False"
    assert len(train) == 6 and [r["step"] for r in test] == [0, 2, 5]
    assert all(r["prediction"] is None and r["feedback"] is None and r["accuracy"] is None for r in train)
    assert test[-1]["context_size"] == 4 and results["regret"] is None and results["finished"]
    log = (runs[0] / "log.txt").read_text()
    assert log.count("model call") == 3  # one per test step, none for training
    assert "is the correct answer" not in log and "Intent: " + train[0]["answer"] in log


def test_zero_shot_is_one_test_at_step_zero(tmp_path):
    code, runs = run(tmp_path, max_context_examples="0", context_strategy_name=False)  # none needed
    assert code == 0 and runs[0].relative_to(tmp_path).parts[4] == "none"
    config, train, test, results = records(runs[0])
    assert train == [] and len(test) == 1 and test[0]["step"] == 0 and test[0]["context_size"] == 0
    assert config["resolved"]["mode"] == "zero_shot" and results["finished"]
    assert (results["steps_completed"], results["total_steps"]) == (1, 1)


def test_exemplars_come_first_and_leave_the_training_pool(tmp_path):
    code, runs = run(tmp_path, exemplars_per_label="1", debug_k="1", max_context_examples="10")
    assert runs[0].parts[-7] == "random_unbiased_only_positive_exemplars1"
    config, train, _, _ = records(runs[0])
    # As published, the 4 exemplars (one per label) are subtracted from --max_context_examples 10: 6 episodes.
    assert config["resolved"]["max_context_examples"] == 6
    exemplars = config["exemplars"]
    assert sorted(e["answer"] for e in exemplars) == sorted(TOY_LABELS)
    assert not {e["id"] for e in exemplars} & {r["example_id"] for r in train}
    log = (runs[0] / "log.txt").read_text()
    first = log.index(exemplars[0]["prompt"])
    assert first < log.index(train[0]["prompt"])
    assert f"Intent: {exemplars[0]['answer']}" in log and "is the correct answer! Good job!" in log


def test_exemplars_are_subtracted_from_an_explicit_size_and_icl_stops_early(tmp_path):
    """The toy task (4 labels), --max_context_examples 8 --exemplars_per_label 1: 4 exemplars + at
    most 4 episodes; supervised ICL stops at the first test step with a full context (step 4 of
    test_every 5: 5 steps, not 30)."""
    code, runs = run(tmp_path, context_strategy_name="random_unbiased", context_p_keep="1.0", **{"no-icrl": None},
                     max_context_examples="8", exemplars_per_label="1", train_k="30", test_every="5", test_k="2")
    assert code == 0
    config, train, test, results = records(runs[0])
    assert config["resolved"]["max_context_examples"] == 4 and config["resolved"]["num_exemplars"] == 4
    assert len(train) == 5 and [r["step"] for r in test] == [0, 4] and results["finished"]
    assert max(r["context_size"] for r in train) == 4


def test_exemplars_filling_the_context_are_refused(tmp_path, capsys):
    assert main(base_args(tmp_path, exemplars_per_label="1", max_context_examples="4")) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no room for context episodes") and "\n" not in err


def test_omitted_feedback_is_not_shown(tmp_path):
    code, runs = run(tmp_path, context_strategy_name="random_biased_end", context_p_keep="1.0",
                     icrl_omit_feedback=None, debug_k="100")
    _, train, _, _ = records(runs[0])
    log = (runs[0] / "log.txt").read_text()
    assert train[-1]["context_size"] == 4 and "Intent: " + train[0]["prediction"] in log
    assert "is the correct answer" not in log and "You can do better" not in log


def test_flipped_feedback_changes_what_is_shown_not_accuracy(tmp_path):
    code, runs = run(tmp_path, icrl_flip_feedback=None, icrl_flip_feedback_prob="1.0")
    assert runs[0].parts[-4] == "True_1.0"
    _, train, _, results = records(runs[0])
    assert all(r["feedback"] == 1 - r["accuracy"] for r in train)
    assert results["regret"] == sum(1 - r["accuracy"] for r in train)


@pytest.mark.parametrize("over, needle", [
    ({"context_strategy_name": "approximate"}, "--max_contexts"),
    ({"context_strategy_name": "approximate", "max_contexts": "4"}, "sampling_method"),
    ({"icrl_flip_feedback": None}, "--icrl_flip_feedback_prob"),
    ({"icrl_flip_feedback": None, "icrl_flip_feedback_prob": "1.5"}, "[0, 1]"),
    ({"context_p_keep": "0"}, "(0, 1]"),
    ({"test_every": "0"}, "--test_every"),
    ({"context_strategy_name": "nope"}, "random_unbiased_only_positive"),
    ({"task_name": "banking99"}, "banking77"),
    ({"model_name": "no-such-model"}, "smollm2-135m"),
    ({"backend": "nope"}, "invalid choice"),
    ({"device": "cuda:99"}, "GPU"),
    ({"max_model_len": "-5"}, "--max_model_len"),
    ({"temperature": "inf"}, "--temperature"),
    # Omitted where the published script would silently run supervised ICL or unseeded.
    ({"icrl": False}, "pass --icrl (in-context RL) or --no-icrl"),
    ({"seed": False}, "pass --seed (the paper uses 100"),
    ({"training_seed": False, "test_seed": False}, "pass --training_seed, --test_seed"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys, over, needle):
    out = tmp_path / "out"
    assert main(base_args(out, **over)) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and needle in err and "\n" not in err
    assert not out.exists() or not any(out.rglob("*"))


def test_rerun_finished_and_mismatched_arguments(tmp_path, capsys):
    assert main(base_args(tmp_path, backend="fake")) == 0
    before = records(find_runs(tmp_path)[0])
    assert main(base_args(tmp_path, backend="fake")) == 0
    assert "already finished" in capsys.readouterr().out
    assert records(find_runs(tmp_path)[0]) == before
    # a setting the run does not read (max_contexts outside the approximate strategies): said, and the same run
    assert main(base_args(tmp_path, backend="fake", max_contexts="3")) == 0
    captured = capsys.readouterr()
    assert "already finished" in captured.out and "warning: --max_contexts 3 does nothing" in captured.err
    assert records(find_runs(tmp_path)[0]) == before
    assert main(base_args(tmp_path, backend="fake", max_contexts="3", overwrite=None)) == 0
    assert records(find_runs(tmp_path)[0])[0]["args"]["max_contexts"] == 3


def _strip_times(rows):
    return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]


def _summary(results):
    return {k: v for k, v in results.items() if "time" not in k}


def test_sigkill_mid_run_then_resume_equals_uninterrupted(tmp_path):
    argv = base_args(tmp_path / "killed", train_k="14", test_every="4", max_context_examples="6",
                     context_p_keep="0.5", backend="fake")
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "ICRL_FAKE_DELAY_S": "0.1"}  # slow enough to kill mid-run
    proc = subprocess.Popen([sys.executable, str(REPO / "run_experiment.py"), *argv], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    train_file = None
    while time.time() < deadline and proc.poll() is None:
        found = find_runs(tmp_path / "killed")
        if found and len(read_jsonl(found[0] / "train.jsonl")) >= 5:
            train_file = found[0] / "train.jsonl"
            break
        time.sleep(0.05)
    assert train_file is not None and proc.poll() is None, "the run ended before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(read_jsonl(train_file))
    assert 5 <= done < 14
    with open(train_file, "a") as f:  # a write cut short by the kill
        f.write('{"step": 99, "trunc')
    assert main(argv) == 0
    killed = records(find_runs(tmp_path / "killed")[0])
    assert main(base_args(tmp_path / "clean", train_k="14", test_every="4", max_context_examples="6",
                          context_p_keep="0.5", backend="fake")) == 0
    clean = records(find_runs(tmp_path / "clean")[0])
    assert _strip_times(killed[1]) == _strip_times(clean[1])
    assert _strip_times(killed[2]) == _strip_times(clean[2])
    assert _summary(killed[3]) == _summary(clean[3]) and killed[3]["finished"]
    assert "resuming" in (find_runs(tmp_path / "killed")[0] / "log.txt").read_text()


@pytest.mark.model
def test_default_context_size_fills_the_window_and_is_cached(tmp_path, capsys, data_dir):
    from icrl.backends.chat import load_chat_tokenizer
    from icrl.run.window import find_max_examples
    from icrl.tasks import load_task

    argv = [a for a in base_args(tmp_path, task_name="trec_coarse", train_k="3", test_every="5", test_k="2")]
    i = argv.index("--max_context_examples")
    del argv[i:i + 2]
    assert main(argv) == 0
    run_dir = find_runs(tmp_path)[0]
    assert run_dir.relative_to(tmp_path).parts[2] == "auto"
    config, _, _, _ = records(run_dir)
    expected = find_max_examples(load_chat_tokenizer("smollm2-135m"), load_task("trec_coarse"))
    assert config["resolved"]["max_context_examples"] == expected > 16
    cached = json.loads((tmp_path / "smollm2-135m" / "trec_coarse" / "maximum_context_length.json").read_text())
    assert cached == {"sizes": {"icrl@8192": expected}}
    # An unfinished run continues only with the plan it started with.
    lines = (run_dir / "train.jsonl").read_text().splitlines(keepends=True)
    (run_dir / "train.jsonl").write_text("".join(lines[:-1]))  # the last step was not completed
    cache = tmp_path / "smollm2-135m" / "trec_coarse" / "maximum_context_length.json"
    cache.write_text(json.dumps({"sizes": {"icrl@8192": 7}}))
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "another plan" in err and f"max_context_examples: {expected} there, 7 now" in err


def test_automatic_size_is_the_published_left_plus_one_keyed_by_mode_and_window(tmp_path, monkeypatch):
    """The published runner's size (left + 1), searched under the system prompt of the run's mode,
    cached per model and task under <mode>@<window>; an old-format cache is replaced, not reused.
    The fake backend's tokenizer and chat template stand in for a model's (the search on real
    tokenizers: tests/integration/run/test_window.py)."""
    from icrl.backends.fake import FakeChat
    from icrl.run.window import search_max_examples
    from icrl.run.data import load_data
    from icrl.run.size import resolve_max_examples
    from icrl.cli import parse_args
    import icrl.run.window as maxlen

    chat = FakeChat(1024)
    calls = []
    real = maxlen.find_max_examples

    def spy(chat_, task, window, *, icrl=True):
        calls.append((task.name, window, icrl))
        return real(chat_, task, window, icrl=icrl)

    monkeypatch.setattr(maxlen, "find_max_examples", spy)
    from icrl.records import max_context_path

    cache = max_context_path(tmp_path, "smollm2-135m", TOY_TASK)
    cache.parent.mkdir(parents=True)
    cache.write_text(json.dumps({"max_context_examples": 3, "max_window_tokens": 1024}))  # the old format

    def resolve(*extra):
        argv = base_args(tmp_path, *(), **{"max_context_examples": False, **dict(extra)})
        config = parse_args(argv)
        backend = type("B", (), {"max_model_len": 1024, "chat": chat})()
        return resolve_max_examples(config, load_data(config), backend)

    from icrl.tasks import load_task

    task = load_task(TOY_TASK)
    icrl_size = resolve()
    assert icrl_size == search_max_examples(chat, task, 1024).max_examples + 1
    icl_size = resolve(("no-icrl", None), ("context_strategy_name", "random_unbiased"))
    assert icl_size == search_max_examples(chat, task, 1024, icrl=False).max_examples + 1
    assert json.loads(cache.read_text()) == {"sizes": {"icl@1024": icl_size, "icrl@1024": icrl_size}}
    assert resolve() == icrl_size and len(calls) == 2 and [c[2] for c in calls] == [True, False]


def test_omitted_train_k_and_test_k_mean_the_whole_splits(tmp_path, data_dir):
    """As published: CLINC150 without --test_k tests on all 4,500 test prompts (500 before)."""
    from icrl.cli import parse_args
    from icrl.run.data import load_data

    argv = base_args(tmp_path, task_name="clinic150", train_k=False, test_k=False)
    args = parse_args(argv)
    assert args.spec.train_k == -1 and args.spec.test_k == -1
    data = load_data(args)
    assert len(data.test) == data.task.num_test == 4500
    assert len(data.train) == data.task.num_train


def test_no_arguments_is_still_the_seeded_icrl_demo():
    from icrl.cli import parse_args

    args = parse_args([])
    assert args.demo and args.spec.icrl is True and (args.spec.seed, args.spec.training_seed, args.spec.test_seed) == (100, 100, 100)


def test_make_demo_has_its_own_folders_and_a_comparable_zero_shot_run():
    """make demo writes to data/demo and plots/demo, draws only those runs, and its explorative
    run and zero-shot reference are tested on the demo's test set at the demo's temperature and
    seeds; the explorative run shows as many episodes for as many steps as the demo's."""
    import re

    from icrl.cli import parse_args

    makefile = (REPO / "Makefile").read_text().replace("\\\n", " ")
    variables = dict(re.findall(r"^(DEMO_\w+)\s*:=\s*(.+)$", makefile, re.M))

    def resolve(text: str) -> str:
        while "$(DEMO_" in text:
            text = re.sub(r"\$\((DEMO_\w+)\)", lambda m: variables[m.group(1)], text)
        return text

    recipe = resolve(makefile.split("\ndemo:")[1].split("\n\n")[0])
    assert "--data_dir data/demo --out_dir plots/demo" in recipe and "--data_dir data " not in recipe
    demo = parse_args([])
    zero = parse_args(resolve(variables["DEMO_ZERO_SHOT"]).split())
    explorative = parse_args(resolve(variables["DEMO_EXPLORATIVE"]).split())
    assert zero.spec.max_context_examples == 0 and "run_experiment.py " + resolve(variables["DEMO_ZERO_SHOT"]) in recipe
    assert "run_experiment.py " + resolve(variables["DEMO_EXPLORATIVE"]) in recipe
    for name in ("model_name", "task_name", "test_k", "test_seed", "temperature", "output_dir", "seed",
                 "training_seed"):
        assert zero.values()[name] == demo.values()[name] == explorative.values()[name], name
    for name in ("max_context_examples", "train_k", "test_every"):
        assert explorative.values()[name] == demo.values()[name], name
    assert (explorative.spec.context_strategy_name, explorative.spec.context_p_keep) == \
        ("random_unbiased_only_positive", 0.1)  # the paper's explorative ICRL
    assert demo.options.output_dir == "data/demo"


def test_runs_differing_in_a_seed_sit_side_by_side_and_a_larger_train_k_extends(tmp_path, capsys):
    small = dict(train_k="4", test_k="3", max_context_examples="3", backend="fake")
    assert main(base_args(tmp_path / "a", **small)) == 0
    first = find_runs(tmp_path / "a")[0]
    config4, train4, test4, _ = records(first)
    assert main(base_args(tmp_path / "a", **dict(small, seed="101"))) == 0  # refused before: "other arguments"
    assert len(find_runs(tmp_path / "a")) == 2 and records(first)[1] == train4
    capsys.readouterr()

    assert main(base_args(tmp_path / "a", **dict(small, train_k="6"))) == 0
    assert "extending" in capsys.readouterr().err
    config, train, test, results = records(first)
    assert train[:4] == train4 and test[:3] == test4  # the records continue
    assert [r["step"] for r in test] == [0, 2, 3, 5]  # step 3, the shorter run's last test, stays
    assert config["extended"][0]["from"] == 4 and config["extended"][0]["to"] == 6
    assert config["resolved"]["steps"] == 6 and config["args"]["train_k"] == 6 and results["finished"]
    # the same stream as a run of 6 steps from the start
    assert main(base_args(tmp_path / "b", **dict(small, train_k="6"))) == 0
    direct = records(find_runs(tmp_path / "b")[0])[1]
    assert _strip_times(train) == _strip_times(direct)

    capsys.readouterr()
    assert main(base_args(tmp_path / "a", **dict(small, train_k="6"))) == 0
    assert "already finished" in capsys.readouterr().out
    assert main(base_args(tmp_path / "a", **small)) == 2
    err = capsys.readouterr().err.strip()
    assert "holds a run of 6 steps" in err and "\n" not in err
