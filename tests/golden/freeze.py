"""Regenerate the golden outputs under tests/golden/ from the code as it is now.

    ICRL_DATA_DIR=/path/to/datasets HF_HUB_OFFLINE=1 python tests/golden/freeze.py [--no-model] [CASE ...]

Goldens are regenerated ONLY for a deliberate, documented change of behaviour: a refactor
must reproduce them as they are. When you regenerate, say in the commit message which change
made which golden differ, and why (``git diff tests/golden`` shows it). ``--no-model`` keeps
the real-model (SmolLM2) golden as it is; names of cases regenerate only those.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository: `icrl` and `tests`

from tests.golden import cases  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", help="cases to regenerate (default: all)")
    p.add_argument("--no-model", action="store_true", help="leave the SmolLM2 golden as it is")
    a = p.parse_args()
    all_cases = {**cases.CASES, **({} if a.no_model else cases.MODEL_CASES)}
    chosen = a.names or list(all_cases) + ["help", "dry_run"]
    for name in chosen:
        texts = {"help": ("--help", cases.HELP, cases.SCRIPTS, cases.help_text),
                 "dry_run": ("--dry_run", cases.DRY_RUN, cases.PRESET_NAMES, cases.dry_run_text)}
        if name in texts:  # a text per script or preset
            what, folder, keys, text_of = texts[name]
            folder.mkdir(parents=True, exist_ok=True)
            for key in keys:
                (folder / f"{key}.txt").write_text(text_of(key), encoding="utf-8")
            print(f"froze {what} of", ", ".join(keys))
            continue
        commands = {**cases.CASES, **cases.MODEL_CASES}[name]
        with tempfile.TemporaryDirectory(prefix="icrl-golden-") as tmp:
            snap = cases.snapshot(commands, Path(tmp))
        cases.RECORDS.mkdir(parents=True, exist_ok=True)
        cases.golden_path(name).write_text(cases.dump(snap), encoding="utf-8")
        print(f"froze {name}: exit codes {[c['exit'] for c in snap['commands']]}, {len(snap['files'])} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
