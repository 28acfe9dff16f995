"""What run_draw_plots.py draws (``FigureOptions``) and the checks of those settings, apart from
the drawing (:mod:`icrl.analysis.figures`): no pandas and no matplotlib here, so the script
refuses bad flags in one line before those load."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .figure_registry import FIGURES
from .verdict import DEFAULT_EXPLORATIVE_P_KEEP


@dataclass(frozen=True)
class FigureOptions:
    """What run_draw_plots.py draws (its flags, ``icrl.cli.figures``)."""

    data_dir: str = "data"
    out_dir: str = "plots"
    filter: tuple[str, ...] = ()
    smooth: int = 50
    explorative_p_keep: float = DEFAULT_EXPLORATIVE_P_KEEP
    other_runs: bool = False
    only: tuple[str, ...] = ()


def check_options(args: FigureOptions) -> None:
    """Refuse settings that cannot draw anything, in one line each (nothing read or written yet)."""
    if args.smooth < 1:
        raise UsageError(f"--smooth must be a window of at least 1 step, got {args.smooth}")
    if not 0 < args.explorative_p_keep <= 1:
        raise UsageError(f"--explorative_p_keep must be in (0, 1], got {args.explorative_p_keep}")
    names = list(FIGURES.names())
    unknown = [n for n in args.only if n not in names]
    if unknown:
        raise UsageError(f"unknown --only {unknown[0]!r}; choose from: {', '.join(names)}")
    out_dir = Path(args.out_dir)
    blocked = next((p for p in (out_dir, *out_dir.parents) if p.exists() and not p.is_dir()), None)
    if blocked is not None:
        raise UsageError(f"--out_dir {args.out_dir!r} cannot be a folder of figures: {str(blocked)!r} is a file")
