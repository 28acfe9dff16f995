"""Backends: the pure constrained-decoding logic, and the transformers backend on the real
SmolLM2-135M model (marked `model`; deselect with `-m "not model"`).

The real-model tests use short ICRL contexts built from real banking77 examples, so the whole
file runs in well under two minutes on two CPU cores.
"""

from __future__ import annotations

import functools
import random

import numpy as np
import pytest

from helpers import reasoning_run_resumes

from icrl.backends import BACKEND_CHOICES, Backend, load_backend, resolve_backend_name
from icrl.backends.chat import load_chat_tokenizer
from icrl.backends.constrained import LabelTrie, choose, prompt_rngs
from icrl.method.episode import Episode
from icrl.errors import UsageError
from icrl.method.prompts import build_messages

EOT = 2

# ----------------------------------------------------------------- choosing a backend --


def test_unknown_backend_name_raises_usage_error():
    with pytest.raises(UsageError, match="unknown backend 'tensorflow'"):
        load_backend("smollm2-135m", backend="tensorflow")
    with pytest.raises(UsageError):
        resolve_backend_name("")


def test_backend_choices():
    assert BACKEND_CHOICES == ["auto", "transformers", "vllm", "openai", "anthropic", "gemini", "fake"]
    assert resolve_backend_name("transformers") == "transformers"
    assert resolve_backend_name("vllm") == "vllm"


def test_unknown_model_name_raises_usage_error():
    with pytest.raises(UsageError, match="unknown model 'no-such-model'"):
        load_backend("no-such-model", backend="transformers")
    with pytest.raises(UsageError, match="unknown model"):
        load_chat_tokenizer("no-such-model")


def test_unknown_hub_model_raises_usage_error_offline():
    from huggingface_hub import constants

    if not constants.HF_HUB_OFFLINE:
        pytest.skip("needs HF_HUB_OFFLINE=1 (the lookup must not reach the network)")
    with pytest.raises(UsageError, match="cannot get 'no-such-org/no-such-model'"):
        load_backend("no-such-org/no-such-model", backend="transformers")


def test_bad_batch_size_raises_usage_error():
    with pytest.raises(UsageError, match="batch_size"):
        load_backend("smollm2-135m", backend="transformers", batch_size=0)


# ------------------------------------------------------------------------ label trie --


def make_trie():
    # "card" is a prefix of "card arrival" and "card not working" (in tokens too).
    labels = ["card", "card arrival", "card not working", "top up"]
    ids = [[10, 11], [10, 11, 20], [10, 11, 30, 31], [40]]
    return labels, LabelTrie(labels, ids, EOT)


def walk(trie, tokens):
    node, label = trie.root, None
    for token in tokens:
        assert label is None, "walked past a finished label"
        node, label = trie.advance(node, token)
    return node, label


def test_trie_options_and_labels_that_are_prefixes_of_others():
    labels, trie = make_trie()
    assert trie.options(trie.root) == [10, 40]
    node, label = walk(trie, [10])
    assert label is None and trie.options(node) == [11]
    node, label = walk(trie, [10, 11])
    # "card" may end here (end-of-turn) or go on; children sorted, end-of-turn last.
    assert label is None and trie.options(node) == [20, 30, EOT]
    assert walk(trie, [10, 11, EOT])[1] == "card"
    # A label with no longer continuation is finished at once: no end-of-turn step needed.
    assert walk(trie, [10, 11, 20])[1] == "card arrival"
    assert walk(trie, [40])[1] == "top up"
    node, label = walk(trie, [10, 11, 30])
    assert label is None and trie.options(node) == [31]
    assert walk(trie, [10, 11, 30, 31])[1] == "card not working"
    assert trie.max_depth == 5  # longest label + its end-of-turn token


