"""Model backends: one protocol, implementations side by side, chosen by name.

    from icrl.backends import load_backend
    backend = load_backend("smollm2-135m")            # transformers on CPU here
    text = backend.render(messages, prefix)          # chat template + "Intent:"
    labels = backend.predict([text], task.labels, temperature=0.0, seed=0)
    outs = predict_calls(backend, [Call(prompts, labels, 1.0, 7, key="run-a"), ...])  # many calls at once

Heavy libraries (torch, transformers, vLLM) are imported only when a backend is loaded.
A plugin adds a backend with ``register_backend(name, cls)`` (``icrl.plugin``). What the tools
ask of a backend before it loads is read from its class: the options it takes (the keyword-only
parameters of its ``__init__``, ``options_class``: ``--base_url`` goes to the backends that take
``base_url``) and whether its model is a local folder or Hub id (``local_model``, True unless the
class sets it False: a hosted API's or the fake backend's model name is a label, not a folder).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import importlib.util
import inspect
from typing import Any, Callable, Hashable, NamedTuple, Optional, Protocol, Sequence, Sized, Union, runtime_checkable

from ..errors import UsageError
from ..infra import plugins
from .embedded import DEFAULT_MODEL
from .frame import Message, ReasoningFrame

# CLI name -> "module:Class", imported on demand.
BACKENDS: dict[str, Union[str, type]] = {  # a class, or "module:Class" imported when chosen
    "transformers": "icrl.backends.hf:TransformersBackend",
    "vllm": "icrl.backends.vllm_backend:VLLMBackend",
    "openai": "icrl.backends.openai_backend:OpenAIBackend",
    "anthropic": "icrl.backends.anthropic_backend:AnthropicBackend",
    "gemini": "icrl.backends.gemini_backend:GeminiBackend",
    "fake": "icrl.backends.fake:FakeBackend",  # deterministic, no model: tests and benchmarks
}
BACKEND_CHOICES = ["auto", *BACKENDS]
# --first_answer_timeout (the API backends' silence watch, ``server_watch``): its default and help
FIRST_ANSWER_S = 60.0
FIRST_ANSWER_HELP = ("seconds a call waits, whatever --timeout says, for the server's first answer (any HTTP answer, "
                     "an error's too) to a request for a completion (a call of token counts: for a count); none by "
                     "then is one line (a dead or stuck server); once one was answered, --timeout's bounds apply")
_OWNERS: dict[str, Optional[plugins.Plugin]] = {}  # name -> the plugin that registered it (icrl.infra.plugins)


def register_backend(name: str, cls: type) -> type:
    """Make ``cls`` (a class with what ``Backend`` declares, built as ``cls(model_name, **options)``
    from its keyword-only parameters, see ``options_class``) the choice ``--backend name``."""
    what = f"the backend {name!r}"
    if name in BACKEND_CHOICES:
        raise plugins.collision(what, _OWNERS.get(name), plugins.current())
    BACKENDS[name] = cls
    BACKEND_CHOICES.append(name)
    _OWNERS[name] = plugins.registered(what, lambda: _unregister(name))
    return cls


def _unregister(name: str) -> None:
    BACKENDS.pop(name, None)
    _OWNERS.pop(name, None)
    if name in BACKEND_CHOICES:
        BACKEND_CHOICES.remove(name)


def backend_owner(name: str) -> Optional[plugins.Plugin]:
    """The plugin that registered the backend ``name`` (None: icrl's own)."""
    return _OWNERS.get(name)


@runtime_checkable
class Backend(Protocol):
    """What the experiment loop needs from a model."""

    name: str
    model_name: str
    max_model_len: int
    supports_system_role: bool
    eot_token: str

    def render(self, messages: Sequence[Message], prefix: str) -> str:
        """Chat template with the generation prompt, then the prediction prefix."""

    def predict(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                progress: Optional[Callable[[int], None]] = None) -> list[str]:
        """One label per rendered prompt, always exactly one of `labels`. ``progress(n)``, when
        given, is called as prompts finish with how many just did (the transformers backend per
        batch; vLLM and the server backend once, at the end of their single call)."""

    def count_tokens(self, text: str) -> int:
        """Tokens of already-rendered text."""

    def describe(self) -> dict[str, Any]:
        """Settings worth recording with the results (no secrets)."""


class Reasoner(Protocol):
    """What a run with ``--reasoning`` needs besides ``Backend``: a frame around free text and
    free generation (the transformers, vLLM, server and fake backends have both)."""

    thinks: bool  # the chat template has a thinking mode (a ``<think>`` block)

    def reasoning_frame(self, messages: Sequence[Message], prefix: str) -> ReasoningFrame:
        """Where the model's reasoning goes for these messages (see ``ReasoningFrame``)."""

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> list["Generated"]:
        """Free text after each rendered prompt: at most ``max_tokens`` tokens, ending before the
        first of ``stop`` (or the end of the turn); sampled with one seeded stream per prompt
        position, as ``predict`` samples."""


class Generated(NamedTuple):
    """What ``generate`` wrote after one prompt: the text (up to a stop string, left out) and the
    tokens it took (the stop string's included)."""

    text: str
    tokens: int


class Call(NamedTuple):
    """One predict() call of a run: its prompts, the run's labels, temperature and seed. ``key``
    names the caller (a run of a sweep), for backends that keep per-caller state."""

    prompts: Sequence[str]
    labels: Sequence[str]
    temperature: float
    seed: int
    key: Optional[Hashable] = None


def predict_calls(backend: Any, calls: Sequence[Call]) -> list[list[str]]:
    """The outputs of several independent predict() calls, each exactly what ``backend.predict``
    gives for it alone; backends that can serve them together (vLLM: one engine call; the
    server: all requests in flight at once) define ``predict_calls``. ``backend``: any ``Backend``
    (typed Any: a caller may hold it narrowed to one of ``usage``'s protocols)."""
    method = getattr(backend, "predict_calls", None)
    if method is not None:
        return method(calls)
    return [backend.predict(c.prompts, c.labels, c.temperature, c.seed) for c in calls]


class ChatTemplate(Protocol):
    """A model's chat template and token counter, with its window: what a backend renders and counts
    with (``chat.ChatTokenizer``, ``fake.FakeChat``), loaded or not (``offline_chat``)."""

    max_model_len: int
    supports_system_role: bool
    eot_token: str
    published_tokenization: bool

    def render(self, messages: Sequence[Message], prefix: str) -> str:
        """Chat template with the generation prompt, then the prediction prefix."""

    def reasoning_frame(self, messages: Sequence[Message], prefix: str) -> ReasoningFrame:
        """Where the model's reasoning goes for these messages."""

    def count_tokens(self, text: str) -> int:
        """Tokens of already-rendered text."""


class ChatBackend:
    """Shared part of the backends: everything that goes through the tokenizer."""

    name = "base"
    local_model = True  # the model is a folder or a Hub id loaded here (module docstring)

    def __init__(self, model_name: str, chat: ChatTemplate) -> None:
        self.model_name = model_name
        self.chat = chat

    @property
    def max_model_len(self) -> int:
        return self.chat.max_model_len

    @property
    def supports_system_role(self) -> bool:
        return self.chat.supports_system_role

    @property
    def eot_token(self) -> str:
        return self.chat.eot_token

    def render(self, messages: Sequence[Message], prefix: str) -> str:
        return self.chat.render(messages, prefix)

    @property
    def thinks(self) -> bool:
        return bool(getattr(self.chat, "thinking", False))

    def reasoning_frame(self, messages: Sequence[Message], prefix: str) -> ReasoningFrame:
        return self.chat.reasoning_frame(messages, prefix)

    def count_tokens(self, text: str) -> int:
        return self.chat.count_tokens(text)

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "model_name": self.model_name, "max_model_len": self.max_model_len,
                "supports_system_role": self.supports_system_role, "eot_token": self.eot_token,
                "published_tokenization": bool(getattr(self.chat, "published_tokenization", False))}


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def shared_prefix_length(seqs: Sequence[Sequence[int]]) -> int:
    """Length of the longest token prefix common to all sequences."""
    if not seqs:
        return 0
    shared = len(seqs[0])
    for seq in seqs[1:]:
        shared = common_prefix_length(seqs[0][:shared], seq)
    return shared


