"""Speed of run_count_tokens.py on a synthetic 10,000-step run.

Writes the records of finished ICRL runs without a model (real banking77 prompts, contexts
from the real strategy code, predictions right 60% of the time; see
icrl.analysis.synthetic.synthesize_run), then counts their tokens as run_count_tokens.py does and
prints the time, the throughput and where the time went.

    python bench/count_tokens_speed.py [--steps 10000] [--max_examples 40] [--test_every 500]
        [--test_k 500] [--strategies random_unbiased_only_positive approximate_only_positive]
        [--tokenizer smollm2-135m] [--full_check 200]

Data: --data_dir, else $ICRL_DATA_DIR, else ../shared/datasets next to the repository.
Llama 3.1: --tokenizer meta-llama/Meta-Llama-3.1-8B-Instruct with ICRL_TOKENIZERS_DIR set.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
if not os.environ.get("ICRL_TOKENIZERS_DIR") and (REPO.parent / "shared" / "tokenizers").is_dir():
    os.environ["ICRL_TOKENIZERS_DIR"] = str(REPO.parent / "shared" / "tokenizers")

from icrl.tasks import load_task  # noqa: E402
from icrl.analysis.counting import Replay, SegmentEncoder, count_run  # noqa: E402
from icrl.analysis.synthetic import synthesize_run  # noqa: E402
from icrl.analysis.tokens import TokenizerCache  # noqa: E402
from icrl.records import read_json, read_jsonl  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--task", default="banking77")
    p.add_argument("--data_dir", default=None)
    p.add_argument("--steps", type=int, default=10000)
    p.add_argument("--max_examples", type=int, default=40)
    p.add_argument("--test_every", type=int, default=500)
    p.add_argument("--test_k", type=int, default=500)
    p.add_argument("--strategies", nargs="+", default=["random_unbiased_only_positive", "approximate_only_positive"])
    p.add_argument("--max_contexts", type=int, default=8)
    p.add_argument("--tokenizer", default="smollm2-135m")
    p.add_argument("--out", default=None, help="where to write the synthetic runs (default: a temporary folder)")
    p.add_argument("--full_check", type=int, default=200,
                   help="also time whole-prompt tokenization of this many prompts and extrapolate (0: skip)")
    args = p.parse_args()

    data_dir = args.data_dir or os.environ.get("ICRL_DATA_DIR") or str(REPO.parent / "shared" / "datasets")
    task = load_task(args.task, data_dir)
    out = Path(args.out or tempfile.mkdtemp(prefix="icrl-count-bench-"))
    tokenizers = TokenizerCache()
    tic = time.perf_counter()
    chat = tokenizers.chat(args.tokenizer)
    print(f"tokenizer {args.tokenizer} loaded in {time.perf_counter() - tic:.1f} s")
    for strategy in args.strategies:
        p_keep = 0.1 if strategy.startswith("random") else 0.5
        tic = time.perf_counter()
        run_dir = synthesize_run(out, task, steps=args.steps, strategy=strategy, p_keep=p_keep,
                                 max_examples=args.max_examples, max_contexts=args.max_contexts,
                                 test_every=args.test_every, test_k=args.test_k, model_name=args.tokenizer)
        synth = time.perf_counter() - tic
        summary, _ = count_run(run_dir, chat)
        s = summary
        print(f"\n{strategy} (p_keep {p_keep}, max {args.max_examples} examples): {args.steps:,} steps, "
              f"records written in {synth:.1f} s")
        print(f"  {s['calls']:,} calls ({s['train_calls']:,} training, {s['test_calls']:,} test), "
              f"{s['prompt_tokens']:,} prompt tokens, {s['uncached_tokens']:,} uncached "
              f"({100 * s['uncached_tokens'] / s['prompt_tokens']:.1f}%)")
        print(f"  counted in {s['seconds']:.1f} s = {s['prompt_tokens'] / s['seconds']:,.0f} tokens/s "
              f"[{s['tokenization']}, {s['verified_prompts']} prompts checked whole; render {s['render_s']:.1f} s, "
              f"tokenize {s['encode_s']:.1f} s, prefix tree {s['prefix_tree_s']:.1f} s; "
              f"{s['cached_segments']:,} segments, {s['tree_nodes']:,} tree nodes]")
        if args.full_check:
            config = read_json(run_dir / "config.json")
            replay = Replay(config, read_jsonl(run_dir / "train.jsonl"), read_jsonl(run_dir / "test.jsonl"), chat)
            calls = list(replay.calls())[-args.full_check:]
            texts = [replay.render_call(call) for call in calls]
            tic = time.perf_counter()
            SegmentEncoder(chat, incremental=False).encode(texts)
            whole = time.perf_counter() - tic
            print(f"  whole-prompt tokenization of the last {len(texts)} prompts: {whole:.2f} s "
                  f"-> ~{whole / len(texts) * s['calls']:.0f} s for the run's {s['calls']:,} prompts")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak memory (max RSS) {rss:,.0f} MiB; records in {out}")


if __name__ == "__main__":
    main()
