"""A run's records checked against what the run rebuilds (icrl.run.rebuild), as a user meets it:
rerunning the same command on real files. Every damage to a line or to config.json is repaired
to exactly the records of the uninterrupted run, or refused in one line that names the file
and line (or field) and says what to do, before the model loads, writing nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from helpers import TOY_TASK, untimed
from icrl.cli.run import main
from icrl.records import find_runs

TOY = ["--task_name", TOY_TASK, "--backend", "fake", "--model_name", "fake", "--train_k", "10", "--test_every", "4",
       "--test_k", "5", "--seed", "3", "--training_seed", "3", "--test_seed", "3", "--no-progress"]
LEARNER = [w for i, w in enumerate(TOY) if w not in ("--backend", "--model_name", "fake")]
KNN = ["--icrl", "--context_strategy_name", "knn_lexical_only_positive", "--max_context_examples", "4"]
METHODS = {
    "naive": TOY + ["--icrl", "--context_strategy_name", "random_biased_end", "--max_context_examples", "4"],
    "explorative": TOY + ["--icrl", "--context_strategy_name", "random_unbiased", "--context_p_keep", "0.5",
                          "--max_context_examples", "4"],
    "only_positive_flip": TOY + ["--icrl", "--context_strategy_name", "random_unbiased_only_positive",
                                 "--max_context_examples", "4", "--icrl_flip_feedback", "--icrl_flip_feedback_prob",
                                 "0.4"],
    "omit_feedback": TOY + ["--icrl", "--context_strategy_name", "random_biased_end", "--max_context_examples", "3",
                            "--icrl_omit_feedback"],
    "approximate_graded": TOY + ["--icrl", "--context_strategy_name", "approximate", "--max_contexts", "3",
                                 "--approximate_context_sampling_method", "exact", "--context_p_keep", "0.5",
                                 "--max_context_examples", "4", "--reward", "coarse_credit"],
    "ucb_reset_explore": TOY + ["--icrl", "--context_strategy_name", "approximate_only_positive", "--max_contexts",
                                "2", "--approximate_context_sampling_method", "uniform", "--max_context_examples", "4",
                                "--ucb_alpha", "0.5", "--prob_reset", "0.2", "--p_exploration", "0.3"],
    "published_quirks": TOY + ["--icrl", "--context_strategy_name", "approximate_only_positive", "--max_contexts",
                               "2", "--approximate_context_sampling_method", "uniform", "--max_context_examples", "4",
                               "--published_quirks"],
    "icl_exemplars": TOY + ["--no-icrl", "--context_strategy_name", "random_unbiased", "--exemplars_per_label", "1",
                            "--max_context_examples", "8"],
    "zero_shot": TOY + ["--icrl", "--max_context_examples", "0"],
    "automatic_size": TOY + ["--icrl", "--context_strategy_name", "random_unbiased", "--max_model_len", "800"],
    "knn": TOY + KNN,
    "knn_explore_reset": TOY + KNN + ["--p_exploration", "0.2", "--prob_reset", "0.2"],
    "reasoning_judged": TOY + ["--icrl", "--context_strategy_name", "random_unbiased", "--max_context_examples", "3",
                               "--reasoning", "6", "--reward", "judge", "--p_exploration", "0.2"],
    "judged_only_positive": TOY + ["--icrl", "--context_strategy_name", "random_unbiased_only_positive",
                                   "--max_context_examples", "3", "--reward", "judge"],
    "summary_knn": TOY + ["--icrl", "--context_strategy_name", "summary_knn", "--summary_episodes", "2",
                          "--prob_reset", "0.2"],
    "reflection": TOY + ["--icrl", "--context_strategy_name", "reflection", "--reflect_every", "3",
                         "--max_context_examples", "3"],
    "curated": TOY + ["--icrl", "--context_strategy_name", "knn_lexical_curated", "--curate_min_uses", "1",
                      "--max_context_examples", "3"],
    "linucb_judged": LEARNER + ["--agent", "linucb", "--reward", "judge", "--backend", "fake", "--judge_model", "fake"],
    "linucb": LEARNER + ["--agent", "linucb"],
    "epsilon_greedy": LEARNER + ["--agent", "epsilon_greedy", "--bandit_epsilon", "0.3"],
    "supervised": LEARNER + ["--agent", "supervised"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Each method's finished run, made once: name -> its output folder."""
    root = tmp_path_factory.mktemp("rebuild")
    for name, argv in METHODS.items():
        assert main(argv + ["--output_dir", str(root / name)]) == 0, name
    return root


