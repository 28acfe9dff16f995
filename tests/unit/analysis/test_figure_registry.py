"""The registry of figures: icrl's own in drawing order, then the ones plugins add; a name taken
is refused naming its owner."""

from __future__ import annotations

import pytest

from icrl.analysis import figures
from icrl.analysis.figure_registry import BUILT_IN, FIGURES, register_figure
from icrl.errors import UsageError


def test_the_builtin_figures_come_first_then_the_added_ones():
    assert [name for name, _ in figures.figures()] == list(BUILT_IN)

    @register_figure("extra_figure")
    def extra(ctx):
        return "nothing to draw"

    try:
        drawn = figures.figures()
        assert [name for name, _ in drawn] == [*BUILT_IN, "extra_figure"] and drawn[-1][1] is extra
        assert all(callable(draw) for _, draw in drawn)
    finally:
        FIGURES.unregister("extra_figure")


def test_a_builtin_name_is_refused():
    with pytest.raises(UsageError, match=r"^the figure 'regret' is registered already by icrl \(built in\)"):
        register_figure("regret")(lambda ctx: "x")
    assert FIGURES.names() == BUILT_IN
