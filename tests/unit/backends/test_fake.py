"""The fake backend (icrl/backends/fake.py): deterministic, no model, behind the Backend protocol."""

import os
import subprocess
import sys

import pytest

from icrl.backends import BACKEND_CHOICES, Backend, Call, backend_spec, load_backend, predict_calls
from icrl.backends.fake import DELAY_ENV, INTERRUPT_ENV, FakeBackend, fake_label
from icrl.errors import UsageError

LABELS = ["abbreviation", "entity", "description", "human", "location", "numeric"]


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.delenv(INTERRUPT_ENV, raising=False)
    monkeypatch.delenv(DELAY_ENV, raising=False)
    return load_backend("fake", backend="fake")


def test_registered_and_a_backend(fake):
    assert "fake" in BACKEND_CHOICES
    assert isinstance(fake, FakeBackend) and isinstance(fake, Backend)
    assert fake.describe() == {"backend": "fake", "model_name": "fake", "max_model_len": 4096,
                               "supports_system_role": True, "eot_token": "<|end|>",
                               "published_tokenization": False}


def test_takes_its_own_option_and_refuses_the_others(monkeypatch):
    monkeypatch.delenv(INTERRUPT_ENV, raising=False)
    backend = load_backend("x", backend="fake", max_model_len=300)
    assert backend.max_model_len == 300 and backend.chat.max_model_len == 300
    with pytest.raises(UsageError, match="the fake backend takes no option 'batch_size', 'device'; its options: "
                                         "max_model_len"):
        load_backend("x", backend="fake", max_model_len=300, device="cuda", batch_size=3)


def test_render_and_count(fake):
    text = fake.render([{"role": "system", "content": "Pick a label."},
                        {"role": "user", "content": "Question: Who?"}], "Intent:")
    assert text == "<|system|>\nPick a label.<|end|>\n<|user|>\nQuestion: Who?<|end|>\n<|assistant|>\nIntent:"
    assert fake.count_tokens("Question: Who is it?") == 6  # 4 words, ':' and '?'
    assert fake.count_tokens("") == 0


def test_predict_is_a_pure_function_of_prompt_labels_seed(fake):
    prompts = [f"prompt {i}" for i in range(50)]
    first = fake.predict(prompts, LABELS, 1.0, 7)
    assert first == fake.predict(prompts, LABELS, 1.0, 7)
    assert set(first) <= set(LABELS) and len(set(first)) > 1
    assert first != fake.predict(prompts, LABELS, 1.0, 8)  # another seed, other samples
    assert first == [fake_label(p, LABELS, 7) for p in prompts]
    # greedy ignores the seed, as a real model's greedy choice does
    assert fake.predict(prompts, LABELS, 0.0, 1) == fake.predict(prompts, LABELS, 0.0, 2)
    assert fake.predict(["x"], ["only"], 1.0, 0) == ["only"]


def test_same_labels_in_another_process():
    """SHA-256, not Python's salted hash(): another interpreter with another hash seed agrees."""
    code = ("from icrl.backends.fake import fake_label; "
            f"print([fake_label(f'p{{i}}', {LABELS!r}, 5) for i in range(20)])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.strip()
    assert out == repr([fake_label(f"p{i}", LABELS, 5) for i in range(20)])


def test_counts_calls_and_prompts_and_reports_progress(fake):
    seen = []
    fake.predict(["a", "b", "c"], LABELS, 1.0, 0, progress=seen.append)
    outs = predict_calls(fake, [Call(["a"], LABELS, 1.0, 0, key="r1"), Call(["b", "c"], LABELS, 1.0, 1, key="r2")])
    assert seen == [3]
    assert (fake.calls, fake.prompts) == (3, 6)
    assert outs == [fake.predict(["a"], LABELS, 1.0, 0), fake.predict(["b", "c"], LABELS, 1.0, 1)]


def test_a_prompt_longer_than_the_window_is_a_usage_error(monkeypatch):
    from icrl.errors import UsageError

    monkeypatch.delenv(INTERRUPT_ENV, raising=False)
    backend = load_backend("fake", backend="fake", max_model_len=10)
    with pytest.raises(UsageError, match="lower --max_context_examples"):
        backend.predict(["one two three four five six seven eight nine"], LABELS, 1.0, 0)


def test_interrupts_at_the_given_call(monkeypatch):
    monkeypatch.setenv(INTERRUPT_ENV, "1")
    backend = load_backend("fake", backend="fake")
    backend.predict(["a"], LABELS, 1.0, 0)
    with pytest.raises(KeyboardInterrupt):
        backend.predict(["a"], LABELS, 1.0, 0)
    assert backend.predict(["a"], LABELS, 1.0, 0) == [fake_label("a", LABELS, 0)]


def test_delay_slows_every_call(monkeypatch):
    import time

    monkeypatch.delenv(INTERRUPT_ENV, raising=False)
    monkeypatch.setenv(DELAY_ENV, "0.2")
    backend = load_backend("fake", backend="fake")
    tic = time.perf_counter()
    backend.predict(["a"], LABELS, 1.0, 0)
    assert time.perf_counter() - tic >= 0.2


def test_backends_refuse_options_they_do_not_take():
    with pytest.raises(UsageError, match="the transformers backend takes no option 'timeout'"):
        load_backend("smollm2-135m", backend="transformers", timeout=3.0)
    spec = backend_spec("fake", "fake", {"max_model_len": 99, "batch_size": 4, "timeout": 3.0})
    assert spec == backend_spec("fake", "fake", {"max_model_len": 99}) and hash(spec)
    assert spec.options.max_model_len == 99
