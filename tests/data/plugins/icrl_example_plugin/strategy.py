"""every_other: of the episodes of every --every steps, the latest ones each kept with p_keep."""

from icrl.plugin import Param, Strategy, register_strategy

EVERY = Param("every", 2, "every_other: keep the episodes of every this many steps", type=int,
              check=lambda v: None if v >= 1 else "a number of steps >= 1", folder="every", column="every",
              label="every {}")


@register_strategy
class EveryOther(Strategy):
    name = "every_other"
    family = "example"
    params = (EVERY,)
    summary = "the latest kept episodes of every --every steps (an example plugin)"

    def __init__(self, max_examples, p_keep, accept, every):
        super().__init__(max_examples, p_keep, accept)
        self.every = every

    @classmethod
    def build(cls, setting):
        return cls(setting.max_examples, setting.p_keep, setting.accept, setting.values["every"])

    def select(self, history, rng, query=None):
        pool = [e for i, e in enumerate(history) if i % self.every == 0 and self.accept(e)]
        kept = [e for e, keep in zip(pool, rng.binomial(1, self.p_keep, size=len(pool))) if keep]
        return kept[len(kept) - self.max_examples:] if self.max_examples else []
