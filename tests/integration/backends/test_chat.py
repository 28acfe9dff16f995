"""ChatTokenizer on the real tokenizers of the paper's chat models (no weights).

The files live in $ICRL_TOKENIZERS_DIR/<org>__<name>/ (see its README.md); every test here
skips when that folder is not available. Expected strings and token counts are the README's.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest

from icrl.backends.chat import ChatTokenizer, load_chat_tokenizer, load_hf_tokenizer
from icrl.method.episode import Episode
from icrl.errors import UsageError
from icrl.method.prompts import build_messages

README_MESSAGES = [{"role": "system", "content": "S"}, {"role": "user", "content": "Query: hi"}]

MODELS = {
    "meta-llama/Meta-Llama-3.1-8B-Instruct": {
        "eot": "<|eot_id|>", "eot_id": 128009, "max_len": 131072, "tokens": 39,
        "render": ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
                   "December 2023\nToday Date: 26 Jul 2024\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>"
                   "\n\nQuery: hi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"),
    },
    "Qwen/Qwen2.5-7B-Instruct": {
        # 131072: the published YaRN x4 over its 32768 positions, on by default for Qwen2.5.
        "eot": "<|im_end|>", "eot_id": 151645, "max_len": 131072, "tokens": 17,
        "render": "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nQuery: hi<|im_end|>\n<|im_start|>assistant\n",
    },
    "microsoft/Phi-3.5-mini-instruct": {
        "eot": "<|end|>", "eot_id": 32007, "max_len": 131072, "tokens": 9,
        "render": "<|system|>\nS<|end|>\n<|user|>\nQuery: hi<|end|>\n<|assistant|>\n",
    },
}

# Labels with spaces, capitals, underscores and digits; banking77's own are added when the
# datasets are available.
SOME_LABELS = ["card arrival", "Refund_not_showing_up", "apple pay or google pay", "label_1000",
               "lost or stolen card", "ABBR", "NUM:dist", "card", "top up", "wrong exchange rate for cash withdrawal"]


def tokenizers_dir() -> Path:
    env = os.environ.get("ICRL_TOKENIZERS_DIR")
    if not env or not Path(env).is_dir():
        pytest.skip("paper tokenizers not found: set ICRL_TOKENIZERS_DIR to the tokenizers folder")
    return Path(env)


def model_dir(model: str) -> Path:
    path = tokenizers_dir() / model.replace("/", "__")
    if not path.is_dir():
        pytest.skip(f"{path} not found")
    return path


@functools.lru_cache(maxsize=None)
def _load(model: str) -> ChatTokenizer:
    return load_chat_tokenizer(model)


@pytest.fixture(params=list(MODELS), ids=lambda m: m.split("/")[1])
def model(request):
    model_dir(request.param)
    return request.param


@pytest.fixture
def chat(model) -> ChatTokenizer:
    """Loaded by Hugging Face id: found through $ICRL_TOKENIZERS_DIR, no hub access."""
    return _load(model)


@pytest.fixture
def labels(data_dir):
    try:
        from icrl.tasks import load_task

        return SOME_LABELS + load_task("banking77", data_dir).labels
    except Exception:  # the datasets are optional here
        return SOME_LABELS


def test_found_by_hub_id_in_the_tokenizers_dir(model, chat):
    assert chat.directory == model_dir(model)


def test_end_of_turn_token(model, chat):
    assert chat.eot_token == MODELS[model]["eot"]
    assert chat.eot_token_id == MODELS[model]["eot_id"]
    assert chat.tokenizer.convert_ids_to_tokens(chat.eot_token_id) == chat.eot_token


def test_supports_system_role(chat):
    assert chat.supports_system_role is True


def test_max_model_len(model, chat):
    assert chat.max_model_len == MODELS[model]["max_len"]


def test_render_matches_the_readme_then_the_prefix(model, chat):
    expected = MODELS[model]["render"]
    assert chat.render(README_MESSAGES, "") == expected
    assert chat.render(README_MESSAGES, "Intent:") == expected + "Intent:"
    assert chat.render(README_MESSAGES, "Type:").endswith("\nType:")


def test_count_tokens_matches_the_readme(model, chat):
    text = chat.render(README_MESSAGES, "")
    assert chat.count_tokens(text) == MODELS[model]["tokens"]
    assert chat.count_tokens(text) == len(chat.tokenizer(text, add_special_tokens=False)["input_ids"])
    assert chat.count_tokens(chat.render(README_MESSAGES, "Intent:")) > MODELS[model]["tokens"]
    assert chat.encode(chat.eot_token) == [chat.eot_token_id]  # a special token is one token


def test_label_token_ids_decode_back_to_space_label(chat, labels):
    prefix = "Intent:"
    head = chat.encode(prefix)
    decoded_head = chat.tokenizer.decode(head)
    ids = chat.label_token_ids(labels, prefix)
    assert len(ids) == len(labels)
    for label, label_ids in zip(labels, ids):
        assert label_ids, label
        # After the prefix's tokens, the label's tokens read " <label>". (Decoded alone, a
        # SentencePiece tokenizer such as Phi-3.5's drops the leading space of the first token.)
        assert chat.tokenizer.decode(head + label_ids)[len(decoded_head):] == " " + label


def test_label_token_ids_are_what_the_model_would_write_after_the_prompt(chat, labels):
    """Prompt tokens + label tokens == tokens of the prompt text followed by ' <label>'."""
    prompt = chat.render(README_MESSAGES, "Intent:")
    prompt_ids = chat.encode(prompt)
    for label, label_ids in zip(labels, chat.label_token_ids(labels, "Intent:")):
        assert chat.encode(prompt + " " + label) == prompt_ids + label_ids, label


def test_label_token_ids_distinct_for_distinct_labels(chat, labels):
    ids = chat.label_token_ids(labels, "Intent:")
    assert len({tuple(x) for x in ids}) == len(set(labels))


def test_icrl_prompt_closes_each_answer_with_the_end_of_turn_token(chat):
    task = type("T", (), {"prediction_prefix": "Intent:", "description": ""})
    context = [Episode("Query: card lost", "lost or stolen card", 1, "lost or stolen card", 1),
               Episode("Query: where is my money", "card arrival", 0, "pending transfer", 0)]
    messages, prefix = build_messages(task, context, "Query: how do I top up", "icrl",
                                      supports_system_role=chat.supports_system_role)
    text = chat.render(messages, prefix)
    assert text.endswith("Intent:")
    assert "Query: how do I top up" in text
    for episode in context:
        # what the model would have written: the prefix, the label, its end-of-turn token
        assert f"Intent: {episode.prediction}{chat.eot_token}" in text
    assert text.count(chat.eot_token) >= 2 * len(context) + 2


def test_phi_ids_are_those_of_its_tokenizer_json():
    """Read as saved (PreTrainedTokenizerFast), not rebuilt by AutoTokenizer."""
    from tokenizers import Tokenizer

    model = "microsoft/Phi-3.5-mini-instruct"
    path = model_dir(model)
    chat = _load(model)
    raw = Tokenizer.from_file(str(path / "tokenizer.json"))
    for text in ["Query: hi\n\nIntent: card arrival", " label_1000", "The answer 'x' is wrong! You can do better!"]:
        assert chat.encode(text) == raw.encode(text, add_special_tokens=False).ids


def test_qwen_has_no_tokenizer_json_and_still_loads():
    path = model_dir("Qwen/Qwen2.5-7B-Instruct")
    assert not (path / "tokenizer.json").exists()
    chat = _load("Qwen/Qwen2.5-7B-Instruct")
    vocab = json.loads((path / "vocab.json").read_text(encoding="utf-8"))
    assert chat.encode("Query") == [vocab["Query"]]


# ------------------------------------------------ facts derived from the files, overrides --
def fresh_tokenizer():
    """A tokenizer whose template a test may change (Phi-3.5's: small and fast to load)."""
    return load_hf_tokenizer(model_dir("microsoft/Phi-3.5-mini-instruct"))


def test_template_without_system_role():
    tokenizer = fresh_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('no system role') }}"
        "{% endif %}{{ '<|' + m['role'] + '|>\n' + m['content'] + '<|end|>\n' }}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")
    chat = ChatTokenizer(tokenizer, None, max_model_len=4096)
    assert chat.supports_system_role is False
    assert chat.eot_token == "<|end|>"
    assert chat.render([{"role": "user", "content": "hi"}], "Intent:") == "<|user|>\nhi<|end|>\n<|assistant|>\nIntent:"


