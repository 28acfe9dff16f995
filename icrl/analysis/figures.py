"""Figures and a summary table from the records of many runs (run_draw_plots.py, whose command
line is :mod:`icrl.cli.figures`); no model.

Every run under ``--data_dir`` is read through :class:`icrl.analysis.results.Results`. Figures are
written as PNG and PDF (matplotlib, Agg, mathtext only: no LaTeX needed) to ``--out_dir``
with ``summary.csv`` (one row per run). A figure is drawn when the runs it needs exist and
skipped with a one-line note otherwise.

- ``main_results``: test accuracy vs. step, a column per task and a row per model, a line per
  method (naive, naive+, explorative, approximate) selected as the published figures select
  them (:func:`icrl.analysis.runs.paper_method_of`: naive only at temperature 1.0, naive+ only
  at 2.0, explorative only with the automatic size and temperature 1.0, approximate only with
  8 uniform contexts); ``--other_runs`` adds the same methods at other settings as dashed
  lines labelled with their settings (a console note lists them otherwise), with
  zero-shot and supervised ICL (the upper bound) as dashed lines of the same model and task.
  As in the paper, the zero-shot line is the step-0 test of the naive ICRL run (ICRL system
  prompt, empty context); a separate zero-shot run (``--max_context_examples 0``, standard
  system prompt) is drawn as a line of its own, labelled "zero-shot (separate run)".
- ``beyond_paper``: every run main_results leaves out by default (strategies beyond the paper,
  our exploration flags and rewards, the paper's methods at other settings, the learners that
  are not LLMs), a curve per configuration against the zero-shot run, the paper's zero-shot
  point, supervised ICL and the paper's methods on the same test items, with a paired verdict
  per configuration (:mod:`icrl.analysis.figures_beyond`).
- ``failures``: per model and task, per configuration the failure metrics of
  :mod:`icrl.analysis.failures` (labels never predicted, history frequency bias, knowing-doing
  gap, seeds collapsing early) as bars (:mod:`icrl.analysis.figures_failures`); also columns of
  ``summary.csv``, ``summary_by_config.csv`` (means over seeds) and ``diagnostics_runs.csv``.
- ``regret``: cumulative wrong training predictions vs. step, same grid.
- ``train_accuracy``: training accuracy, mean of the last ``--smooth`` steps (curves start
  at step ``smooth - 1``, where the first full window ends), same grid, no test-set lines.
- ``ablation_*``: runs that differ in exactly one argument (seeds aside) side by side: a panel
  per group of otherwise equal runs, a line per value of the argument.

Several seeds of one configuration are averaged; the shaded band spans their minimum and
maximum (the legend says so). A panel never mixes runs of different lengths or test sets:
of the ICRL runs of a model and task it keeps those of one length and test set (the one
covering the most methods, then the longest), and the baselines on that test set; the panel
title says which, and a console note names what was left out (``--filter`` to choose).
Accuracy panels draw chance (1 / number of labels, dotted); ``main_results`` and
``beyond_paper`` also state, per method, whether its final test accuracy beat zero-shot: paired
on the shared test items (McNemar's exact test and a paired bootstrap interval,
:mod:`icrl.analysis.paired`) when the zero-shot reference tested the same items, else Wilson 95%
intervals that do not overlap (:mod:`icrl.analysis.verdict`); run_draw_plots.py prints the
same verdicts.
``summary_by_config.csv`` is :meth:`icrl.analysis.results.Results.aggregate` (mean, std, n over seeds).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from ..errors import UsageError
from ..records import write_atomic
from ..run import edge
from .figure_options import FigureOptions, check_options
from .figure_registry import BUILT_IN, FIGURES as REGISTERED, Draw
from .figures_ablation import ABLATIONS, fig_ablation
from .figures_base import STYLE, Context, _save
from .figures_beyond import fig_beyond_paper
from .figures_failures import fig_failures
from .figures_methods import fig_main_results, fig_regret, fig_train_accuracy
from .diagnostics import write_diagnostics
from .results import Results


_OWN: list[tuple[str, Draw]] = [
    ("main_results", fig_main_results),
    ("beyond_paper", fig_beyond_paper),
    ("failures", fig_failures),
    ("regret", fig_regret),
    ("train_accuracy", fig_train_accuracy),
    *[(ab.name, partial(fig_ablation, ab=ab)) for ab in ABLATIONS],
]
assert tuple(name for name, _ in _OWN) == BUILT_IN, "icrl.analysis.figure_registry.BUILT_IN names these figures"


def figures() -> list[tuple[str, Draw]]:
    """(name, draw) of every figure in drawing order: icrl's own, then the plugins' (each
    checked at its edge: ``icrl.run.edge.figure``)."""
    own = dict(_OWN)
    return [(name, own[name] if draw is None else edge.figure(name, draw, REGISTERED.owner(name)))
            for name, draw in REGISTERED.items()]


def draw(args: FigureOptions) -> int:
    import matplotlib

    check_options(args)
    out_dir = Path(args.out_dir)
    results = Results(args.data_dir, args.filter, args.explorative_p_keep)
    for note in results.notes:
        print(f"note: {note}")
    if results.all_runs.empty:
        raise UsageError(f"no runs under {args.data_dir!r} (run_experiment.py writes them there with --output_dir)")
    if results.runs.empty:
        raise UsageError(f"no run under {args.data_dir!r} matches --filter {' '.join(args.filter)}")
    try:  # only now: a refusal above leaves no empty folder behind
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out_dir {args.out_dir!r} cannot be a folder of figures: {exc.strerror or exc}") from None
    summary = results.summary()
    write_atomic(out_dir / "summary.csv", lambda f: summary.to_csv(f, index=False), newline="")
    write_atomic(out_dir / "summary_by_config.csv", lambda f: results.aggregate().to_csv(f, index=False), newline="")
    print(f"read {len(results.runs)} runs from {args.data_dir}; wrote {out_dir / 'summary.csv'} and "
          f"{out_dir / 'summary_by_config.csv'} (mean, std, 95% interval, n over seeds of finished runs)")
    for path in write_diagnostics(args.data_dir, out_dir, run_dirs=results.runs["run_dir"]):
        print(f"wrote {path}")
    ctx = Context(results, args.smooth, args.explorative_p_keep, [], other_runs=args.other_runs)
    drawn = 0
    with matplotlib.rc_context(STYLE):
        for name, make in figures():
            if args.only and name not in args.only:
                continue
            fig = make(ctx)
            if isinstance(fig, str):
                print(f"skipped {name}: {fig}")
                continue
            paths = _save(fig, out_dir, name)
            drawn += 1
            print(f"wrote {paths[0]} (+ .pdf)")
    for note in ctx.notes:
        print(f"note: {note}")
    print(f"{drawn} figures in {out_dir}")
    for verdict in ctx.verdicts:
        print(f"verdict: {verdict.line()}")
    return 0
