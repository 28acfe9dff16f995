"""One ICRL test step through `vllm serve` (the openai backend) vs the in-process vLLM engine.

The workload: `--prompts` banking77 test prompts (500 by default, a paper-sized test step)
after one shared ~`--context_tokens` ICRL context, 77 labels, greedy. Each side runs it on a
cold prefix cache (the in-process engine's cache reset; the server's through its dev-mode
/reset_prefix_cache), then again warm. Same engine settings on both sides (float32, eager, no
chunked prefill on the CPU). Prints wall times, prompt tokens/s, whether the predictions are
identical, and the machine's load (both share the machine's cores with whatever else runs).

    python bench/server.py [--prompts 500] [--context_tokens 1500] [--max_concurrency 32]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prefix_reuse import data_dir, icrl_context, machine_load, test_prompts, timed  # noqa: E402

from icrl.backends import load_backend  # noqa: E402
from icrl.backends.vllm_serve import VLLMServer  # noqa: E402
from icrl.tasks import load_task  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--data_dir", default=None)
    parser.add_argument("--prompts", type=int, default=500)
    parser.add_argument("--context_tokens", type=int, default=1500)
    parser.add_argument("--max_concurrency", type=int, default=32)
    args = parser.parse_args()
    task = load_task("banking77", data_dir(args.data_dir))
    print(f"start: {machine_load()}", flush=True)

    server = VLLMServer(args.model, dev_mode=True)
    _, server_start = timed(server.start)
    try:
        client = load_backend(args.model, backend="openai", base_url=server.base_url,
                              max_concurrency=args.max_concurrency)
        engine, engine_start = timed(load_backend, args.model, backend="vllm")
        print(f"start: vllm serve {server_start:.1f} s, in-process engine {engine_start:.1f} s; "
              f"openai backend in {client.api_mode} mode, {args.max_concurrency} requests at once", flush=True)
        context = icrl_context(task, engine, args.context_tokens)
        prompts = test_prompts(task, engine, context, args.prompts)
        tokens = sum(engine.count_tokens(p) for p in prompts)
        print(f"test step: {len(prompts)} prompts, {tokens} prompt tokens, {len(task.labels)} labels", flush=True)
        # First-call overheads (grammar compilation) on both sides, out of the timings.
        engine.predict(prompts[:1], task.labels, 0.0, 0)
        client.predict(prompts[:1], task.labels, 0.0, 0)

        results = {}
        for cache in ("cold", "warm"):
            if cache == "cold":
                engine.reset_cache()
            results[("in-process", cache)] = timed(engine.predict, prompts, task.labels, 0.0, 0)
            print(f"  in-process vLLM, {cache}: {results[('in-process', cache)][1]:.1f} s  ({machine_load()})", flush=True)
            if cache == "cold":
                server.reset_prefix_cache()
            results[("server", cache)] = timed(client.predict, prompts, task.labels, 0.0, 0)
            print(f"  vllm serve,      {cache}: {results[('server', cache)][1]:.1f} s  ({machine_load()})", flush=True)

        print(f"\n{'cache':<6} {'in-process':>12} {'server':>12} {'tok/s in-proc':>14} {'tok/s server':>13} "
              f"{'in-proc/server':>15}")
        for cache in ("cold", "warm"):
            t_e, t_s = results[("in-process", cache)][1], results[("server", cache)][1]
            print(f"{cache:<6} {t_e:>10.1f} s {t_s:>10.1f} s {tokens / t_e:>14.0f} {tokens / t_s:>13.0f} {t_e / t_s:>14.2f}x")
        same = all(results[(side, cache)][0] == results[("in-process", "cold")][0]
                   for side in ("in-process", "server") for cache in ("cold", "warm"))
        print(f"predictions identical (in-process vs server, cold and warm): {same}")
        print(f"end: {machine_load()}")
        engine.close()
        client.close()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
