"""run_view.py's command line: ``python run_view.py DATA_DIR [--out FILE]`` writes the episode viewer
(:mod:`icrl.viewer`) for the runs there."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

from ..errors import UsageError
from .parser import ArgumentParser, add_plugin_flag, parse_flags

DEFAULT_NAME = "viewer.html"


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(
        prog="run_view.py",
        description="Write one self-contained HTML file (no server, no network) to browse runs: accuracy and "
                    "diagnostic curves, and every step's input, context episodes, prediction and reward.")
    p.add_argument("data_dir", help="a run folder (holding config.json) or any folder above runs")
    p.add_argument("--out", default=None, help=f"the HTML file to write (default: DATA_DIR/{DEFAULT_NAME})")
    add_plugin_flag(p)
    return p


def file_size(size: int) -> str:
    """A file's size as a person reads it: bytes, KB or MB (1000s), never "0.0 MB"."""
    if size < 1000:
        return f"{size} bytes"
    if size < 1_000_000:
        return f"{size / 1000:.0f} KB"
    return f"{size / 1e6:.1f} MB"


def main(argv: Optional[Sequence[str]] = None) -> int:
    data_dir = None
    try:
        args = parse_flags(build_parser, argv)
        data_dir = Path(args.data_dir)
        if not data_dir.is_dir():
            raise UsageError(f"{str(data_dir)!r} is not a readable folder: "
                             "pass a run folder or a folder that holds runs")
        out = Path(args.out) if args.out else data_dir / DEFAULT_NAME
        from ..viewer.page import write_page  # pandas: only once the flags are checked

        path, data = write_page(data_dir, out)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: cannot read the runs under {str(data_dir)!r} ({exc.strerror or exc}): check "
              f"the folder's permissions", file=sys.stderr)
        return 2
    size = path.stat().st_size
    print(f"wrote {path} ({len(data['runs'])} runs, {data['steps']} steps, {file_size(size)}): open it in a browser")
    return 0
