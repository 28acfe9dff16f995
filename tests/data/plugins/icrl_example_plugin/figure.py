"""context_size: the episodes in context at each training step, a line per run."""

from icrl.plugin import register_figure


@register_figure("context_size")
def context_size(ctx):
    import matplotlib.pyplot as plt

    train = ctx.results.train()
    if train.empty:
        return "no training steps"
    fig, ax = plt.subplots(figsize=(5, 3))
    for run_id, rows in train.groupby("run_id"):
        ax.plot(rows["step"], rows["context_size"], label=ctx.runs.loc[run_id, "label"])
    ax.set_xlabel("step")
    ax.set_ylabel("episodes in context")
    ax.legend(fontsize=6)
    return fig
