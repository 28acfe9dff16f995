"""Curated retrieval (ours, after the curation of SuperAce100/icrl): a retrieval context that
stops retrieving the episodes whose presence in context does not pay.

``knn_lexical_curated`` and ``knn_embedding_curated`` choose as ``knn_lexical`` and
``knn_embedding`` (:mod:`icrl.method.strategies.retrieval`), from a pool without the pruned
episodes. An episode's utility is the mean reward of the training steps whose context held it
(the step's reward, as recorded: ``reward`` when the run has one apart, else the accuracy;
steps whose label was explored are not counted). Once it has been in ``--curate_min_uses``
contexts, an episode whose utility is below ``--curate_threshold`` is pruned: it is never
retrieved again (for training or test inputs), so its utility no longer changes.

Records: each training step's metrics add ``pruned``, the steps of the episodes pruned by the
reward of the step before (no longer retrieved from this step on; empty when none), so the
pruned set at any step is the union of ``pruned`` up to it. A resumed run rebuilds the
utilities from the records' contexts and rewards. ``--prob_reset`` forgets them with the
history.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ...errors import UsageError
from ..episode import Episode
from ..registry import Param, probability
from .base import Setting, _any, register_strategy
from .retrieval import Embedding, Knn, Lexical, Similarity

CURATE_MIN_USES = Param("curate_min_uses", 3, "curated retrieval: contexts an episode is in before it can be pruned",
                        type=int, check=lambda n: None if n >= 1 else "a number of uses >= 1", folder="minuses",
                        column="curate_min_uses", label="pruned after {} uses", only="llm")
CURATE_THRESHOLD = Param("curate_threshold", 0.3, "curated retrieval: an episode whose contexts' mean reward is "
                         "below this is pruned", check=probability, folder="curate", column="curate_threshold",
                         label="pruned below {}", only="llm")


class Curated(Knn):
    """A Knn whose pool leaves out the episodes that do not pay (see the module)."""

    learns = True
    params = (CURATE_MIN_USES, CURATE_THRESHOLD)

    def __init__(self, max_examples: int, p_keep: float, accept: Callable[[Episode], bool] = _any, *,
                 similarity: Similarity, min_uses: int = 3, threshold: float = 0.3):
        self.min_uses, self.threshold = min_uses, threshold
        super().__init__(max_examples, p_keep, self._keeps, similarity=similarity)
        self.filter = accept
        self.reset()

    @classmethod
    def build(cls, setting: Setting) -> Curated:
        v = setting.values
        return cls(setting.max_examples, setting.p_keep, setting.accept, similarity=cls.similarity_class(),
                   min_uses=v["curate_min_uses"], threshold=v["curate_threshold"])

    @classmethod
    def check(cls, name: str, values: Mapping[str, Any]) -> None:
        if values.get("icrl") is False:
            raise UsageError(f"{name} prunes by reward: supervised ICL (--no-icrl) has none; use --icrl or knn_"
                             f"{cls.similarity_class.name}")

    def _keeps(self, episode: Episode) -> bool:
        return self.filter(episode) and episode.step not in self.pruned

    def reset(self) -> None:
        self.use_counts: dict[int, int] = {}  # contexts each episode (by step) was in
        self.rewarded: dict[int, float] = {}
        self.pruned: set[int] = set()
        self.newly: list[int] = []  # pruned by the last observed reward, not yet in a step's metrics

    def utility(self, step: int) -> float:
        """The mean reward of the contexts that held the episode of ``step`` (NaN before its first use)."""
        uses = self.use_counts.get(step, 0)
        return self.rewarded.get(step, 0.0) / uses if uses else float("nan")

    def observe_reward(self, reward: float, context: Sequence[Episode] = ()) -> None:
        for episode in context:
            s = episode.step
            if s is None:  # an episode made outside the run's history (the size search's) has no step
                raise ValueError("curated retrieval counts the episodes of the run's history by their step; "
                                 "this context episode has none")
            self.use_counts[s] = self.use_counts.get(s, 0) + 1
            self.rewarded[s] = self.rewarded.get(s, 0.0) + float(reward)
            if s not in self.pruned and self.use_counts[s] >= self.min_uses and self.utility(s) < self.threshold:
                self.pruned.add(s)
                self.newly.append(s)

    def metrics(self) -> dict[str, Any]:
        """The scores of the last select and the episodes pruned since the last training step's
        metrics (called once a training step)."""
        newly, self.newly = sorted(self.newly), []
        return {**super().metrics(), "pruned": newly}


@register_strategy
class KnnLexicalCurated(Curated):
    name = "knn_lexical_curated"
    similarity_class = Lexical
    summary = "knn_lexical without the episodes whose contexts' mean reward fell below --curate_threshold"


@register_strategy
class KnnEmbeddingCurated(Curated):
    name = "knn_embedding_curated"
    similarity_class = Embedding
    summary = "knn_embedding without the episodes whose contexts' mean reward fell below --curate_threshold"
