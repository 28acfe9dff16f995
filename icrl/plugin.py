"""What a plugin imports: the parts a researcher adds from their own files, without a fork.

A plugin is a Python file, a package folder or an installed module that registers parts when
it is imported. Give it to any script with ``--plugin FILE_OR_MODULE`` (repeatable), in
``ICRL_PLUGINS`` (``:``-separated), or install it with an entry point in the group
``icrl.plugins``. What it registers is then a choice like a built-in one: in ``--help``,
validation, run folders, ``config.json`` (which records the plugin's module and the sha256 of
its source), the records, figures, the viewer, the report, sweeps (Ray included) and resume.
A complete plugin, ``my_plugin.py``::

    import numpy as np

    from icrl.plugin import Param, Reward, Strategy, register_figure, register_reward, register_strategy

    EVERY = Param("every", 2, "every_other: keep the episodes of every this many steps", type=int,
                  check=lambda v: None if v >= 1 else "a number of steps >= 1", folder="every", column="every",
                  label="every {}")


    @register_strategy
    class EveryOther(Strategy):
        name, family, params = "every_other", "example", (EVERY,)
        summary = "the latest kept episodes of every --every steps"

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


    @register_reward
    class SameFirstLetter(Reward):
        name, summary = "same_first_letter", "1 for the right label, 0.5 for a label of the same first letter"

        def score(self, prediction, answer):
            return 1 if prediction == answer else 0.5 if prediction[:1] == answer[:1] else 0


    @register_figure("context_size")
    def context_size(ctx):
        import matplotlib.pyplot as plt

        train = ctx.results.train()
        if train.empty:
            return "no training steps"
        fig, ax = plt.subplots()
        for run_id, rows in train.groupby("run_id"):
            ax.plot(rows["step"], rows["context_size"], label=ctx.runs.loc[run_id, "label"])
        ax.legend()
        return fig

Then ``run_experiment.py --plugin my_plugin.py --context_strategy_name every_other --every 3
--reward same_first_letter ...`` and ``run_draw_plots.py --plugin my_plugin.py --only
context_size``. A strategy declares itself in class attributes (:class:`Strategy`), a reward
scores a prediction (:class:`Reward`), a figure draws from the runs' records
(:func:`register_figure`), a backend is a class with what :class:`Backend` declares
(:func:`register_backend`). A strategy or reward that asks a model declares the call
(:class:`ModelCall`, with the training line's field that records its answer) and is given the
model by ``attach(call, model)``: ``tests/data/plugins/critic.py`` is a reward that does. A name
already taken, by icrl or another plugin, is refused in one line naming both; raise
:class:`UsageError` for bad input (one line, exit 2). What a part returns is checked where it
returns (``icrl.run.edge``: a context is a list of episodes of the history, each once, at most
--max_context_examples; a reward a finite number; a figure a figure or a string): a breach, and
anything the plugin raises (an exit included), stops the command in one line naming the plugin,
the steps before it kept. docs/development.md, "Plugins", walks through the plugin in
tests/data/plugins and lists the contract.
"""

from .analysis.figure_registry import register_figure
from .backends import Backend, register_backend
from .errors import UsageError
from .method.calls import ModelCall
from .method.episode import Episode
from .method.registry import Param, finite_non_negative, probability
from .method.rewards import Reward, register_reward
from .method.strategies.base import Setting, Strategy, register_strategy

__all__ = ["Backend", "Episode", "ModelCall", "Param", "Reward", "Setting", "Strategy", "UsageError",
           "finite_non_negative", "probability", "register_backend", "register_figure", "register_reward",
           "register_strategy"]
