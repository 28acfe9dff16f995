"""icrl.backends.hf_batches: a batch the device cannot hold is run again in halves."""

import pytest

from icrl.backends.hf_batches import in_batches
from icrl.errors import UsageError


class OutOfMemory(Exception):
    pass


def test_a_batch_too_large_is_halved_and_the_size_stays():
    done, tried = [], []

    def run(batch):
        tried.append(len(batch))
        if len(batch) > 3:
            raise OutOfMemory
        done.extend(batch)

    assert in_batches(list(range(10)), 8, run, OutOfMemory) == 2
    assert done == list(range(10)) and tried == [8, 4, 2, 2, 2, 2, 2]


def test_one_prompt_that_does_not_fit_is_one_line():
    def run(batch):
        raise OutOfMemory

    with pytest.raises(UsageError, match="does not fit in the device's memory even alone: lower --max_context_examples"):
        in_batches([1, 2], 2, run, OutOfMemory)