def copy_of(runs, name, tmp_path) -> tuple[list, Path, dict]:
    """(the command, its run folder, its records less timings) of a fresh copy of a method's run."""
    out = tmp_path / name
    shutil.copytree(runs / name, out)
    run_dir = find_runs(out)[0]
    return METHODS[name] + ["--output_dir", str(out)], run_dir, records(run_dir)


def records(run_dir: Path) -> dict:
    return {n: untimed([json.loads(x) for x in (run_dir / n).read_text().splitlines()])
            for n in ("train.jsonl", "test.jsonl") if (run_dir / n).exists()}


def files(run_dir: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(run_dir.iterdir()) if p.is_file()}


@pytest.mark.parametrize("name", list(METHODS))
def test_a_finished_run_checks_out_as_it_is(runs, tmp_path, capsys, name):
    argv, run_dir, _ = copy_of(runs, name, tmp_path)
    before = files(run_dir)
    capsys.readouterr()
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "already finished" in captured.out and "repair" not in captured.err, captured.err
    assert files(run_dir) == before


@pytest.mark.parametrize("name", list(METHODS))
def test_a_run_resumed_from_any_step_equals_the_uninterrupted_one(runs, tmp_path, name):
    argv, run_dir, whole = copy_of(runs, name, tmp_path)
    if name == "zero_shot":  # its one step is its test
        (run_dir / "test.jsonl").write_text("")
        assert main(argv) == 0 and records(run_dir) == whole
        return
    train = (run_dir / "train.jsonl").read_text().splitlines(keepends=True)
    for keep in (1, len(train) // 2, len(train) - 1):
        (run_dir / "train.jsonl").write_text("".join(train[:keep]))
        assert main(argv) == 0, keep
        assert records(run_dir) == whole, keep


# -- damage ------------------------------------------------------------------------------------
def lines(run_dir, name):
    return [json.loads(x) for x in (run_dir / name).read_text().splitlines()]


def write(run_dir, name, rows):
    (run_dir / name).write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))


def train_edit(change):
    def apply(run_dir):
        rows = lines(run_dir, "train.jsonl")
        change(rows)
        write(run_dir, "train.jsonl", rows)
    return apply


def edit_test_lines(change):
    def apply(run_dir):
        rows = lines(run_dir, "test.jsonl")
        change(rows)
        write(run_dir, "test.jsonl", rows)
    return apply


def config_edit(change):
    def apply(run_dir):
        config = json.loads((run_dir / "config.json").read_text())
        change(config)
        (run_dir / "config.json").write_text(json.dumps(config))
    return apply


def other_label(label):
    return "refund" if label != "refund" else "billing"


def _set(i, key, value):
    return lambda rows: rows[i].__setitem__(key, value(rows[i]) if callable(value) else value)


def _flip_correctness(i):
    def change(rows):
        wrong = rows[i]["prediction"] != rows[i]["answer"]
        rows[i]["prediction"] = rows[i]["answer"] if wrong else other_label(rows[i]["answer"])
    return change


def _missing_test_and_bad_context(rows_dir):
    train_edit(_set(4, "context", [99]))(rows_dir)  # a step that does not exist
    edit_test_lines(lambda rows: rows.pop(1))(rows_dir)     # test step 3 lost: recomputed from step 3's context


