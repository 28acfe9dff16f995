"""Retrieval contexts (beyond the paper, opt-in): the k past episodes most similar to the input.

Strategies ``knn_lexical`` and ``knn_embedding``, each also with the filters of
:mod:`icrl.method.strategies.base` (``knn_lexical_only_positive``, ``knn_embedding_only_negative``, ...).
They are query-aware and stateless: ``select(history, rng, query=prompt)`` is called for each
step's training input and, at a test step, for each test input.

One select, with k = max_examples (``--max_context_examples``, or the automatic size):

1. the pool: the history's episodes that pass the filter, in step order;
2. ``rng.binomial(1, p_keep, size=len(pool))`` keeps each with probability ``--context_p_keep``
   (the draw is made even at p_keep = 1, where it keeps all; the default);
3. each kept episode's prompt is scored against the query (the same task prompt format):

   * ``knn_lexical``: BM25 (bm25s, Lucene variant, k1 = 1.5, b = 0.75) over the kept prompts,
     tokenised by ``bm25s.tokenize``: lower-cased, tokens of two or more word characters
     (``(?u)\\b\\w\\w+\\b``), English stop words removed, no stemming; the index is built over the
     kept episodes (document frequencies are those of the pool the context is drawn from);
   * ``knn_embedding``: cosine similarity of all-MiniLM-L6-v2 sentence embeddings
     (:class:`icrl.method.embeddings.Embedder`: each prompt embedded once, cached on disk);

4. the k best by score, ties broken by recency (the newer episode wins), so when nothing
   matches (all scores 0) the context is the k most recent kept episodes;
5. the context is ordered by increasing score: the most similar episode stands last, nearest
   the input.

``metrics()`` after a select: ``knn_scores``, the chosen episodes' scores in context order
(rounded to 6 digits). The scores are pure functions of the texts, so a run is reproducible and
resumes exactly; caches (tokens, vectors, the BM25 index of the last pool) only save time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, Sequence, TypeVar

import numpy as np

from ..episode import Episode
from .base import Setting, Strategy, _any, register_strategy

if TYPE_CHECKING:
    import bm25s

    from ..embeddings import Embedder

BM25_STOPWORDS = "english"
SCORE_DIGITS = 6
V = TypeVar("V")


class Similarity:
    """Scores documents (episode prompts) against a query; higher is more similar."""

    name = ""

    def scores(self, query: str, documents: Sequence[str]) -> np.ndarray:
        raise NotImplementedError


class _LastPool(Generic[V]):
    """The value computed for the last list of documents (same texts, same order), reused while
    the documents are unchanged: at a test step every test input is scored against one pool."""

    def __init__(self, build: Callable[[tuple[str, ...]], V]):
        self.build = build
        self.last: Optional[tuple[tuple[str, ...], V]] = None  # the documents, and what ``build`` made of them
        self.builds = 0

    def __call__(self, documents: Sequence[str]) -> V:
        key = tuple(documents)
        if self.last is None or key != self.last[0]:
            self.last = key, self.build(key)
            self.builds += 1
        return self.last[1]


class Lexical(Similarity):
    """BM25 through bm25s (see the module docstring for the tokenisation)."""

    name = "lexical"

    def __init__(self) -> None:
        self._tokens: dict[str, list[str]] = {}
        self._index = _LastPool(self._build)

    def tokens(self, text: str) -> list[str]:
        tokens = self._tokens.get(text)
        if tokens is None:
            import bm25s
            tokens = bm25s.tokenize([text], return_ids=False, stopwords=BM25_STOPWORDS, show_progress=False)[0]
            self._tokens[text] = tokens
        return tokens

    def _build(self, documents: tuple[str, ...]) -> Optional[bm25s.BM25]:
        corpus = [self.tokens(text) for text in documents]
        if not any(corpus):
            return None  # no document has a token: every score is 0
        import bm25s
        index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
        index.index(corpus, show_progress=False)
        return index

    def scores(self, query: str, documents: Sequence[str]) -> np.ndarray:
        if not documents:
            return np.zeros(0)
        index, tokens = self._index(documents), self.tokens(query)
        if index is None or not tokens:
            return np.zeros(len(documents))
        return np.asarray(index.get_scores(tokens), dtype=np.float64)


class Embedding(Similarity):
    """Cosine similarity of sentence embeddings (:class:`icrl.method.embeddings.Embedder`)."""

    name = "embedding"

    def __init__(self, embedder: Optional[Embedder] = None) -> None:
        self._embedder = embedder
        self._matrix = _LastPool(lambda documents: self.embedder.embed(documents))

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            from icrl.method.embeddings import Embedder
            self._embedder = Embedder()
        return self._embedder

    def scores(self, query: str, documents: Sequence[str]) -> np.ndarray:
        if not documents:
            return np.zeros(0)
        vectors = self._matrix(documents)
        return (vectors @ self.embedder.embed_one(query)).astype(np.float64)


class Knn(Strategy):
    """The k kept episodes most similar to the query, the most similar last (module docstring);
    ``similarity_class``: the Similarity a subclass scores with."""

    family = "retrieval"
    query_aware = True
    similarity_class: type[Similarity] = Similarity

    def __init__(self, max_examples: int, p_keep: float, accept: Callable[[Episode], bool] = _any,
                 *, similarity: Similarity):
        super().__init__(max_examples, p_keep, accept)
        self.similarity = similarity
        self._last_scores: list[float] = []

    def select(self, history: Sequence[Episode], rng: np.random.Generator,
               query: Optional[str] = None) -> list[Episode]:
        if query is None:
            raise ValueError("knn strategies choose a context for an input: call select(..., query=prompt)")
        pool = [episode for episode in history if self.accept(episode)]
        keep = rng.binomial(1, self.p_keep, size=len(pool))
        kept = [episode for episode, k in zip(pool, keep) if k == 1]
        scores = self.similarity.scores(query, [episode.prompt for episode in kept])
        order = np.lexsort((-np.arange(len(kept)), -scores))[: self.max_examples]  # best first, newer on ties
        chosen = order[::-1]  # most similar last
        self._last_scores = [round(float(scores[i]), SCORE_DIGITS) for i in chosen]
        return [kept[i] for i in chosen]

    @classmethod
    def build(cls, setting: Setting) -> Knn:
        return cls(setting.max_examples, setting.p_keep, setting.accept, similarity=cls.similarity_class())

    @classmethod
    def build_for(cls, k: int) -> "Knn":
        """The k most similar of all episodes (p_keep 1, no filter): a part of another strategy."""
        return cls(k, 1.0, _any, similarity=cls.similarity_class())

    def metrics(self) -> dict[str, Any]:
        return {"knn_scores": list(self._last_scores)}


@register_strategy
class KnnLexical(Knn):
    name = "knn_lexical"
    similarity_class = Lexical
    summary = "the kept episodes most similar to the input by BM25, the most similar last"


@register_strategy
class KnnEmbedding(Knn):
    name = "knn_embedding"
    similarity_class = Embedding
    summary = "the kept episodes most similar to the input by MiniLM embeddings, the most similar last"
