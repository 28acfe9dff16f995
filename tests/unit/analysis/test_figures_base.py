"""What every figure of run_draw_plots.py shares (icrl/analysis/figures_base.py): on a short
run, the step axes read whole steps only."""

from __future__ import annotations

import numpy as np

from helpers import TOY
from icrl.cli.run import main as run


def test_step_axes_of_a_short_run_have_integer_ticks(tmp_path, monkeypatch):
    import icrl.analysis.figures as figures
    from icrl.cli.figures import main as plots

    data = tmp_path / "data"
    common = [*TOY, "--test_k", "8", "--output_dir", str(data), "--train_k", "4", "--test_every", "2",
              "--max_context_examples", "2"]
    assert run([*common, "--context_strategy_name", "random_biased_end", "--icrl"]) == 0
    assert run([*common, "--context_strategy_name", "random_unbiased", "--no-icrl"]) == 0
    drawn = {}
    save = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, out, name: drawn.setdefault(name, fig) and save(fig, out, name))
    assert plots(["--data_dir", str(data), "--out_dir", str(tmp_path / "plots")]) == 0
    assert {"main_results", "train_accuracy", "regret"} <= set(drawn)
    for name, fig in drawn.items():
        for ax in fig.axes:
            if not ax.get_visible() or not ax.has_data():
                continue
            low, high = ax.get_xlim()
            ticks = [t for t in ax.get_xticks() if low <= t <= high]
            assert ticks and all(float(t).is_integer() for t in ticks), (name, ticks)
            assert np.all(np.diff(ticks) >= 1)