def _test_prediction_flipped(run_dir):
    """A test prediction made right where it was wrong (or wrong where right): its accuracies
    contradict it, so the step is recomputed."""
    answer = json.loads((run_dir / "config.json").read_text())["test_set"]["answers"][0]
    rows = lines(run_dir, "test.jsonl")
    rows[1]["predictions"][0] = answer if rows[1]["predictions"][0] != answer else other_label(answer)
    write(run_dir, "test.jsonl", rows)


# name: (edit, "repaired" | (refused: what the line names))
DAMAGE = {
    "prompt": (train_edit(_set(3, "prompt", lambda r: r["prompt"] + " (edited)")), "repaired"),
    "feedback": (train_edit(_set(3, "feedback", lambda r: 1 - r["feedback"])), "repaired"),
    "accuracy": (train_edit(_set(3, "accuracy", lambda r: 1 - r["accuracy"])), "repaired"),
    "answer": (train_edit(_set(3, "answer", lambda r: other_label(r["answer"]))), "repaired"),
    "context": (train_edit(_set(6, "context", [0, 1])), "train.jsonl line 7"),
    "context_of_no_step_and_a_missing_test": (_missing_test_and_bad_context, "train.jsonl line 5"),
    "context_size": (train_edit(_set(6, "context_size", 9)), "repaired"),
    "metrics": (train_edit(_set(6, "metrics", {"context_index": 7})), "train.jsonl line 7"),
    "last_context": (train_edit(_set(9, "context", [0])), "repaired"),
    "a_field_removed": (train_edit(lambda rows: rows[3].pop("feedback")), "repaired"),
    "a_field_added": (train_edit(_set(3, "note", "mine")), "repaired"),
    "fields_reordered": (train_edit(lambda rows: rows.__setitem__(3, dict(reversed(rows[3].items())))), "repaired"),
    "a_line_repeated": (train_edit(lambda rows: rows.insert(4, dict(rows[3]))), "repaired"),
    "lines_swapped": (train_edit(lambda rows: rows.__setitem__(slice(3, 5), rows[4:2:-1])), "repaired"),
    "junk_appended": (lambda d: (d / "train.jsonl").open("a").write("{\"step\": 1\n"), "repaired"),
    "last_prediction_not_a_label": (train_edit(_set(9, "prediction", "not-a-label")), "repaired"),
    "prediction_not_a_label": (train_edit(_set(3, "prediction", "not-a-label")), "train.jsonl line 4"),
    "prediction_changed": (train_edit(_flip_correctness(3)), "train.jsonl line 4"),
    "example_of_another_run": (train_edit(_set(3, "example_id", 1)), "train.jsonl line 4"),
    "time_not_seconds": (train_edit(_set(3, "time_s", "soon")), "train.jsonl line 4"),
    "a_line_missing": (train_edit(lambda rows: rows.pop(3)), "train.jsonl line 4"),
    "a_step_repeated_otherwise": (train_edit(lambda rows: rows.insert(4, {**rows[3], "time_s": 9.0})),
                                  "train.jsonl line 5"),
    "junk_in_the_middle": (train_edit(lambda rows: rows.insert(2, "junk")), "train.jsonl line 3"),
    "test_accuracy": (edit_test_lines(_set(1, "accuracy", 2.0)), "repaired"),
    "test_per_class": (edit_test_lines(_set(1, "per_class_accuracy", {})), "repaired"),
    "test_predictions_not_labels": (edit_test_lines(_set(1, "predictions", lambda r: ["x"] * len(r["predictions"]))),
                                    "repaired"),
    "test_prediction_changed": (_test_prediction_flipped, "repaired"),
    "test_context": (edit_test_lines(_set(1, "context", [0])), "repaired"),
    "test_metrics": (edit_test_lines(_set(1, "metrics", {"x": 1})), "repaired"),
    "test_time": (edit_test_lines(_set(1, "time_s", -1)), "repaired"),
    "test_line_repeated": (edit_test_lines(lambda rows: rows.insert(2, dict(rows[1]))), "repaired"),
    "test_lines_swapped": (edit_test_lines(lambda rows: rows.__setitem__(slice(0, 2), rows[1::-1])), "repaired"),
    "test_step_not_planned": (edit_test_lines(_set(1, "step", 2)), "repaired"),
    "config_test_steps": (config_edit(lambda c: c["resolved"].__setitem__("test_steps", [0, 2, 9])),
                          "resolved.test_steps"),
    "config_labels": (config_edit(lambda c: c["dataset"].__setitem__("labels", [x.upper() for x in
                                                                                c["dataset"]["labels"]])),
                      "labels in config.json"),
    "config_test_answers": (config_edit(lambda c: c["test_set"]["answers"].__setitem__(0, "refund")),
                            "test_set.answers"),
    "config_train_ids": (config_edit(lambda c: c["train_example_ids"].reverse()), "train_example_ids"),
    "config_context_size": (config_edit(lambda c: c["resolved"].__setitem__("max_context_examples", 3)),
                            "resolved.max_context_examples"),
    "config_steps": (config_edit(lambda c: c["resolved"].__setitem__("steps", 11)), "resolved.steps"),
    "config_num_train": (config_edit(lambda c: c["dataset"].__setitem__("num_train", 50)), "dataset.num_train"),
    "config_format": (config_edit(lambda c: c.__setitem__("format_version", 7)), "format_version"),
    "config_exemplars": (config_edit(lambda c: c.__setitem__("exemplars", [{"id": 1}])), "exemplars"),
}


