"""How long the vLLM engine takes to start, with and without --enforce_eager, in one run.

Each start is in a process of its own (this script runs itself once per setting), in the order
given, so that neither start finds the other's compiled graphs warm in memory (vLLM's on-disk
compile cache, when it has one, is what a user's second start meets too). Prints each setting's
start time (``load_backend`` to a ready engine), the first call's time on a short prompt, and
the machine's load before and after. Needs vLLM (`make setup-vllm` on a CPU machine).

    python bench/vllm_start.py [--model smollm2-135m] [--order eager,graphs]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from busy import load_text  # noqa: E402

SETTINGS = {"eager": True, "graphs": False}


def start(model: str, eager: bool) -> dict:
    """One engine started in this process: seconds to ready, and its first call."""
    from icrl.backends import load_backend

    before = load_text()
    tic = time.perf_counter()
    backend = load_backend(model, backend="vllm", enforce_eager=eager, seed=0)
    ready = time.perf_counter() - tic
    tic = time.perf_counter()
    backend.predict([backend.render([{"role": "user", "content": "Query: where is my card?"}], "Intent:")],
                    ["card_arrival", "lost_or_stolen_card"], 0.0, 0)
    first = time.perf_counter() - tic
    out = {"enforce_eager": eager, "start_s": ready, "first_call_s": first, "load_before": before,
           "load_after": load_text(), "describe": backend.args.get("enforce_eager")}
    backend.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--order", default="eager,graphs", help="settings, comma-separated: eager, graphs")
    parser.add_argument("--one", choices=sorted(SETTINGS), help=argparse.SUPPRESS)  # the child's own setting
    args = parser.parse_args()
    if args.one:
        print(json.dumps(start(args.model, SETTINGS[args.one])))
        return 0
    order = [name.strip() for name in args.order.split(",") if name.strip()]
    unknown = [name for name in order if name not in SETTINGS]
    if unknown or not order:
        print(f"error: --order takes {', '.join(SETTINGS)}, got {args.order!r}", file=sys.stderr)
        return 2
    results = {}
    for name in order:
        child = subprocess.run([sys.executable, __file__, "--model", args.model, "--one", name],
                               capture_output=True, text=True, timeout=1200)
        if child.returncode != 0:
            print(f"error: the {name} start failed: {(child.stderr.strip().splitlines() or [''])[-1]}",
                  file=sys.stderr)
            return 1
        results[name] = json.loads(child.stdout.strip().splitlines()[-1])
    for name, r in results.items():
        print(f"{name:7} (--enforce_eager {r['enforce_eager']}): engine ready in {r['start_s']:6.1f} s, "
              f"first call {r['first_call_s']:5.2f} s  [{r['load_before']} -> {r['load_after']}]")
    if {"eager", "graphs"} <= set(results):
        ratio = results["graphs"]["start_s"] / results["eager"]["start_s"]
        print(f"start without --enforce_eager / with it: {ratio:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
