"""Counts in words (icrl/infra/words.py): one worker, two workers."""

from icrl.infra.words import plural


def test_one_is_singular_and_every_other_count_plural():
    assert [plural(n, "worker") for n in (0, 1, 2)] == ["0 workers", "1 worker", "2 workers"]
    assert plural(1.0, "GPU") == "1 GPU" and plural(0.5, "GPU") == "0.5 GPUs"
    assert plural(3, "batch", "batches") == "3 batches" and plural(1, "batch", "batches") == "1 batch"