@pytest.mark.parametrize("method", ["explorative", "ucb_reset_explore"])
@pytest.mark.parametrize("damage", list(DAMAGE))
def test_damage_is_repaired_exactly_or_refused_in_one_line_writing_nothing(runs, tmp_path, capsys, monkeypatch,
                                                                          method, damage):
    argv, run_dir, whole = copy_of(runs, method, tmp_path)
    edit, outcome = DAMAGE[damage]
    edit(run_dir)
    before = files(run_dir)
    capsys.readouterr()
    if outcome == "repaired":
        assert main(argv) == 0
        err = capsys.readouterr().err
        assert "Traceback" not in err
        assert records(run_dir) == whole
        assert main(argv) == 0 and "already finished" in capsys.readouterr().out
        return
    import icrl.run.experiment

    monkeypatch.setattr(icrl.run.experiment, "load_backend_of", lambda config: pytest.fail("loaded the model"))
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err and "Traceback" not in err, err
    assert outcome in err and ("restore" in err or "--train_k" in err), err
    assert "need repair" not in err
    assert files(run_dir) == before  # nothing written, the log included


def test_a_zero_shot_run_with_training_lines_is_refused_in_one_line(runs, tmp_path, capsys):
    argv, run_dir, _ = copy_of(runs, "zero_shot", tmp_path)
    (run_dir / "train.jsonl").write_text('{"step": 0}\n')
    before = files(run_dir)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "train.jsonl" in err and "zero-shot" in err and "\n" not in err
    assert files(run_dir) == before


@pytest.mark.parametrize("edit", ["context_of_a_later_step", "scores"])
def test_a_retrieval_context_that_the_strategy_cannot_draw_is_refused(runs, tmp_path, capsys, edit):
    """knn contexts are checked, not drawn again: earlier steps its filter admits, a score each."""
    argv, run_dir, _ = copy_of(runs, "knn", tmp_path)
    rows = lines(run_dir, "train.jsonl")
    if edit == "scores":
        rows[6]["metrics"] = {"knn_scores": ["high"] * len(rows[6]["context"])}
    else:
        rows[6]["context"] = [8]
    write(run_dir, "train.jsonl", rows)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "train.jsonl line 7" in err and "\n" not in err


