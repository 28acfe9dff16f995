"""The study report as one self-contained HTML file (script, style and data inline; nothing is
fetched), and the episode viewer page of each run it links to (:mod:`icrl.viewer`)."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Sequence, Union

from ..errors import UsageError
from ..records import write_atomic
from ..viewer.page import HEAD, asset, fill_page

if TYPE_CHECKING:
    from ..analysis.results import Results

VIEWERS = "viewers"  # the folder beside the report that holds each run's viewer page

TEMPLATE = HEAD + """<section><ul id="notes"></ul></section>
<section id="leaderboard-section"><h2>Benchmark score per model</h2>
<p class="explain">The icrl_bench suite (docs/tools.md, "The benchmark score"): the mean gain of explorative ICRL over
zero-shot across the tasks, divided by the mean gain of supervised ICL (gold labels in context) over zero-shot, with a
95% bootstrap interval over seeds and items. 0: no better than zero-shot; 1: as good as supervised ICL. A model whose
supervised-ICL gap is within noise of 0 has no score (the ratio can take any value) and no rank: it comes last, its rank
column says why, and its gain and gap stand.</p>
<div id="leaderboard"></div></section>
<section><h2>Configurations</h2>
<p class="explain">One row per configuration (a run's settings less its seeds). Final and best test accuracy: mean
over the finished seeds with a 95% interval that stays in [0, 1] (Student-t on the empirical-logit scale).
Verdicts: paired on the test items both share, pooled over seeds
(the same seeds paired first): difference with a paired bootstrap 95% interval and McNemar's exact p; &#9650; above,
&#9660; below (p &lt; 0.05), = no difference beyond noise. A seed links to that run's episode viewer. Click a column to
sort; hover a row to find its curves.</p>
<div id="filters"></div><div id="shown"></div>
<table class="data" id="configs"></table></section>
<section><h2>Curves</h2>
<p class="explain">Per model and task: test accuracy (mean over seeds, band min-max) and a diagnostic curve per
configuration; the dashed line is the zero-shot runs' mean final test accuracy, the dotted line chance.</p>
<div id="panels"></div></section>
<script type="application/json" id="report-data">{data}</script>
<script>{js}</script>
</body></html>
"""


def render_report(data: dict[str, Any], title: str) -> str:
    """The page for ``report_data``'s output (no NaN in it: every missing number is null)."""
    return fill_page(TEMPLATE, title, data, asset(__package__, "report.css"), asset(__package__, "report.js"),
                     allow_nan=False)


def _write_page(data: dict[str, Any], title: str, f: IO[str]) -> None:
    from ..viewer.page import render_page

    f.write(render_page(data, title))


def write_viewers(results: Results, out: Path) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """Each run's episode viewer at ``<report folder>/viewers/<run id>/viewer.html``, from the
    records ``results`` read. Returns (run id -> its href relative to the report, run id -> its
    diagnostic curves, which the report shows too)."""
    from ..viewer.data import StringTable, run_payload

    links: dict[str, str] = {}
    curves: dict[str, dict[str, Any]] = {}
    for run_id, run_dir in zip(results.runs["run_id"], results.runs["run_dir"]):
        strings = StringTable()
        payload = run_payload(results.state(run_id), results.root, strings)
        data = {"source": str(run_dir), "strings": strings.strings, "runs": [payload],
                "steps": max(len(payload["train"]["prompt"]), 1)}
        page = out.parent / VIEWERS / run_id / "viewer.html"
        title = f"ICRL runs: {Path(run_id).name}"
        write_atomic(page, partial(_write_page, data, title))
        links[run_id] = Path(os.path.relpath(page, out.parent)).as_posix()
        curves[run_id] = payload["curves"]
    return links, curves


def write_report(data_dir: Union[str, Path], out_file: Union[str, Path], filters: Sequence[str] = (),
                 viewers: bool = True) -> tuple[Path, dict[str, Any]]:
    """Write the report of the runs under ``data_dir`` (``filters`` as run_draw_plots.py's
    --filter) to ``out_file``, atomically, with each run's viewer page unless ``viewers`` is False.
    Returns (path, data)."""
    from ..analysis.results import Results
    from .data import report_data

    results = Results(data_dir, filters)
    if results.all_runs.empty:
        raise UsageError(f"no runs under {str(data_dir)!r} (run_experiment.py writes them there with --output_dir)")
    if results.runs.empty:
        raise UsageError(f"no run under {str(data_dir)!r} matches --filter {' '.join(filters)}")
    out = Path(out_file)
    try:
        links, curves = write_viewers(results, out) if viewers else ({}, {})
        data = report_data(results, links, curves)
        name = Path(os.path.abspath(data_dir)).name
        write_atomic(out, lambda f: f.write(render_report(data, f"ICRL study report: {name}")))
    except OSError as exc:
        raise UsageError(f"cannot write {str(out)!r} ({exc.strerror or exc}): pass --out a file in a writable "
                         f"folder") from None
    return out, data