def test_trie_end_of_turn_only_where_a_label_ends():
    _, trie = make_trie()
    assert EOT not in trie.options(trie.root)
    assert EOT not in trie.options(walk(trie, [10])[0])
    with pytest.raises(KeyError):
        trie.advance(walk(trie, [10])[0], EOT)  # "c" alone is not a label


def test_trie_every_path_reaches_exactly_one_label():
    labels, trie = make_trie()
    found = []

    def explore(node, depth):
        assert depth <= trie.max_depth
        for token in trie.options(node):
            nxt, label = trie.advance(node, token)
            if label is None:
                explore(nxt, depth + 1)
            else:
                found.append(label)

    explore(trie.root, 1)
    assert sorted(found) == sorted(labels)


@pytest.mark.parametrize("labels, ids, message", [
    (["a", "a"], [[1], [2]], "distinct"),
    (["a", "b"], [[1, 2], [1, 2]], "same tokens"),
    (["a", "b"], [[1], []], "no tokens"),
])
def test_trie_rejects_bad_labels(labels, ids, message):
    with pytest.raises(ValueError, match=message):
        LabelTrie(labels, ids, EOT)


# --------------------------------------------------------------------------- choose --


def test_greedy_picks_the_best_allowed_token_not_the_best_token():
    logits = np.array([0.0, 9.0, 1.0, 3.0, 2.0])
    assert choose(logits, [2, 3, 4], 0.0, np.random.default_rng(0)) == 3


def test_greedy_ties_go_to_the_smallest_id():
    logits = np.zeros(50)
    logits[[7, 12, 30]] = 5.0
    rng = np.random.default_rng(0)
    assert choose(logits, [12, 30, 7], 0.0, rng) == 7
    # The end-of-turn option comes last in trie.options() even when its id is the smallest.
    logits[EOT] = 5.0
    assert choose(logits, [7, 12, 30, EOT], 0.0, rng) == EOT
    assert choose(logits, [12, 30], 0.0, rng) == 12


def test_every_choice_uses_one_draw_so_streams_stay_aligned():
    logits = np.linspace(0, 1, 10)
    greedy, sampled, fresh = (np.random.default_rng(5) for _ in range(3))
    choose(logits, [1, 2, 3], 0.0, greedy)
    choose(logits, [1, 2, 3], 1.0, sampled)
    fresh.random()
    assert greedy.random() == sampled.random() == fresh.random()


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_sampling_follows_softmax_over_allowed_tokens(temperature):
    rng = np.random.default_rng(1234)
    logits = rng.normal(0, 2, size=64)
    allowed = [3, 8, 15, 16, 42, 63]
    logits[5] = 100.0  # a disallowed token with by far the highest logit is never chosen
    z = logits[allowed] / temperature
    expected = np.exp(z - z.max())
    expected /= expected.sum()
    draws = 40_000
    gen = np.random.default_rng(7)
    picks = [choose(logits, allowed, temperature, gen) for _ in range(draws)]
    assert set(picks) <= set(allowed)
    freq = np.array([picks.count(t) for t in allowed]) / draws
    # 4.5 standard errors of a frequency at worst (p = 0.5): 0.011
    np.testing.assert_allclose(freq, expected, atol=4.5 * np.sqrt(0.25 / draws))


def test_temperature_zero_and_tiny_temperature_agree():
    logits = np.array([1.0, 2.0, 2.5, 0.5])
    gen = np.random.default_rng(0)
    assert all(choose(logits, [0, 1, 2, 3], 1e-4, gen) == 2 for _ in range(100))


def test_prompt_rngs_depend_on_seed_and_position_only():
    a, b = prompt_rngs(3, 4), prompt_rngs(3, 6)
    for x, y in zip(a, b):
        assert x.random() == y.random()
    first = [g.random() for g in prompt_rngs(3, 4)]
    assert len(set(first)) == 4
    assert first != [g.random() for g in prompt_rngs(4, 4)]


# ============================================================== the real SmolLM2 model ==

LABELS_WITH_PREFIXES = ["card", "card arrival", "card not working", "top up", "top up failed", "transfer"]


