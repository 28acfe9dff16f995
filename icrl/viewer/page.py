"""One self-contained HTML page: the viewer's script, style and data inline (no network)."""

from __future__ import annotations

import html
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any, Union

from ..errors import UsageError
from .data import viewer_data

HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>{css}</style></head>
<body>
<header><h1>{title}</h1><div class="source" id="source"></div></header>
"""  # a page's head and header: the viewer's and the report's

TEMPLATE = HEAD + """<section><h2>Runs</h2><div id="runs"></div></section>
<section id="curves"><h2>Curves <span class="muted">(click a chart to go to a step)</span></h2>
<div class="charts" id="charts"></div></section>
<section id="browser"><h2>Step browser</h2>
<div class="controls">
<button id="prev-test" title="previous test step">&#x21E4; test</button>
<button id="prev" title="previous step">&#x2190;</button>
<input type="range" id="step-slider" min="0" max="0" value="0" aria-label="step">
<button id="next" title="next step">&#x2192;</button>
<button id="next-test" title="next test step">test &#x21E5;</button>
<label>step <input type="number" id="step-input" min="0" value="0"></label>
<input type="search" id="search" placeholder="search inputs, answers, predictions" aria-label="search">
</div>
<div id="search-results"></div>
<div id="columns"></div></section>
<script type="application/json" id="viewer-data">{data}</script>
<script>{js}</script>
</body></html>
"""


def asset(package: str, name: str) -> str:
    """A file shipped in ``package`` (a page's script or style)."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def fill_page(template: str, title: str, data: dict[str, Any], css: str, js: str, allow_nan: bool = True) -> str:
    """A self-contained page: ``template`` with the title, the style, the shared DOM helper
    (dom.js) before ``js``, and ``data`` as JSON with every ``<`` escaped, so that no string in
    the records can end the script element."""
    payload = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=allow_nan).replace("<", "\\u003c")
    return template.format(title=html.escape(title), css=css, js=asset(__package__, "dom.js") + js, data=payload)


def render_page(data: dict[str, Any], title: str = "ICRL episode viewer") -> str:
    """The page for ``viewer_data``'s output."""
    return fill_page(TEMPLATE, title, data, asset(__package__, "viewer.css"), asset(__package__, "viewer.js"))


def write_page(data_dir: Union[str, Path], out_file: Union[str, Path]) -> tuple[Path, dict[str, Any]]:
    """Write the viewer for the runs under ``data_dir`` to ``out_file`` (atomically: a killed
    write leaves the old file or none). Returns (path, data). A file that cannot be written
    raises UsageError."""
    data = viewer_data(data_dir)
    if not data["runs"]:
        raise UsageError(f"no runs under {str(data_dir)!r} (no readable config.json below it): pass the folder "
                         f"run_experiment.py wrote (its --output_dir, data/ by default)")
    text = render_page(data, f"ICRL runs: {Path(data_dir).name or data_dir}")
    try:
        return _write(text, Path(out_file)), data
    except OSError as exc:
        raise UsageError(f"cannot write {str(out_file)!r} ({exc.strerror or exc}): pass --out a file in a "
                         f"writable folder") from None


def _write(text: str, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out
