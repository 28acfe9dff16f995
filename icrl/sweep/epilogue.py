"""What run_sweep.py prints after a preset's sweep: the icrl_bench preset's score per model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, Optional, Union


def preset_epilogue(name: Optional[str], output_dirs: Iterable[str],
                    run_dirs: Iterable[Union[str, os.PathLike[str]]]) -> list[str]:
    """Lines to print after the sweep of preset ``name``: for icrl_bench, each model's benchmark
    score (icrl.analysis.benchmark) from the sweep's runs (``run_dirs``, under ``output_dirs``);
    nothing for the other presets."""
    if name != "icrl_bench":
        return []
    from ..analysis.benchmark import bench_scores
    from ..analysis.results import Results

    dirs = [Path(d) for d in run_dirs]
    lines = []
    for root in sorted(set(map(str, output_dirs))):
        lines += [f"benchmark score: {score.line()}" for score in bench_scores(Results(root), run_dirs=dirs)]
    return lines or ["benchmark score: none (no model finished zero-shot, supervised ICL and explorative ICRL on "
                     "one task of the suite)"]