class SimpleTask:
    prediction_prefix = "Intent:"
    description = ""


@pytest.fixture
def backend(smollm2):
    """The session's SmolLM2 backend; settings a test changes are restored afterwards."""
    settings = (smollm2.prefix_reuse, smollm2.batch_size)
    yield smollm2
    smollm2.prefix_reuse, smollm2.batch_size, smollm2._ceiling = *settings, None


@functools.lru_cache(maxsize=None)
def _load_banking(path):
    from icrl.tasks import load_task

    return load_task("banking77", path)


@pytest.fixture
def banking(data_dir):
    """The real banking77 task (77 labels), loaded once per session."""
    return _load_banking(str(data_dir))


def icrl_context(task, size, seed=0):
    """Training episodes as ICRL records them: a model right about half the time."""
    rng = random.Random(seed)
    context = []
    for example in task.training_examples(size=size, seed=seed):
        answer = task.answer(example)
        prediction = answer if rng.random() < 0.5 else rng.choice(task.labels)
        correct = int(prediction == answer)
        context.append(Episode(task.prompt(example), prediction, correct, answer, correct))
    return context


def render_step(backend, task, context, count, seed=0):
    """Rendered prompts of one test step: `count` test inputs after the same context."""
    prompts = []
    for example in task.test_examples(size=count, seed=seed):
        messages, prefix = build_messages(task, context, task.prompt(example), "icrl",
                                          supports_system_role=backend.supports_system_role)
        prompts.append(backend.render(messages, prefix))
    return prompts


def run(backend, prompts, labels, temperature, seed=0, *, reuse=True, batch_size=8, cold=False):
    backend.prefix_reuse, backend.batch_size = reuse, batch_size
    if cold:
        backend.reset_cache()
    before = dict(backend.stats)
    out = backend.predict(prompts, labels, temperature=temperature, seed=seed)
    return out, {k: backend.stats[k] - before[k] for k in before}


def reference_predict(backend, prompts, labels, temperature, seed):
    """The constrained decoding done the plain way: every step is a full forward of the whole
    token sequence, one prompt at a time, no cache, no batching, no padding."""
    import torch

    chat = backend.chat
    prefix = prompts[0].rsplit("\n", 1)[-1]
    trie = LabelTrie(labels, chat.label_token_ids(labels, prefix), chat.eot_token_id)
    out, end_choices = [], 0
    for prompt, rng in zip(prompts, prompt_rngs(seed, len(prompts))):
        ids = chat.encode(prompt)
        node, label = trie.root, None
        while label is None:
            options = trie.options(node)
            if len(options) == 1:
                token = options[0]
            else:
                with torch.inference_mode():
                    logits = backend.model(input_ids=torch.tensor([ids])).logits[0, -1].float().numpy()
                token = choose(logits, options, temperature, rng)
                end_choices += chat.eot_token_id in options
            node, label = trie.advance(node, token)
            ids.append(token)
        out.append(label)
    return out, end_choices


@pytest.mark.model
def test_backend_protocol_and_description(backend):
    assert isinstance(backend, Backend)
    assert backend.name == "transformers" and backend.model_name == "smollm2-135m"
    assert backend.eot_token == "<|im_end|>" and backend.supports_system_role
    assert backend.max_model_len == 8192
    info = backend.describe()
    assert info["backend"] == "transformers" and info["device"] == "cpu" and info["dtype"] == "float32"
    assert backend.predict([], ["a", "b"], temperature=0.0, seed=0) == []


