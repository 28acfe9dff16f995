"""Seconds per text of the embedding model that knn_embedding contexts use (all-MiniLM-L6-v2
through icrl.method.embeddings, one text per encode as the cache computes them), cache bypassed.

The first line says the OpenMP wait policy and torch's thread count it ran with (the harness's
default, icrl/infra/threads.py, unless the environment sets another). With --load N the texts
are encoded again with N busy processes competing for the cores (bench/busy.py; --apart: as
one job of a session of their own).

    python bench/encode.py [--texts 40] [--threads N] [--load N [--apart]]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from icrl.infra import threads  # noqa: E402

STARTED_WITH = threads.apply()  # before torch loads

from busy import add_apart_flag, busy, busy_text, load_text  # noqa: E402

from icrl.method.embeddings import Embedder  # noqa: E402

WORDS = "how far is the moon from earth and who wrote hamlet when does my card arrive".split()


def texts(n: int) -> list[str]:
    """n different short questions (a banking77 input is 10-20 words)."""
    return [" ".join(WORDS[(i + j) % len(WORDS)] for j in range(8 + i % 9)) + f" ({i})?" for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=40)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="encode again with N busy processes competing for the cores (default: 0, once)")
    add_apart_flag(parser)
    args = parser.parse_args()
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory(prefix="icrl-bench-encode-") as cache:
        embedder = Embedder(cache_dir=cache)
        embedder._encode("warm-up")  # loads the model
        print(f"{embedder.name}: torch threads {torch.get_num_threads()}, {STARTED_WITH}; {load_text()}")
        for extra in [0] + ([args.load] if args.load > 0 else []):
            with busy(extra, apart=args.apart):
                seconds = []
                for text in texts(args.texts):
                    start = time.perf_counter()
                    embedder._encode(text)
                    seconds.append(time.perf_counter() - start)
                print(f"-- {busy_text(extra, args.apart)}: {1000 * statistics.median(seconds):.1f} ms per text "
                      f"median, {1000 * max(seconds):.1f} ms at most, {len(seconds)} texts; {load_text()}", flush=True)


if __name__ == "__main__":
    main()
