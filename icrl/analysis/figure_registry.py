"""The figures run_draw_plots.py draws, by name, in drawing order: icrl's own (drawn by
:mod:`icrl.analysis.figures`, whose list names exactly ``BUILT_IN``), then those plugins add.

A figure is a function of the drawing context (``icrl.analysis.figures_base.Context``: the
runs as ``ctx.runs``, their records as ``ctx.results.train`` / ``ctx.results.test``, ``ctx.notes``
for console notes) that returns a matplotlib figure, or a string saying why it was skipped::

    @register_figure("my_figure")
    def my_figure(ctx):
        ...

It is then a choice of ``--only`` and drawn as ``my_figure.png`` and ``.pdf``. This module is
light (no pandas, no matplotlib): a plugin registers its figures before any command line is
built, and a name taken by icrl or another plugin is refused then (``icrl.infra.plugins``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional, TypeVar, Union

from ..method.registry import Registry

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .figures_base import Context

# A figure: the drawing context -> a matplotlib figure, or a string saying why it was skipped.
Draw = Callable[["Context"], Union["Figure", str]]
D = TypeVar("D", bound=Draw)

FIGURES: Registry[Optional[Draw]] = Registry("figure", "--only")

BUILT_IN = ("main_results", "beyond_paper", "failures", "regret", "train_accuracy", "ablation_p_keep",
            "ablation_context_strategy", "ablation_reward_filter", "ablation_context_length",
            "ablation_omit_feedback", "ablation_flip_feedback", "ablation_beam_size", "ablation_sampling_method",
            "ablation_semantic_labels", "ablation_temperature", "ablation_model_scale")
for _name in BUILT_IN:
    FIGURES.register(_name, None)  # drawn by icrl.analysis.figures


def register_figure(name: str) -> Callable[[D], D]:
    """A decorator: the function draws the figure ``name`` (a figure, or a string: why it was skipped)."""
    def register(draw: D) -> D:
        FIGURES.register(name, draw)
        return draw
    return register
