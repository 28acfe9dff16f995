"""icrl.tasks: rows, label names, task-name suffixes and the paper's sampling protocol.

Expected values are computed here from the raw files with the standard library, not with
icrl's own parsers. Runs offline: the Hub path is exercised with a fake load_dataset.
"""

import csv
import json
import random
import shutil
from collections import Counter

import pytest

from helpers import TOY_TASK, tiny_argv
from icrl.cli.run import main
from icrl.errors import UsageError
from icrl.tasks import TASK_NAMES, Example, Task, load_task, sources

NLU_FILE = "NLU-Data-Home-Domain-Annotated-All.csv"


def raw_banking77(data_dir, split):
    """(text, paper label string) per row of banking77/<split>.csv, in file order."""
    with open(data_dir / "banking77" / f"{split}.csv", encoding="utf-8") as f:
        rows = list(csv.reader(f))[1:]
    return [(text, cat.lower().replace("_", " ").rstrip("?")) for text, cat in rows]


@pytest.fixture(autouse=True)
def fresh_source_cache():
    """Each test parses (or fakes) its sources afresh."""
    sources.load_source.cache_clear()
    yield
    sources.load_source.cache_clear()


# ------------------------------------------------------------------------ sizes --
@pytest.mark.parametrize("name, n_train, n_test, n_labels", [
    ("banking77", 10003, 3080, 77),
    ("clinic150", 15000, 4500, 150),
    ("clinic150_oos", 15250, 5500, 151),
    ("trec_coarse", 5452, 500, 6),
    ("trec_fine", 5452, 500, 50),
])
def test_row_and_label_counts(data_dir, name, n_train, n_test, n_labels):
    task = load_task(name, data_dir)
    assert (task.num_train, task.num_test, len(task.labels)) == (n_train, n_test, n_labels)
    assert len(task.train) == n_train and len(task.test) == n_test
    assert task.description == ""


def test_task_names_are_the_paper_bases():
    assert set(TASK_NAMES) == {"banking77", "clinic150", "clinic150_oos", "trec_coarse",
                               "trec_fine", "nlu"}


# ------------------------------------------------------------------ label names --
def test_banking77_rows_and_labels_match_the_raw_csv(data_dir):
    task = load_task("banking77", data_dir)
    for split, rows in (("train", task.train), ("test", task.test)):
        raw = raw_banking77(data_dir, split)
        assert [(ex.text, task.answer(ex)) for ex in rows] == raw
        assert [ex.id for ex in rows] == list(range(len(raw)))
    first = task.train[0]
    assert first.text == "I am still waiting on my card?"
    assert task.answer(first) == "card arrival"
    assert task.prompt(first) == "Query: I am still waiting on my card?"
    assert task.prediction_prefix == "Intent:"


def test_clinic150_drops_oos_and_keeps_hf_ids(data_dir):
    with open(data_dir / "clinc_oos" / "data_oos_plus.json", encoding="utf-8") as f:
        raw = json.load(f)
    task = load_task("clinic150", data_dir)
    assert "oos" not in task.labels
    assert [(ex.text, task.answer(ex)) for ex in task.test] == \
        [(text, intent.replace("_", " ")) for text, intent in raw["test"]]
    assert task.answer(task.train[0]) == "translate"
    assert task.train[-1].id == 14999

    with_oos = load_task("clinic150_oos", data_dir)
    rows = raw["train"] + raw["oos_train"]
    assert [(ex.text, with_oos.answer(ex)) for ex in with_oos.train] == \
        [(text, intent.replace("_", " ")) for text, intent in rows]
    assert with_oos.labels.index("oos") == 42
    assert with_oos.answer(with_oos.train[-1]) == "oos"
    assert with_oos.labels[:42] == task.labels[:42]
    assert with_oos.labels[43:] == task.labels[42:]


