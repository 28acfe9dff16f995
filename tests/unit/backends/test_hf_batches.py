"""icrl.backends.hf_batches: how many rows a batch has, and a batch the device cannot hold is run
again in halves."""

import types

import pytest

from icrl.backends.hf_batches import CPU_ROWS, HEADROOM, in_batches, row_bytes, rows_for
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


# Llama-3.1-8B's shape: 32 layers, 8 key-value heads of 128, hidden 4096, MLP 14336.
LLAMA_8B = types.SimpleNamespace(num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                                 hidden_size=4096, intermediate_size=14336)


def test_a_row_takes_its_keys_and_values_in_every_layer_and_one_layers_activations():
    # 2 x 32 x 8 x 128 = 65,536 key/value numbers and 4 x 4096 + 3 x 14336 = 59,392 activations a token
    assert row_bytes(LLAMA_8B, 2, 1) == (65_536 + 59_392) * 2
    assert row_bytes(LLAMA_8B, 2, 2_000) == 2_000 * row_bytes(LLAMA_8B, 2, 1)
    nested = types.SimpleNamespace(get_text_config=lambda: LLAMA_8B)  # a multimodal config's text part
    assert row_bytes(nested, 2, 10) == row_bytes(LLAMA_8B, 2, 10)


def test_rows_fill_the_free_memory_up_to_the_steps_prompts():
    one = row_bytes(LLAMA_8B, 2, 2_000)  # about 0.5 GB: an 8B model's row of 2,000 tokens in bfloat16
    free = 60 * 2**30  # an H100 with the weights loaded
    fit = int(free * HEADROOM) // one
    assert 90 < fit < 110
    assert rows_for(500, None, free, one) == fit
    assert rows_for(64, None, free, one) == 64  # never more than the step's prompts
    assert rows_for(64, None, one // 2, one) == 1  # not even one fits: one, and the halving says so
    assert rows_for(500, None, free, one, ceiling=16) == 16  # an out-of-memory error halved it to 16


def test_a_given_batch_size_or_a_cpu_is_a_constant():
    assert rows_for(500, 5, 10**12, 1) == 5 and rows_for(3, 5, None, 1) == 3
    assert rows_for(500, None, None, 1) == CPU_ROWS == 8