def check_prompt_lengths(ids: Sequence[Sized], answer_tokens: int, max_model_len: int) -> None:
    """A prompt (its tokens) and its longest answer must fit the model window."""
    longest = max(len(x) for x in ids)
    if longest + answer_tokens > max_model_len:
        raise UsageError(f"a prompt has {longest} tokens, more than the model's {max_model_len} allow; "
                         f"lower --max_context_examples")


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_backend_name(backend: str) -> str:
    """`auto`: vLLM when it is installed and a CUDA GPU is visible, else transformers."""
    if backend not in BACKEND_CHOICES:
        raise UsageError(f"unknown backend {backend!r}; choose one of: {', '.join(BACKEND_CHOICES)}")
    if backend != "auto":
        return backend
    if vllm_available():
        import torch

        if torch.cuda.is_available():
            return "vllm"
    return "transformers"


def backend_class(name: str) -> type:
    """The class registered as ``name`` (not "auto"), imported now."""
    entry = BACKENDS[name]
    if isinstance(entry, type):
        return entry
    module_name, class_name = entry.split(":")
    return getattr(importlib.import_module(module_name), class_name)


def takes_option(name: str, option: str) -> bool:
    """Whether the backend registered as ``name`` (not "auto") takes ``option``, one of the
    keyword-only parameters of its class's ``__init__`` (``options_class``)."""
    return option in {f.name for f in dataclasses.fields(options_class(backend_class(name)))}