@pytest.mark.parametrize("name, edit", [
    ("reasoning_judged", lambda r: r.update(judge="maybe")),
    ("reasoning_judged", lambda r: r.update(reasoning=7) if "reasoning" in r else r.update(judge="maybe")),
    ("reflection", lambda r: r.update(reflection=None)),
    ("curated", lambda r: r["metrics"].update(pruned=[0])),
])
def test_what_a_model_wrote_beside_its_label_is_checked_for_its_kind(runs, tmp_path, capsys, name, edit):
    """A verdict that is not yes or no, reasoning that is not text, a guide missing at its step,
    episodes said pruned that the rewards did not prune: refused in one line, nothing written."""
    argv, run_dir, _ = copy_of(runs, name, tmp_path)
    rows = lines(run_dir, "train.jsonl")
    step = 6 if name == "reflection" else 3  # a guide is written at steps 3, 6, 9
    edit(rows[step])
    write(run_dir, "train.jsonl", rows)
    before = files(run_dir)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"train.jsonl line {step + 1}" in err and "\n" not in err, err
    assert files(run_dir) == before


@pytest.mark.parametrize("which", ["train", "test"])
def test_a_line_of_another_run_is_refused_or_recomputed(runs, tmp_path, capsys, which):
    """The same examples with another --seed: the strategy's draws differ, so a training line of
    that run is refused (the steps after it depend on it) and a test line recomputed."""
    argv, run_dir, whole = copy_of(runs, "explorative", tmp_path)
    other = tmp_path / "other"
    seed = argv.index("--seed") + 1
    assert main(argv[:seed] + ["4"] + argv[seed + 1:-1] + [str(other)]) == 0
    (other_dir,) = find_runs(other)
    name, index = ("train.jsonl", 6) if which == "train" else ("test.jsonl", 1)
    rows, theirs = lines(run_dir, name), lines(other_dir, name)
    assert rows[index] != theirs[index]
    rows[index] = theirs[index]
    write(run_dir, name, rows)
    capsys.readouterr()
    if which == "train":
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "train.jsonl line 7" in err and "another run" in err and "\n" not in err, err
    else:
        assert main(argv) == 0
        assert records(run_dir) == whole


def test_an_extended_damaged_run_is_repaired_then_extended_to_the_longer_run(runs, tmp_path, capsys):
    argv, run_dir, _ = copy_of(runs, "ucb_reset_explore", tmp_path)
    k = argv.index("--train_k") + 1
    longer = argv[:k] + ["14"] + argv[k + 1:]
    fresh = tmp_path / "fresh"
    assert main(longer[:-1] + [str(fresh)]) == 0
    train_edit(_set(3, "feedback", lambda r: 1 - r["feedback"]))(run_dir)
    capsys.readouterr()
    assert main(longer) == 0
    err = capsys.readouterr().err
    assert "need repair (training step 3's feedback)" in err and "extending" in err, err
    extended, started_longer = records(run_dir), records(find_runs(fresh)[0])
    assert extended["train.jsonl"] == started_longer["train.jsonl"]
    # the shorter run's last step stays a test step (docs/records.md), the others are the longer run's
    assert [r for r in extended["test.jsonl"] if r["step"] != 9] == started_longer["test.jsonl"]


