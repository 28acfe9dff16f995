"""The automatic context size (icrl.run.size): its per-model cache, recomputed when unreadable; a window
too small for any prompt said before the model loads."""

from __future__ import annotations

import json

import pytest

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



def test_a_window_too_small_for_any_prompt_is_said_from_the_tokenizer_before_the_model_loads(tmp_path, capsys,
                                                                                            monkeypatch):
    import icrl.run.experiment
    from icrl.backends import embedded

    if not (embedded.cache_root() / "models" / "smollm2-135m" / "tokenizer.json").is_file():
        pytest.skip("the embedded model's tokenizer is not converted here")
    monkeypatch.setattr(icrl.run.experiment, "load_backend_of", lambda config: pytest.fail("loaded the model"))
    argv = tiny_argv(tmp_path, "--backend", "transformers", "--model_name", "smollm2-135m", "--max_model_len", "10")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: --max_model_len 10: too small") and "\n" not in err, err
    assert not any(tmp_path.iterdir())


def test_the_automatic_size_of_a_reasoning_run_leaves_room_for_its_reasoning(tmp_path):
    """Searched in the window less --reasoning (cached under that window), so a context of that
    size and the reasoning fit together; a run without --reasoning keeps the whole window."""
    from icrl.backends.fake import DEFAULT_MAX_MODEL_LEN, FakeChat
    from icrl.records import max_context_path
    from icrl.run.window import find_max_examples
    from icrl.tasks import load_task

    def automatic(*extra):
        args = tiny_argv(tmp_path, "--train_k", "2", "--test_k", "2", *extra)
        i = args.index("--max_context_examples")
        del args[i:i + 2]
        assert main(args) == 0

    window, reasoning = DEFAULT_MAX_MODEL_LEN, DEFAULT_MAX_MODEL_LEN // 2
    automatic()
    automatic("--reasoning", str(reasoning))
    sizes = json.loads(max_context_path(tmp_path, "smollm2-135m", TOY_TASK).read_text())["sizes"]
    task = load_task(TOY_TASK)
    assert sizes == {f"icrl@{window}": find_max_examples(FakeChat(window), task, window),
                     f"icrl@{window - reasoning}": find_max_examples(FakeChat(window), task, window - reasoning)}
    assert sizes[f"icrl@{window - reasoning}"] < sizes[f"icrl@{window}"]