def test_template_that_drops_the_system_message():
    tokenizer = fresh_tokenizer()
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'system' %}{{ '<|' + m['role'] + '|>\n' + m['content'] + "
        "'<|end|>\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")
    assert ChatTokenizer(tokenizer, None, max_model_len=4096).supports_system_role is False


def test_no_chat_template_is_a_usage_error():
    tokenizer = fresh_tokenizer()
    tokenizer.chat_template = None
    with pytest.raises(UsageError, match="no chat template"):
        ChatTokenizer(tokenizer, None, max_model_len=4096)


def test_overrides():
    path = model_dir("microsoft/Phi-3.5-mini-instruct")
    chat = ChatTokenizer(load_hf_tokenizer(path), path, max_model_len=4096, eot_token="<|endoftext|>")
    assert chat.max_model_len == 4096
    assert (chat.eot_token, chat.eot_token_id) == ("<|endoftext|>", 32000)
    with pytest.raises(UsageError, match="not in the vocabulary"):
        ChatTokenizer(load_hf_tokenizer(path), path, eot_token="<|no_such_token|>")


# -- --published_tokenization: the published stack's quirks, off by default -----------------------
def _fresh(model: str) -> ChatTokenizer:
    model_dir(model)
    return load_chat_tokenizer(model)  # not the cached one: these tests switch the flag


@pytest.mark.parametrize("model, extra_bos", [("meta-llama/Meta-Llama-3.1-8B-Instruct", 1),
                                              ("Qwen/Qwen2.5-7B-Instruct", 0),
                                              ("microsoft/Phi-3.5-mini-instruct", 0)])
def test_published_tokenization_prompts(model, extra_bos):
    """vLLM 0.6.4 tokenized the published text prompts with special tokens: Llama-3 prompts got
    a second <|begin_of_text|>. The default sends the template's ids as they are."""
    chat = _fresh(model)
    text = chat.render(README_MESSAGES, "Intent:")
    default = chat.encode_prompt(text)
    assert default == chat.encode(text)
    chat.published_tokenization = True
    quirky = chat.encode_prompt(text)
    assert len(quirky) == len(default) + extra_bos and quirky[extra_bos:] == default
    if extra_bos:
        bos = chat.tokenizer.convert_tokens_to_ids("<|begin_of_text|>")
        assert quirky[:2] == [bos, bos] and default[:2] != [bos, bos]


@pytest.mark.parametrize("model, extra", [("microsoft/Phi-3.5-mini-instruct", True),
                                          ("meta-llama/Meta-Llama-3.1-8B-Instruct", False),
                                          ("Qwen/Qwen2.5-7B-Instruct", False)])
def test_published_tokenization_labels(model, extra):
    """The published code forced encode(" " + label): on Phi-3.5 an extra '▁' token (two spaces
    before the label); the byte-level BPE tokenizers are unchanged."""
    chat = _fresh(model)
    labels = ["card_arrival", "Cancel transfer", "age_limit"]
    default = chat.label_token_ids(labels, "Intent:")
    assert chat.label_choices(labels, "Intent:") == [" " + label for label in labels]
    chat.published_tokenization = True
    forced = chat.label_token_ids(labels, "Intent:")
    assert forced == [chat.encode(" " + label) for label in labels]
    if extra:
        underline = chat.tokenizer.convert_tokens_to_ids("▁")
        assert all(f == [underline] + d for f, d in zip(forced, default))
        assert chat.label_choices(labels, "Intent:") == ["  " + label for label in labels]
    else:
        assert forced == default
        assert chat.label_choices(labels, "Intent:") == [" " + label for label in labels]


def test_published_tokenization_flag_reaches_the_backend(smollm2, monkeypatch):
    """--published_tokenization is a run argument the backends apply to every prompt they send."""
    from icrl.cli import parse_args

    assert parse_args([]).spec.published_tokenization is False
    calls = []
    real = smollm2.chat.encode_prompt
    monkeypatch.setattr(smollm2.chat, "encode_prompt", lambda text: calls.append(text) or real(text))
    prompt = smollm2.render([{"role": "user", "content": "Type? hi"}], "Type:")
    smollm2.predict([prompt], ["a", "b"], temperature=0.0, seed=0)
    assert calls == [prompt]
    assert smollm2.describe()["published_tokenization"] is False