@pytest.mark.model
def test_render_uses_the_model_template_and_ends_with_the_prefix(backend):
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "Query: hi"}]
    text = backend.render(messages, "Intent:")
    assert text == ("<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQuery: hi<|im_end|>\n"
                    "<|im_start|>assistant\nIntent:")
    template = backend.chat.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == template + "Intent:"
    # An ICRL prompt: past predictions are assistant turns closed by the end-of-turn token.
    context = [Episode("Query: card lost", "card arrival", 0, "lost or stolen card", 0)]
    messages, prefix = build_messages(SimpleTask, context, "Query: top up?", "icrl")
    text = backend.render(messages, prefix)
    assert text.endswith("Query: top up?<|im_end|>\n<|im_start|>assistant\nIntent:")
    assert "<|im_start|>assistant\nIntent: card arrival<|im_end|>\n" in text
    assert text.startswith("<|im_start|>system\nYou are an useful assistant.")


@pytest.mark.model
def test_count_tokens_matches_the_tokenizer(backend, banking):
    tokenizer = backend.chat.tokenizer
    prompts = render_step(backend, banking, icrl_context(banking, 5), 3)
    for text in prompts + ["", "Intent: card arrival", "<|im_start|>user\nhi<|im_end|>"]:
        assert backend.count_tokens(text) == len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert backend.count_tokens("<|im_start|><|im_end|>") == 2  # special tokens are single tokens
    messages, _ = build_messages(banking, icrl_context(banking, 5), "Query: hi", "icrl")
    encoded = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=True)
    ids = encoded["input_ids"] if hasattr(encoded, "keys") else encoded
    assert backend.count_tokens(backend.render(messages, "")) == len(ids)


@pytest.mark.model
def test_prompt_longer_than_the_model_raises_usage_error(backend):
    prompt = backend.render([{"role": "user", "content": "word " * 9000}], "Intent:")
    with pytest.raises(UsageError, match="more than the model"):
        backend.predict([prompt], ["a", "b"], temperature=0.0, seed=0)


@pytest.mark.model
@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_every_output_is_a_label_of_a_77_label_task(backend, banking, temperature):
    assert len(banking.labels) == 77
    prompts = render_step(backend, banking, icrl_context(banking, 12), 16)
    out, _ = run(backend, prompts, banking.labels, temperature, seed=1)
    assert len(out) == len(prompts)
    assert all(label in banking.labels for label in out)


@pytest.mark.model
def test_same_seed_same_outputs_and_different_seeds_differ(backend, banking):
    prompt = render_step(backend, banking, icrl_context(banking, 8), 1, seed=3)[0]
    prompts = [prompt] * 50  # 50 draws for the same prompt: one generator per position
    a, _ = run(backend, prompts, banking.labels, 1.0, seed=0, batch_size=25)
    b, _ = run(backend, prompts, banking.labels, 1.0, seed=0, batch_size=25, cold=True)
    c, _ = run(backend, prompts, banking.labels, 1.0, seed=1, batch_size=25)
    assert a == b
    assert a != c
    assert len(set(a)) > 1  # positions draw independently
    assert all(label in banking.labels for label in a + c)


@pytest.mark.model
def test_outputs_do_not_depend_on_batch_size(backend, banking):
    prompts = render_step(backend, banking, icrl_context(banking, 12), 12)
    for temperature in (1.0, 0.0):
        one, _ = run(backend, prompts, banking.labels, temperature, seed=2, batch_size=1)
        for batch_size in (8, 5):
            out, _ = run(backend, prompts, banking.labels, temperature, seed=2, batch_size=batch_size)
            assert out == one, f"batch_size {batch_size} vs 1 at temperature {temperature}"


@pytest.mark.model
def test_a_batch_the_device_cannot_hold_is_halved_and_the_labels_do_not_change(backend, banking, monkeypatch):
    """A forced memory limit (more than 2 rows in a forward pass is out of memory): the batch of
    8 is halved until it fits, the smaller size stays, and the labels (sampled, so every random
    stream matters) and the generated texts are those of batch size 1."""
    import torch

    prompts = render_step(backend, banking, icrl_context(banking, 6), 8)
    expected, _ = run(backend, prompts, banking.labels, 1.0, seed=5, batch_size=1, cold=True)
    written = backend.generate(prompts[:4], 6, 1.0, 5)
    forward = backend._forward

    def limited(input_ids, *args, **kwargs):
        if len(input_ids) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (forced by the test)")
        return forward(input_ids, *args, **kwargs)

    monkeypatch.setattr(backend, "_forward", limited)
    got, _ = run(backend, prompts, banking.labels, 1.0, seed=5, batch_size=8, cold=True)
    assert got == expected and backend.batch_size == 2
    backend.batch_size = 8
    assert backend.generate(prompts[:4], 6, 1.0, 5) == written and backend.batch_size == 2