def backends_taking(option: str) -> list[str]:
    """The registered backends that take ``option``, in the order they were registered."""
    return [name for name in BACKENDS if takes_option(name, option)]


def offline_chat(backend: str, model_name: str, *, hf_token: Optional[str] = None,
                 max_model_len: Optional[int] = None, eot_token: Optional[str] = None,
                 rope_scaling: Optional[str] = None) -> ChatTemplate:
    """The tokenizer and chat template of ``backend``'s model ``model_name`` without its weights
    (what the window, the context-size search, the budgets and the estimate read before a model
    loads): the class's ``offline_chat`` classmethod where it has one (the fake's own; a hosted
    API's refusal), else the model's Hugging Face tokenizer (``load_chat_tokenizer``)."""
    make = getattr(backend_class(resolve_backend_name(backend)), "offline_chat", None)
    if make is None:
        from .chat import load_chat_tokenizer

        make = load_chat_tokenizer
    return make(model_name, hf_token=hf_token, max_model_len=max_model_len, eot_token=eot_token,
                rope_scaling=rope_scaling)


def window_from_tokenizer(backend: str) -> bool:
    """Whether ``backend``'s model window is the one its tokenizer gives (``--max_model_len``
    else the model's config): its class's ``window_from_tokenizer`` (True where the class does
    not say; an OpenAI-compatible server's window is the server's)."""
    return bool(getattr(backend_class(resolve_backend_name(backend)), "window_from_tokenizer", True))


def has_local_model(backend: str) -> bool:
    """Whether backend ``backend`` loads its model from a local folder or the Hub: its class's
    ``local_model`` (True where the class does not say). "auto" always picks a local engine
    (``resolve_backend_name``), so it is answered without importing one."""
    return backend == "auto" or bool(getattr(backend_class(resolve_backend_name(backend)), "local_model", True))


@functools.lru_cache(maxsize=None)
def options_class(cls: type) -> type:
    """The backend's typed options: a frozen (hashable) dataclass of the keyword-only
    parameters of ``cls.__init__``, with their annotations and defaults, declared once there."""
    # the class's own __init__ declares its options (misc: mypy calls reading it off a class unsound)
    init = cls.__init__  # type: ignore[misc]
    params = [p for p in inspect.signature(init).parameters.values() if p.kind is p.KEYWORD_ONLY]
    return dataclasses.make_dataclass(
        f"{cls.__name__.removesuffix('Backend')}Options",
        [(p.name, p.annotation, dataclasses.field(default=p.default)) for p in params], frozen=True,
        repr=False)  # never shows the token or key it may hold


def make_options(name: str, **options: Any) -> Any:
    """Backend ``name``'s options object; an option it does not take is a one-line UsageError."""
    cls = options_class(backend_class(name))
    known = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UsageError(f"the {name} backend takes no option {', '.join(map(repr, unknown))}; "
                         f"its options: {', '.join(known)}")
    return cls(**options)


@dataclasses.dataclass(frozen=True)
class BackendSpec:
    """What a loaded backend is: model, backend name (resolved, never "auto") and its options.
    Hashable: runs of a sweep with equal specs share one loaded backend."""

    model_name: str
    name: str
    options: Any

    def with_engine(self, **values: Any) -> BackendSpec:
        """The spec with the engine-wide values (e.g. vLLM's ``seed``) the backend takes."""
        names = {f.name for f in dataclasses.fields(self.options)}
        taken = {k: v for k, v in values.items() if k in names}
        return dataclasses.replace(self, options=dataclasses.replace(self.options, **taken))


def backend_spec(model_name: str, backend: str, values: dict[str, Any]) -> BackendSpec:
    """The spec of ``backend`` for ``model_name``, its options taken from ``values`` (a run's
    configuration values: those the backend does not take are left out)."""
    name = resolve_backend_name(backend)
    names = {f.name for f in dataclasses.fields(options_class(backend_class(name)))}
    return BackendSpec(model_name, name, make_options(name, **{k: v for k, v in values.items() if k in names}))


def load_spec(spec: BackendSpec) -> Backend:
    """Load the backend a spec describes (through ``load_backend``)."""
    options = {f.name: getattr(spec.options, f.name) for f in dataclasses.fields(spec.options)}
    return load_backend(spec.model_name, spec.name, **options)


def load_backend(model_name: str = DEFAULT_MODEL, backend: str = "auto", **options: Any) -> Backend:
    """Instantiate a backend by name; ``options`` are that backend's options (see
    ``options_class``): one it does not take is a UsageError."""
    name = resolve_backend_name(backend)
    opts = make_options(name, **options)
    return backend_class(name)(model_name, **{f.name: getattr(opts, f.name) for f in dataclasses.fields(opts)})
