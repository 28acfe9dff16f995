"""A model's tokenizer and chat template: everything about prompts that needs no weights.

Backends render and count through this class, and so do the tools that only need a
tokenizer (the context-window search and the token counter), which load in seconds.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Optional, Sequence

from ..errors import UsageError
from . import embedded
from .frame import Message, ReasoningFrame

_TOKENIZER_FILES = [
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "tokenizer.model",
    "vocab.json", "merges.txt", "added_tokens.json", "chat_template.jinja", "chat_template.json",
    "config.json", "generation_config.json",
]
_SENTINEL = "ICRL_SENTINEL_7f3a"


def looks_like_path(name: str) -> bool:
    """A local path rather than a Hub id ("org/name"): absolute, ./ ../ ~, or more than one "/"."""
    return name.startswith(("/", "./", "../", "~")) or name in (".", "..") or name.count("/") > 1


def local_model_dir(model_name: str, hf_token: Optional[str] = None, weights: bool = False) -> Path:
    """Resolve a model name to a local directory.

    Order: the embedded default (converted from its GGUF once); an existing directory;
    `$ICRL_TOKENIZERS_DIR/<org>__<name>` (tokenizer-only copies, when no weights are needed);
    else the Hugging Face hub (cached by huggingface_hub; works offline once cached).
    The token is passed to the hub only, never written anywhere.
    """
    if embedded.is_embedded(model_name):
        return embedded.converted_dir(model_name)
    path = Path(model_name).expanduser()
    if path.is_dir():
        return path
    if looks_like_path(model_name):
        raise UsageError(f"{model_name!r}: no such local folder (a Hub id is org/name)")
    copy = tokenizer_copy(model_name) if not weights else None
    if copy is not None:
        return copy
    if "/" not in model_name:
        raise UsageError(
            f"unknown model {model_name!r}: give a Hugging Face id (org/name), a local directory, "
            f"or one of the embedded models: {', '.join(embedded.EMBEDDED_MODELS)}")
    from huggingface_hub import snapshot_download

    patterns = None if weights else _TOKENIZER_FILES
    try:
        return Path(snapshot_download(model_name, allow_patterns=patterns,
                                      token=hf_token or os.environ.get("HF_TOKEN")))
    except Exception as exc:  # noqa: BLE001 - network, gating, missing repo: all user-facing
        raise UsageError(
            f"cannot get {model_name!r} from the Hugging Face hub ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); check the name, pass --hf_token for "
            f"gated models, or give a local directory") from None


def tokenizer_here(model_name: str) -> Optional[bool]:
    """Whether ``local_model_dir`` would find a tokenizer of ``model_name`` without asking the Hub:
    True (the embedded model, a folder, a copy under ``$ICRL_TOKENIZERS_DIR``, the Hub's cache),
    False (it cannot: not a Hub id, or the Hub is offline), None (the Hub may have it)."""
    from ..infra import hub

    if embedded.is_embedded(model_name) or Path(model_name).expanduser().is_dir() or tokenizer_copy(model_name):
        return True
    if looks_like_path(model_name) or "/" not in model_name:
        return False
    if hub.model_cached(model_name):
        return True
    return False if hub.offline() else None


def tokenizer_copy(model_name: str) -> Optional[Path]:
    """The tokenizer-only copy of Hub id ``model_name`` under ``$ICRL_TOKENIZERS_DIR``
    (``<org>__<name>``), or None when there is none."""
    root = os.environ.get("ICRL_TOKENIZERS_DIR")
    if not root:
        return None
    candidate = Path(root) / model_name.replace("/", "__")
    return candidate if candidate.is_dir() else None


def load_hf_tokenizer(directory: Path) -> Any:
    """Load a tokenizer from a directory.

    A directory with tokenizer.json is read with PreTrainedTokenizerFast as saved: under
    transformers 5, AutoTokenizer rebuilds some tokenizers (Phi-3.5) and changes their ids.
    """
    if (directory / "tokenizer.json").is_file():
        from transformers import PreTrainedTokenizerFast  # seconds sooner than AutoTokenizer's import

        return PreTrainedTokenizerFast.from_pretrained(directory)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(directory)


def model_json(directory: Path, name: str = "config.json") -> dict[str, Any]:
    """A JSON file of a model's folder (its config.json unless named); {} when it cannot be read."""
    try:
        return json.loads((directory / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


class ChatTokenizer:
    """Tokenizer + chat template of one model, with the facts the harness needs about it."""

    def __init__(self, tokenizer: Any, directory: Optional[Path] = None, *,
                 max_model_len: Optional[int] = None, eot_token: Optional[str] = None) -> None:
        self.tokenizer = tokenizer
        self.directory = directory
        # --published_tokenization: reproduce the published stack's tokenization quirks (see
        # encode_prompt and label_token_ids); off by default, where both are tokenized correctly.
        self.published_tokenization = False
        if tokenizer.chat_template is None:
            raise UsageError(f"the tokenizer in {directory} has no chat template; ICRL needs a chat model")
        config = model_json(directory) if directory else {}
        generation = model_json(directory, "generation_config.json") if directory else {}
        self.max_model_len = max_model_len or self._derive_max_len(config)
        self.supports_system_role = self._derive_system_role()
        self.eot_token = eot_token or self._derive_eot(generation)
        ids = tokenizer.convert_tokens_to_ids(self.eot_token)
        if ids is None or ids == tokenizer.unk_token_id:
            raise UsageError(f"end-of-turn token {self.eot_token!r} is not in the vocabulary; pass a valid --eot_token")
        self.eot_token_id = int(ids)

    # -- facts derived from the files, not from a list of model families ---------------
    def _derive_max_len(self, config: dict[str, Any]) -> int:
        for key in ("max_position_embeddings", "max_sequence_length", "n_positions"):
            if isinstance(config.get(key), int):
                return config[key]
        length = getattr(self.tokenizer, "model_max_length", None)
        if isinstance(length, int) and 0 < length < 10**7:
            return length
        raise UsageError("cannot tell the model's maximum length from its files; pass --max_model_len")

    def _derive_system_role(self) -> bool:
        messages = [{"role": "system", "content": _SENTINEL}, {"role": "user", "content": "hi"}]
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - templates that reject a system role raise (e.g. Gemma)
            return False
        return _SENTINEL in text

    def _derive_eot(self, generation: dict[str, Any]) -> str:
        """The special token the template writes right after an assistant message."""
        messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": _SENTINEL}]
        try:
            text = self.tokenizer.apply_chat_template(messages, tokenize=False)
            tail = text.split(_SENTINEL, 1)[1]
            # By id: tokenize() can return a special token's text with the whitespace it strips
            # (Phi-3.5 gives '<|end|>\n'), which would then not match.
            special = set(self.tokenizer.all_special_ids) | {
                i for i, t in self.tokenizer.added_tokens_decoder.items() if t.special}
            for token_id in self.encode(tail):
                if token_id in special:
                    return self.tokenizer.convert_ids_to_tokens(token_id)
        except Exception:  # noqa: BLE001 - a template that cannot render: fall back to eos_token_id
            pass
        eos = generation.get("eos_token_id")
        if isinstance(eos, list):
            eos = eos[0] if eos else None
        if isinstance(eos, int):
            return self.tokenizer.convert_ids_to_tokens(eos)
        if self.tokenizer.eos_token:
            return self.tokenizer.eos_token
        raise UsageError("cannot tell the end-of-turn token from the tokenizer; pass --eot_token")

    # -- the operations ------------------------------------------------------------------
    def render(self, messages: Sequence[Message], prefix: str) -> str:
        """The model's chat template with the generation prompt, then the prediction prefix."""
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return text + prefix

    @property
    def thinking(self) -> bool:
        """Whether the template has a thinking mode (a ``<think>`` block: Qwen3, DeepSeek-R1 distills)."""
        return "<think>" in str(self.tokenizer.chat_template)

    @property
    def thinks(self) -> bool:
        """``thinking``, by the name a backend gives it (``icrl.backends.Backend.thinks``)."""
        return self.thinking

    def reasoning_frame(self, messages: Sequence[Message], prefix: str) -> ReasoningFrame:
        """Where reasoning goes (``icrl.backends.ReasoningFrame``): a thinking template renders
        its thinking mode (``enable_thinking``) and the model thinks inside ``<think>``, closed
        by ``</think>``; a plain template renders the generation prompt, and the model thinks in
        its answer until it writes the prediction prefix (the messages ask it to)."""
        if self.thinking:
            text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True,
                                                      enable_thinking=True)
            if not text.rstrip().endswith("<think>"):
                text += "<think>\n"
            return ReasoningFrame(text, "</think>", "\n</think>\n\n", prefix)
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
        return ReasoningFrame(text, prefix, "\n", prefix)

    def decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def encode(self, text: str) -> list[int]:
        """Token ids of already-rendered text (the template emits its own special tokens)."""
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a rendered prompt as the backends send it to the model.

        Default: ``encode`` (the template already wrote its begin-of-text token). With
        ``published_tokenization``: as vLLM 0.6.4 tokenized the published code's text prompts,
        with the tokenizer's special tokens added, so Llama-3 prompts start with a second
        ``<|begin_of_text|>`` (tokenizers that add nothing are unchanged)."""
        return self.tokenizer(text, add_special_tokens=bool(self.published_tokenization))["input_ids"]

    def count_tokens(self, text: str) -> int:
        return len(self.encode(text))

    def label_token_ids(self, labels: Sequence[str], prefix: str) -> list[list[int]]:
        """Token ids of ` <label>` as the model would write them right after `prefix`.

        Tokenized in context (prefix + " " + label, minus the prefix's tokens) so that
        tokenizers that treat a leading space specially still give the ids the model emits.
        With ``published_tokenization``: ``encode(" " + label)`` on its own, as the published
        code forced them; with a SentencePiece tokenizer (Phi-3.5) that is one extra ``▁``
        token, i.e. two spaces before the label. Byte-level BPE tokenizers (Llama-3, Qwen2.5)
        give the same ids either way.
        """
        if self.published_tokenization:
            return [self.encode(" " + label) for label in labels]
        head = self.encode(prefix)
        out = []
        for label in labels:
            full = self.encode(prefix + " " + label)
            ids = full[len(head):] if full[:len(head)] == head else self.encode(" " + label)
            out.append(ids)
        return out

    def label_choices(self, labels: Sequence[str], prefix: str) -> list[str]:
        """The texts structured outputs (vLLM) may write after ``prefix``: `` <label>``, or with
        ``published_tokenization`` the text of the published forced ids (two spaces before the
        label where ``encode(" " + label)`` has an extra token, as with Phi-3.5)."""
        if not self.published_tokenization:
            return [" " + label for label in labels]
        self.published_tokenization = False
        try:
            correct = self.label_token_ids(labels, prefix)
        finally:
            self.published_tokenization = True
        forced = self.label_token_ids(labels, prefix)
        return [("  " if f != c else " ") + label for label, f, c in zip(labels, forced, correct)]


def load_chat_tokenizer(model_name: str, *, hf_token: Optional[str] = None,
                        max_model_len: Optional[int] = None, eot_token: Optional[str] = None,
                        rope_scaling: Optional[str] = None) -> ChatTokenizer:
    """Tokenizer and template only (no weights): loads in seconds.

    The maximum length follows the RoPE scaling the model runs with (``rope_scaling``:
    None/auto = the published default, YaRN x4 over 32,768 for Qwen2.5; none = off)."""
    directory = local_model_dir(model_name, hf_token=hf_token, weights=False)
    chat = ChatTokenizer(load_hf_tokenizer(directory), directory, max_model_len=max_model_len, eot_token=eot_token)
    apply_rope_length(chat, model_name, rope_scaling, max_model_len)
    return chat


def apply_rope_length(chat: ChatTokenizer, model_name: str, rope_scaling: Optional[str],
                      max_model_len: Optional[int]) -> Optional[str]:
    """Set ``chat.max_model_len`` to the scaled length (unless --max_model_len was given);
    returns the resolved scaling spec (None when off)."""
    from .rope import resolve_rope_scaling, scaled_length

    spec = resolve_rope_scaling(model_name, rope_scaling)
    if spec and not max_model_len:
        length = scaled_length(spec)
        assert length is not None  # a set spec has a length
        chat.max_model_len = length
    return spec