def test_a_refusal_after_a_size_warning_is_still_one_line(runs, tmp_path, capsys):
    """--train_k above the data warns, but only once the run goes on: a refusal stays one line."""
    argv, run_dir, _ = copy_of(runs, "naive", tmp_path)
    config_edit(lambda c: c["resolved"].__setitem__("test_steps", [0, 9]))(run_dir)
    k = argv.index("--train_k") + 1
    assert main(argv[:k] + ["999"] + argv[k + 1:]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "resolved.test_steps" in err and "\n" not in err, err


def _other_verdict(row):
    row["judge"] = "no" if row["judge"] == "yes" else "yes"


# name: (method, edit of one training line that leaves the line's other fields as recorded, the field named)
CONTRADICTIONS = {
    "verdict": ("reasoning_judged", _other_verdict, "judge"),
    "verdict_only_positive": ("judged_only_positive", _other_verdict, "judge"),
    "verdict_learner": ("linucb_judged", _other_verdict, "judge"),
    "judged_prediction": ("reasoning_judged", lambda r: r.update(prediction=r["answer"] if not r["accuracy"]
                                                                   else other_label(r["answer"])), "prediction"),
    "reasoning_above_budget": ("reasoning_judged", lambda r: r.update(reasoning_tokens=6000), "reasoning_tokens"),
    "judged_accuracy": ("judged_only_positive", lambda r: r.update(accuracy=1 - r["accuracy"]), "prediction"),
    "reasoning_missing": ("reasoning_judged", lambda r: r.pop("reasoning"), "reasoning"),
    "guide_missing": ("reflection", lambda r: r.pop("reflection"), "reflection"),
    "guide_shown": ("reflection", lambda r: r["metrics"].update(reflection_step=0), "reflection_step"),
    "pruned": ("curated", lambda r: r["metrics"].update(pruned=[0]), "pruned"),
}


def _first_called_step(rows, start=3):
    """The first step from ``start`` whose label the model gave (not explored), before the last."""
    return next(t for t in range(start, len(rows) - 1) if not rows[t].get("explored"))


@pytest.mark.parametrize("case", list(CONTRADICTIONS))
def test_a_line_whose_fields_contradict_each_other_is_refused_there_and_the_advice_gives_the_run(
        runs, tmp_path, capsys, case):
    """A verdict that does not give the recorded reward, a prediction and its accuracy that
    disagree (a judged run: nothing else witnesses the prediction), a reasoning count above
    --reasoning or reasoning missing, a guide missing at its step or another step's guide said
    shown, episodes said pruned that the rewards did not prune: refused at that line, naming
    the field; deleting that line and the ones after it (the advice) gives the uninterrupted
    run's records."""
    name, edit, field = CONTRADICTIONS[case]
    argv, run_dir, whole = copy_of(runs, name, tmp_path)
    rows = lines(run_dir, "train.jsonl")
    step = _first_called_step(rows)
    kept = (run_dir / "train.jsonl").read_text().splitlines(keepends=True)[:step]
    edit(rows[step])
    write(run_dir, "train.jsonl", rows)
    before = files(run_dir)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert f"train.jsonl line {step + 1} " in err and field in err and "\n" not in err, err
    assert "delete it and the lines after it" in err, err
    assert files(run_dir) == before
    (run_dir / "train.jsonl").write_text("".join(kept))  # the advice, followed
    assert main(argv) == 0
    assert records(run_dir) == whole


@pytest.mark.parametrize("case", ["last_verdict", "test_reasoning_above_budget", "judged_reward"])
def test_a_contradiction_the_rebuild_settles_gives_the_uninterrupted_run(runs, tmp_path, capsys, case):
    """The last training line's verdict edited (its step is recomputed), a test line's reasoning
    count above --reasoning (that test step is recomputed), a judged reward edited alone (its
    verdict and feedback give it back): the records become the uninterrupted run's."""
    argv, run_dir, whole = copy_of(runs, "reasoning_judged", tmp_path)
    if case == "test_reasoning_above_budget":
        edit_test_lines(lambda rows: rows[1]["reasoning_tokens"].__setitem__(0, 6000))(run_dir)
    else:
        rows = lines(run_dir, "train.jsonl")
        if case == "last_verdict":
            _other_verdict(rows[-1])
        else:
            rows[3]["reward"] = 1 - rows[3]["reward"]
        write(run_dir, "train.jsonl", rows)
    assert main(argv) == 0
    assert "Traceback" not in capsys.readouterr().err
    assert records(run_dir) == whole
