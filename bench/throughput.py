"""Prefill throughput of the transformers backend, next to what the machine's matmul can do.

Prints, for each prompt length, prompt tokens per second of a single forward pass of the
model on that many tokens (batch 1, no cache, as the backend computes a context prefix), and
the FLOP rate it implies (2 x parameters x tokens / time); then the machine's own float32
matrix-multiply rate (torch.matmul of two n x n matrices), so the ratio says how close the
backend gets to the hardware. The first line says the OpenMP wait policy and the thread count it
ran with (the harness's default, icrl/infra/threads.py, unless the environment sets another).

With --load N every figure is measured twice in one run: on the machine as it is, then with N
busy processes competing for the cores (bench/busy.py; stopped at the end), so the two compare;
--apart starts them as one job of a session of their own (another terminal's work).

    python bench/throughput.py [--lengths 512 2048] [--reps 3] [--matmul_size 2048] [--threads N] [--load N [--apart]]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from icrl.infra import threads  # noqa: E402

STARTED_WITH = threads.apply()  # before torch loads

from busy import add_apart_flag, busy, busy_text, load_text  # noqa: E402

from icrl.backends import load_backend  # noqa: E402
from prefix_reuse import timed_runs  # noqa: E402


def measure(args, backend, params: int, embedding: int) -> None:
    """The matmul rate, then prefill at each length (printed as they come)."""
    import torch

    model = backend.model
    n = args.matmul_size
    a = torch.randn(n, n, dtype=torch.float32)
    b = torch.randn(n, n, dtype=torch.float32)
    mm = timed_runs(lambda: torch.matmul(a, b), max(args.reps, 5))
    mm_rate = 2 * n ** 3 / min(mm) / 1e9
    print(f"float32 matmul {n}x{n}: {mm_rate:.1f} GFLOP/s best, "
          f"{2 * n ** 3 / statistics.median(mm) / 1e9:.1f} median of {len(mm)}")

    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    for length in args.lengths:
        ids = torch.randint(100, vocab, (1, length), generator=generator, device=backend.device)

        def forward():
            with torch.inference_mode():
                model(input_ids=ids, use_cache=False, logits_to_keep=1)

        times = timed_runs(forward, args.reps)
        best, median = min(times), statistics.median(times)
        implied = 2 * params * length / best / 1e9
        implied_body = 2 * (params - embedding) * length / best / 1e9
        print(f"prefill {length:5d} tokens: {length / best:7.1f} tokens/s best ({best:.2f} s), "
              f"{length / median:7.1f} median of {len(times)}; implied {implied:.1f} GFLOP/s "
              f"(2 x params x tokens / time) = {100 * implied / mm_rate:.0f}% of matmul; "
              f"{implied_body:.1f} GFLOP/s counting the non-embedding parameters only")
    print(f"   {load_text()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048], help="prompt lengths in tokens")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions (after one warm-up)")
    parser.add_argument("--matmul_size", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--load", type=int, default=0, metavar="N",
                        help="measure again with N busy processes competing for the cores (default: 0, once)")
    add_apart_flag(parser)
    args = parser.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    backend = load_backend(args.model, backend="transformers")
    model = backend.model
    params = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight.numel()
    print(f"model {args.model} on {backend.device} ({backend.dtype}), {params / 1e6:.1f}M parameters "
          f"({(params - embedding) / 1e6:.1f}M outside the token embedding), torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, {STARTED_WITH}, attention {model.config._attn_implementation}; {load_text()}")

    for extra in [0] + ([args.load] if args.load > 0 else []):
        with busy(extra, apart=args.apart):
            print(f"-- {busy_text(extra, args.apart)}; {load_text()}")
            measure(args, backend, params, embedding)
    print(f"at the end: {load_text()}")


if __name__ == "__main__":
    main()