def test_trec_fine_and_coarse_labels_agree_with_the_file(data_dir):
    coarse, fine = load_task("trec_coarse", data_dir), load_task("trec_fine", data_dir)
    with open(data_dir / "trec" / "train_5500.label", "rb") as f:
        raw_tags = [line.split(b" ", 1)[0].decode() for line in f]

    assert coarse.prompt(coarse.train[0]) == \
        "Question: How did serfdom develop in and then leave Russia ?"
    assert coarse.prediction_prefix == fine.prediction_prefix == "Type:"
    assert (coarse.answer(coarse.train[0]), fine.answer(fine.train[0])) == \
        ("description", "description manner")
    animal = raw_tags.index("ENTY:animal")
    assert fine.answer(fine.train[animal]) == "entity animal"
    assert coarse.answer(coarse.train[animal]) == "entity"
    assert fine.answer(fine.train[raw_tags.index("NUM:dist")]) == "numeric distance"

    first_word = {"ABBR": "abbreviation", "ENTY": "entity", "DESC": "description",
                  "HUM": "human", "LOC": "location", "NUM": "numeric"}
    assert [coarse.answer(ex) for ex in coarse.train] == \
        [first_word[tag.split(":")[0]] for tag in raw_tags]
    for c, f in zip(coarse.train + coarse.test, fine.train + fine.test):
        assert (c.id, c.text) == (f.id, f.text)
        assert fine.answer(f).split(" ")[0] == coarse.answer(c)


def test_trec_train_line_with_byte_f0_is_read_as_a_space(data_dir):
    task = load_task("trec_coarse", data_dir)
    assert task.train[65].text == \
        "Which city has the oldest relationship as a sister city with Los Angeles ?"


def test_label_index_round_trips(data_dir):
    task = load_task("trec_coarse", data_dir)
    assert [task.label_index(label) for label in task.labels] == list(range(6))
    with pytest.raises(ValueError):
        task.label_index("animal")


# ---------------------------------------------------------------------- suffixes --
@pytest.mark.parametrize("base, k", [("banking77", 10), ("banking77", 9), ("clinic150", 10),
                                     ("trec_fine", 16)])
def test_top_k_keeps_the_most_frequent_training_labels(data_dir, base, k):
    full = load_task(base, data_dir)
    expected = {full.labels[i] for i, _ in
                Counter(ex.label for ex in full.train).most_common(k)}
    top = load_task(f"{base}_top{k}", data_dir)

    assert set(top.labels) == expected and len(top.labels) == k
    assert top.labels == [label for label in full.labels if label in expected]  # original order
    for full_rows, top_rows in ((full.train, top.train), (full.test, top.test)):
        kept = [(ex.id, ex.text, full.answer(ex)) for ex in full_rows
                if full.answer(ex) in expected]
        assert [(ex.id, ex.text, top.answer(ex)) for ex in top_rows] == kept


def test_clinic150_top_k_breaks_ties_by_first_appearance(data_dir):
    # every clinic150 label has 100 training rows: Counter keeps first-seen order
    full = load_task("clinic150", data_dir)
    first_seen = list(dict.fromkeys(full.answer(ex) for ex in full.train))
    top = load_task("clinic150_top5", data_dir)
    assert set(top.labels) == set(first_seen[:5])
    assert top.labels != full.labels[:5]


def test_unsemantic_renames_labels_only(data_dir):
    plain, unsem = load_task("banking77", data_dir), load_task("banking77_unsemantic", data_dir)
    assert unsem.labels == [f"label_{1000 + i}" for i in range(77)]
    assert unsem.train == plain.train and unsem.test == plain.test
    ex = unsem.train[0]
    assert unsem.answer(ex) == f"label_{1000 + plain.labels.index('card arrival')}"


def test_suffixes_compose_in_any_order(data_dir):
    top = load_task("banking77_top10", data_dir)
    a = load_task("banking77_top10_unsemantic", data_dir)
    b = load_task("banking77_unsemantic_top10", data_dir)
    assert a.labels == b.labels == [f"label_{1000 + i}" for i in range(10)]
    assert a.train == b.train == top.train and a.test == b.test == top.test