@pytest.mark.model
def test_a_batch_size_chosen_from_free_memory_fills_it_and_keeps_the_labels(backend, banking, monkeypatch):
    """--batch_size not given, a device that says it has room for 3 rows of this step: batches
    of 3 (never more), labels and generated texts those of batch size 1; an out-of-memory error
    then halves the chosen size, which stays the ceiling."""
    import torch

    from icrl.backends.hf_batches import HEADROOM, row_bytes

    prompts = render_step(backend, banking, icrl_context(banking, 6), 8)
    expected, _ = run(backend, prompts, banking.labels, 1.0, seed=5, batch_size=1, cold=True)
    written = backend.generate(prompts[:4], 6, 1.0, 5)
    longest = max(len(backend.chat.encode_prompt(p)) for p in prompts)
    room = 3 * row_bytes(backend.model.config, 4, longest + 40) / HEADROOM  # 3 rows of this step, float32
    monkeypatch.setattr(backend, "_free_bytes", lambda: int(room))
    forward, rows = backend._forward, []

    def counted(input_ids, *args, **kwargs):
        rows.append(len(input_ids))
        return forward(input_ids, *args, **kwargs)

    monkeypatch.setattr(backend, "_forward", counted)
    got, _ = run(backend, prompts, banking.labels, 1.0, seed=5, batch_size=None, cold=True)
    assert got == expected and max(rows) == 3 and backend.batch_size is None
    rows.clear()
    assert backend.generate(prompts[:4], 6, 1.0, 5) == written and max(rows) == 3

    def limited(input_ids, *args, **kwargs):
        if len(input_ids) > 1:
            raise torch.OutOfMemoryError("CUDA out of memory (forced by the test)")
        return forward(input_ids, *args, **kwargs)

    monkeypatch.setattr(backend, "_forward", limited)
    got, _ = run(backend, prompts, banking.labels, 1.0, seed=5, batch_size=None, cold=True)
    assert got == expected and backend._ceiling == 1 and backend.batch_size is None


@pytest.mark.model
def test_prefix_reuse_gives_identical_outputs(backend, banking):
    """A test step (many prompts after one long ICRL context), with and without reuse; then
    a step whose context extends the first (as approximate strategies do); then one whose
    context is shorter (the stored prefix is cropped)."""
    context = icrl_context(banking, 16)
    first = render_step(backend, banking, context[:12], 8)
    reused, stats = run(backend, first, banking.labels, 0.0, cold=True)
    full, full_stats = run(backend, first, banking.labels, 0.0, reuse=False)
    assert reused == full
    assert full_stats["prompt_tokens"] == stats["prompt_tokens"] > 8 * 400
    assert full_stats["computed_tokens"] >= full_stats["prompt_tokens"]
    assert stats["computed_tokens"] < full_stats["computed_tokens"] / 4

    # Extended context: only the new episodes and the suffixes are computed.
    second = render_step(backend, banking, context, 4, seed=1)
    reused, extend_stats = run(backend, second, banking.labels, 1.0, seed=4)
    full, _ = run(backend, second, banking.labels, 1.0, seed=4, reuse=False)
    assert reused == full
    _, cold_stats = run(backend, second, banking.labels, 1.0, seed=4, cold=True)
    assert extend_stats["computed_tokens"] < cold_stats["computed_tokens"] - 300

    # Shorter context: the stored prefix is cropped, not recomputed.
    third = render_step(backend, banking, context[:6], 4, seed=2)
    reused, crop_stats = run(backend, third, banking.labels, 0.0)
    full, _ = run(backend, third, banking.labels, 0.0, reuse=False)
    assert reused == full
    assert crop_stats["computed_tokens"] < 4 * 50


