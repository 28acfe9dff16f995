"""The automatic context size (icrl.run.size): its per-model cache, recomputed when unreadable."""

from __future__ import annotations

import json

from helpers import TOY_TASK, tiny_argv
from icrl.cli.run import main


def test_corrupt_context_size_cache_is_recomputed(tmp_path, capsys):
    from icrl.records import max_context_path

    cache = max_context_path(tmp_path, "smollm2-135m", TOY_TASK)
    cache.parent.mkdir(parents=True)
    cache.write_text("{garbage")
    args = [a for a in tiny_argv(tmp_path, "--train_k", "2", "--test_k", "2")]
    i = args.index("--max_context_examples")
    del args[i:i + 2]
    assert main(args) == 0
    from icrl.backends.fake import DEFAULT_MAX_MODEL_LEN

    key = f"icrl@{DEFAULT_MAX_MODEL_LEN}"
    sizes = json.loads(cache.read_text())["sizes"]
    assert list(sizes) == [key] and sizes[key] > 0