@pytest.mark.parametrize("bad", ["bankin77", "banking77_top0", "banking77_top78",
                                 "banking77_topk", "banking77_top5_top5", "trec", "",
                                 "clinic150_oos_semantic", "banking77_"])
def test_unknown_task_names_list_the_valid_ones(bad):
    with pytest.raises(UsageError) as err:
        load_task(bad, "/nonexistent")
    message = str(err.value)
    assert "\n" not in message
    assert all(name in message for name in TASK_NAMES)
    assert "_top<K>" in message and "_unsemantic" in message


# ---------------------------------------------------------------------- sampling --
def test_training_examples_follow_the_published_protocol(data_dir):
    first = load_task("banking77", data_dir).training_examples(10, 100)
    sources.load_source.cache_clear()
    second_task = load_task("banking77", data_dir)
    assert second_task.training_examples(10, 100) == first

    raw = list(enumerate(raw_banking77(data_dir, "train")))
    random.seed(100)
    random.shuffle(raw)
    assert [(ex.id, ex.text, second_task.answer(ex)) for ex in first] == \
        [(i, text, label) for i, (text, label) in raw[:10]]


def test_test_examples_follow_the_published_protocol(data_dir):
    task = load_task("banking77", data_dir)
    raw = raw_banking77(data_dir, "test")
    random.seed(7)
    random.shuffle(raw)
    assert [(ex.text, task.answer(ex)) for ex in task.test_examples(25, 7)] == raw[:25]


def test_sample_sizes(data_dir):
    task = load_task("trec_coarse", data_dir)
    everything = task.test_examples(-1, 3)
    assert len(everything) == 500 and set(everything) == set(task.test)
    assert task.test_examples(10_000, 3) == everything
    assert task.test_examples(0, 3) == []
    assert task.test_examples(5, 3) == everything[:5]
    with pytest.raises(UsageError):
        task.test_examples(-2, 3)


def test_exemplars_are_removed_from_the_training_pool(data_dir):
    task = load_task("trec_coarse", data_dir)
    chosen = task.exemplars(per_label=2, seed=5)
    assert Counter(task.answer(ex) for ex in chosen) == {label: 2 for label in task.labels}

    random.seed(5)
    walk = list(task.train)
    random.shuffle(walk)
    counts, expected_chosen, rest = Counter(), [], []
    for ex in walk:
        if counts[ex.label] < 2:
            counts[ex.label] += 1
            expected_chosen.append(ex)
        else:
            rest.append(ex)
    assert chosen == expected_chosen

    pool = task.training_examples(-1, 11)
    random.seed(11)
    random.shuffle(rest)
    assert pool == rest
    assert len(pool) == task.num_train - 12 and not set(pool) & set(chosen)
    assert task.num_train == 5452


def test_zero_exemplars_leave_the_pool_alone(data_dir):
    task = load_task("trec_coarse", data_dir)
    before = task.training_examples(20, 1)
    assert task.exemplars(per_label=0, seed=5) == []
    assert task.training_examples(20, 1) == before


def test_all_prompts_cover_train_then_test(data_dir):
    task = load_task("trec_fine", data_dir)
    prompts = task.all_prompts()
    assert len(prompts) == 5952
    assert prompts[0] == task.prompt(task.train[0])
    assert prompts[-1] == task.prompt(task.test[-1])


def test_fingerprint_identifies_the_data(data_dir):
    a, b = load_task("banking77", data_dir), load_task("banking77", data_dir)
    assert a.fingerprint() == b.fingerprint()
    assert len(a.fingerprint()) == 64
    others = {load_task(n, data_dir).fingerprint()
              for n in ("banking77_unsemantic", "banking77_top10", "clinic150")}
    assert a.fingerprint() not in others and len(others) == 3


def test_a_task_can_be_built_from_rows():
    task = Task("toy", ["yes", "no"], "Q: {text}", "A:",
                train=[Example(0, "a", 0), Example(1, "b", 1)], test=[Example(0, "c", 1)])
    assert task.prompt(task.test[0]) == "Q: c" and task.answer(task.test[0]) == "no"
    with pytest.raises(ValueError):
        Task("toy", ["yes"], "Q: {text}", "A:", train=[Example(0, "a", 1)], test=[])