@pytest.mark.model
@pytest.mark.parametrize("temperature, seed", [(0.0, 0), (1.0, 11)])
def test_batched_cached_decoding_matches_plain_decoding(backend, banking, temperature, seed):
    """Labels that are prefixes of other labels (the end-of-turn choice), a short context, and
    prompts of different lengths (padding): the backend must pick what plain full forwards pick."""
    prompts = render_step(backend, banking, icrl_context(banking, 3), 6, seed=5)
    expected, end_choices = reference_predict(backend, prompts, LABELS_WITH_PREFIXES, temperature, seed)
    assert end_choices > 0, "no prompt reached a label that may end or go on"
    out, _ = run(backend, prompts, LABELS_WITH_PREFIXES, temperature, seed=seed, batch_size=4)
    assert out == expected
    out, _ = run(backend, prompts, LABELS_WITH_PREFIXES, temperature, seed=seed, reuse=False, batch_size=3)
    assert out == expected


# -- reasoning (--reasoning): free generation, then the label -------------------------------------
def test_generate_is_seeded_per_prompt_and_stops_before_the_marker(smollm2):
    messages = [{"role": "system", "content": "Classify the intent. Think, then write 'Intent:' and the label."},
                {"role": "user", "content": "Message: my refund never arrived"}]
    frame = smollm2.reasoning_frame(messages, "Intent:")
    assert not smollm2.thinks and frame.stop == "Intent:" and frame.prompt.endswith("assistant\n")
    both = smollm2.generate([frame.prompt, frame.prompt + "Well"], 12, 1.0, 5, stop=[frame.stop])
    alone = smollm2.generate([frame.prompt], 12, 1.0, 5, stop=[frame.stop])
    assert both[0] == alone[0]  # a prompt's text does not depend on what else is in the call
    assert all(1 <= g.tokens <= 12 and "Intent:" not in g.text for g in both)
    assert smollm2.generate([frame.prompt], 12, 0.0, 1)[0] == smollm2.generate([frame.prompt], 12, 0.0, 2)[0]


def test_a_reasoning_run_on_the_model_resumes_to_the_same_records(smollm2, tmp_path):
    whole, resumed = reasoning_run_resumes(smollm2, tmp_path)
    assert resumed == whole
    assert all(isinstance(r["reasoning"], str) and r["reasoning_tokens"] >= 1 for r in whole["train"])
    assert all(len(r["reasoning"]) == 2 for r in whole["test"])


@pytest.mark.model
def test_bfloat16_on_a_cpu_keeps_float32s_greedy_labels(backend, banking):
    """--dtype bfloat16 on a CPU (1.5x float32 on the demo's retrieval run where the cores
    multiply bfloat16 natively: docs/benchmarks.md): the model loads in bfloat16, and a test
    step's greedy labels are mostly float32's, not another model's (here 13 of 16; 57 of 64 in
    the benchmark's step after a 1,500-token context): bfloat16 rounds the logits enough to turn
    near ties."""
    import torch

    half = load_backend("smollm2-135m", "transformers", dtype="bfloat16")
    assert half.describe()["dtype"] == "bfloat16" and half.model.dtype == torch.bfloat16
    prompts = render_step(backend, banking, icrl_context(banking, 8), 16)
    full, _ = run(backend, prompts, banking.labels, 0.0)
    mine, _ = run(half, prompts, banking.labels, 0.0)
    same = sum(a == b for a, b in zip(mine, full))
    print(f"bfloat16 kept {same} of {len(full)} float32 greedy labels")
    assert same >= 10, (mine, full)