# --------------------------------------------------------------- data location --
def test_data_dir_from_the_environment(data_dir, monkeypatch):
    monkeypatch.setenv("ICRL_DATA_DIR", str(data_dir))
    assert load_task("trec_coarse").fingerprint() == \
        load_task("trec_coarse", data_dir).fingerprint()


def test_missing_file_names_its_path_and_origin(tmp_path, monkeypatch):
    monkeypatch.setenv("ICRL_DATA_DIR", str(tmp_path))
    with pytest.raises(UsageError) as err:
        load_task("banking77")
    message = str(err.value)
    assert str(tmp_path / "banking77" / "train.csv") in message
    assert "PolyAI-LDN/task-specific-datasets" in message


# --------------------------------------------------------------------------- NLU --
NLU_HEADER = ["userid", "answerid", "scenario", "intent", "status", "answer_annotation",
              "notes", "suggested_entities", "answer_normalised", "answer", "question"]
NLU_ROWS = [  # (scenario, intent, answer_annotation)
    ("alarm", "set", "wake me up at [time : five am] this week"),
    ("alarm", "set", "null"),
    ("alarm", "query", "what alarms do i have"),
    ("weather", "query", "is it going to rain in [place_name : new york] [date : tomorrow]"),
    ("iot", "hue_lightoff", "turn the lights off; now"),
    ("qa", "factoid", "who is \"the\" president of [place_name : france]"),
    ("play", "music", "play [artist_name : the beatles]"),
    ("general", "joke", "null"),
    ("calendar", "set", "remind me about [event_name : the meeting] at [time : noon]"),
    ("email", "sendemail", "send an email to [person : john]"),
    ("news", "query", "latest news"),
    ("takeaway", "order", "order a [food_type : pizza]"),
]


def write_nlu_csv(folder):
    path = folder / "nlu_evaluation_data" / NLU_FILE
    path.parent.mkdir(parents=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter=";", quoting=csv.QUOTE_ALL)
        writer.writerow(NLU_HEADER)
        for i, (scenario, intent, annotation) in enumerate(NLU_ROWS):
            writer.writerow([str(i), str(1000 + i), scenario, intent, "", annotation, "", "",
                             annotation.lower(), annotation, "What would you say?"])
    return path


def expected_nlu_rows():
    """Non-null rows, de-annotated by hand, with their paper label strings."""
    plain = {
        "wake me up at [time : five am] this week": "wake me up at five am this week",
        "is it going to rain in [place_name : new york] [date : tomorrow]":
            "is it going to rain in new york tomorrow",
        "who is \"the\" president of [place_name : france]": "who is \"the\" president of france",
        "play [artist_name : the beatles]": "play the beatles",
        "remind me about [event_name : the meeting] at [time : noon]":
            "remind me about the meeting at noon",
        "send an email to [person : john]": "send an email to john",
        "order a [food_type : pizza]": "order a pizza",
    }
    return [(plain.get(a, a), f"{s} {i}".replace("_", " "))
            for s, i, a in NLU_ROWS if a != "null"]


def test_nlu_from_the_raw_csv(tmp_path):
    from datasets import Dataset

    write_nlu_csv(tmp_path)
    task = load_task("nlu", tmp_path)
    rows = expected_nlu_rows()
    assert (task.num_train, task.num_test, len(task.labels)) == (8, 2, 68)
    assert task.prediction_prefix == "Intent:"

    parts = Dataset.from_dict({"i": list(range(len(rows)))}).train_test_split(
        test_size=0.2, seed=0)
    for split_rows, split in ((task.train, "train"), (task.test, "test")):
        assert [(ex.text, task.answer(ex)) for ex in split_rows] == \
            [rows[i] for i in parts[split]["i"]]
        assert [ex.id for ex in split_rows] == list(range(len(split_rows)))
    wake = next(ex for ex in task.train + task.test if ex.text.startswith("wake"))
    assert task.prompt(wake) == "Utterance: wake me up at five am this week"
    assert task.answer(wake) == "alarm set"


def test_nlu_missing_file_names_the_path(tmp_path):
    with pytest.raises(UsageError) as err:
        load_task("nlu", tmp_path)
    assert str(tmp_path / "nlu_evaluation_data" / NLU_FILE) in str(err.value)
    assert "xliuhw/NLU-Evaluation-Data" in str(err.value)


# --------------------------------------------------------------------------- Hub --
def fake_hub(monkeypatch, names):
    """Replace datasets.load_dataset with one serving the NLU rows with ClassLabel `names`."""
    import datasets

    calls = []
    rows = expected_nlu_rows()
    hf = sources.hf_label_names("nlu_evaluation_data", "label")

    def load_dataset(path, name=None, **kwargs):
        calls.append((path, name))
        features = datasets.Features({"text": datasets.Value("string"),
                                      "scenario": datasets.Value("string"),
                                      "label": datasets.ClassLabel(names=names)})
        train = datasets.Dataset.from_dict(
            {"text": [t for t, _ in rows], "scenario": [l.split()[0] for _, l in rows],
             "label": [hf.index(l.replace(" ", "_")) for _, l in rows]}, features=features)
        return datasets.DatasetDict({"train": train})

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.delenv("ICRL_DATA_DIR", raising=False)
    monkeypatch.setattr(sources, "BESIDE_CHECKOUT", sources.BESIDE_CHECKOUT / "not-in-this-test")  # no raw files
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no reachability probe: the fake is the Hub
    return calls


def test_hub_nlu_is_split_like_the_raw_file(tmp_path, monkeypatch):
    calls = fake_hub(monkeypatch, list(sources.hf_label_names("nlu_evaluation_data", "label")))
    from_hub = load_task("nlu")
    assert calls == [("xingkunliuxtracta/nlu_evaluation_data", None)]
    write_nlu_csv(tmp_path)
    assert from_hub.fingerprint() == load_task("nlu", tmp_path).fingerprint()


def test_hub_label_names_must_match_the_hf_table(monkeypatch):
    names = list(sources.hf_label_names("nlu_evaluation_data", "label"))
    names[0], names[1] = names[1], names[0]
    fake_hub(monkeypatch, names)
    with pytest.raises(UsageError, match="label names"):
        load_task("nlu")


# -- bad dataset files and empty splits: one line naming the file, exit 2 --------------------------
def test_malformed_dataset_and_bad_tool_outputs_are_one_line(tmp_path, capsys, monkeypatch):
    from icrl.cli.figures import main as plots_main
    from icrl.cli.tokens import main as count_main

    bad = tmp_path / "data" / "trec"
    bad.mkdir(parents=True)
    (bad / "train_5500.label").write_bytes(b"DESC:manner How \xff\xfe ?\n")
    (bad / "TREC_10.label").write_bytes(b"NUM:date When ?\n")
    monkeypatch.setenv("ICRL_DATA_DIR", str(tmp_path / "data"))
    assert main([w if w != TOY_TASK else "trec_coarse" for w in tiny_argv(tmp_path / "out")]) == 2
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


def test_empty_training_split_and_bad_paths_and_vllm_flags(tmp_path, data_dir, capsys, monkeypatch):
    folder = tmp_path / "data" / "banking77"
    folder.mkdir(parents=True)
    shutil.copy(data_dir / "banking77" / "test.csv", folder / "test.csv")
    (folder / "train.csv").write_text("text,category\n")
    monkeypatch.setenv("ICRL_DATA_DIR", str(tmp_path / "data"))
    args = [a if a != TOY_TASK else "banking77" for a in tiny_argv(tmp_path / "out")]
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
        assert main(tiny_argv(tmp_path / "out", *extra)) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and "\n" not in err
    assert not (tmp_path / "out").exists()

