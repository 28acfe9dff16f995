"""Hugging Face transformers backend: runs anywhere (CPU or GPU).

Speed comes from shared-prefix reuse. The prompts of one call usually share a long context
and differ only in the final query, and consecutive calls often share a context prefix too
(approximate strategies append to their contexts). So the backend keeps the KV cache of the
last shared prefix, extends or crops it to the new one, and then runs only the per-prompt
suffixes, in batches, on top of it. Token ids are those of each whole prompt, so the model
sees exactly the tokens it would see without reuse. In a sweep (``predict_calls``) each run
keeps its own stored prefix, so interleaved runs reuse their contexts as they do alone.
"""

from __future__ import annotations

import copy
import logging
import time
from collections import OrderedDict
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Hashable, Optional, Sequence

import numpy as np

from ..errors import UsageError
from . import Call, ChatBackend, Generated, check_prompt_lengths, common_prefix_length
from .chat import ChatTokenizer, apply_rope_length, load_hf_tokenizer, local_model_dir, model_json
from .constrained import LabelTrie, prompt_rngs
from .hf_batches import CPU_ROWS, Item, in_batches, row_bytes, rows_for
from .hf_cache import Buffers, batch_cache, packed_cache, register_cpu_attention, row_buffers
from .hf_decode import decode_rows, sample

log = logging.getLogger(__name__)

# A prompt in predict_calls' shared passes: (call, index, suffix, prefix length, prefix cache, trie).
Row = tuple[int, int, list[int], int, Any, LabelTrie]


def _check_device(torch: ModuleType, device: str) -> str:
    """Reject a device this machine does not have before any weights load."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise UsageError(f"unknown --device {device!r}; use cpu, cuda or cuda:N") from None
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device {device}: no CUDA GPU is visible here; use --device cpu")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise UsageError(f"--device {device}: only {torch.cuda.device_count()} GPU(s) are visible")
    elif parsed.type != "cpu" and not (parsed.type == "mps" and torch.backends.mps.is_available()):
        raise UsageError(f"--device {device} is not available here; use cpu or cuda")
    return device


def rope_config_kwargs(directory: Path, spec: Optional[str]) -> dict[str, Any]:
    """``from_pretrained`` config overrides for RoPE scaling ``spec`` (``{}`` when off), with the
    model's own ``rope_theta`` kept (transformers 5 drops it from a ``rope_parameters`` without it)."""
    from .rope import config_overrides, rope_theta_of, transformers_major

    if not spec:
        return {}
    overrides = config_overrides(spec, rope_theta_of(model_json(directory)), transformers_major())
    overrides.pop("max_model_len")
    return overrides


class TransformersBackend(ChatBackend):
    name = "transformers"
    chat: ChatTokenizer

    def __init__(self, model_name: str, *, device: Optional[str] = None, dtype: str = "auto",
                 batch_size: Optional[int] = None, prefix_reuse: bool = True, hf_token: Optional[str] = None,
                 max_model_len: Optional[int] = None, eot_token: Optional[str] = None,
                 prefill_chunk: int = 2048, rope_scaling: Optional[str] = None,
                 published_tokenization: bool = False) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        if batch_size is not None and batch_size < 1:
            raise UsageError(f"--batch_size must be at least 1, got {batch_size}")
        self.device = _check_device(torch, device or ("cuda" if torch.cuda.is_available() else "cpu"))
        directory = local_model_dir(model_name, hf_token=hf_token, weights=True)
        chat = ChatTokenizer(load_hf_tokenizer(directory), directory, max_model_len=max_model_len, eot_token=eot_token)
        super().__init__(model_name, chat)
        self.rope_scaling = apply_rope_length(chat, model_name, rope_scaling, max_model_len)
        chat.published_tokenization = bool(published_tokenization)
        if dtype == "auto":
            dtype = "float32" if self.device == "cpu" else "bfloat16"
        if not hasattr(torch, dtype) or not isinstance(getattr(torch, dtype), torch.dtype):
            raise UsageError(f"unknown --dtype {dtype!r}; use auto, float32, bfloat16 or float16")
        self.dtype = dtype
        self.model = AutoModelForCausalLM.from_pretrained(
            directory, dtype=getattr(torch, dtype), token=hf_token,
            **rope_config_kwargs(directory, self.rope_scaling)).to(self.device).eval()
        self._setup(batch_size, prefix_reuse, prefill_chunk)

    @classmethod
    def from_model(cls, model: Any, chat: ChatTokenizer, *, model_name: str, batch_size: Optional[int] = None,
                   prefix_reuse: bool = True, prefill_chunk: int = 2048) -> "TransformersBackend":
        """The backend over a model already built and placed, with ``chat`` its tokenizer:
        bench/gpu.py builds a real architecture with random weights, as no weights can be had."""
        if batch_size is not None and batch_size < 1:
            raise UsageError(f"--batch_size must be at least 1, got {batch_size}")
        self = cls.__new__(cls)
        ChatBackend.__init__(self, model_name, chat)
        parameter = next(model.parameters())
        self.device = str(parameter.device)
        self.dtype = str(parameter.dtype).removeprefix("torch.")
        self.rope_scaling = None
        self.model = model.eval()
        self._setup(batch_size, prefix_reuse, prefill_chunk)
        return self

    def _setup(self, batch_size: Optional[int], prefix_reuse: bool, prefill_chunk: int) -> None:
        """The state every backend starts with, the model loaded."""
        import torch

        if self.device == "cpu" and self.model.config._attn_implementation == "sdpa":
            self.model.set_attn_implementation(register_cpu_attention())
        self.batch_size = batch_size  # None: chosen per call (``rows_for``); else --batch_size (or its halving)
        self._ceiling: Optional[int] = None  # the size an out-of-memory error halved a chosen one to
        self.last_rows = 0  # rows per forward pass of the last call (bench/gpu.py reports them)
        self.prefix_reuse = prefix_reuse
        self.prefill_chunk = prefill_chunk
        self._torch = torch
        self._tries: dict[tuple[tuple[str, ...], str], LabelTrie] = {}
        self._prefix_tokens: list[int] = []
        self._prefix_cache: Any = None  # transformers' DynamicCache of the stored prefix
        # Stored prefixes of other callers (predict_calls keys), least recently used first.
        self.prefix_slots = 32
        self._slots: OrderedDict[Optional[Hashable], tuple[list[int], Any]] = OrderedDict()
        self._slot_key: Optional[Hashable] = None
        # predict_calls: the calls of several runs in shared forward passes (None: by device; see packs)
        self.cross_run: Optional[bool] = None
        self._choice = Choice()
        # attended: (query, key) pairs the attention computed, for FLOP counts (bench/gpu.py)
        self.stats = {"prompt_tokens": 0, "computed_tokens": 0, "model_calls": 0, "attended": 0}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "device": self.device, "dtype": self.dtype,
                "batch_size": self.batch_size or (CPU_ROWS if self.device == "cpu" else None),
                "prefix_reuse": self.prefix_reuse}

    # -- public ----------------------------------------------------------------------------
    def predict(self, prompts: Sequence[str], labels: Sequence[str], temperature: float, seed: int,
                progress: Optional[Callable[[int], None]] = None) -> list[str]:
        """One label per prompt; ``progress(n)``, when given, is called after each batch with the
        number of prompts that batch finished."""
        if not prompts:
            return []
        trie, ids, shared = self._prepare(prompts, labels)
        rngs = prompt_rngs(seed, len(prompts))
        out: dict[int, str] = {}  # prompt index -> its label
        # Rows of the shared prefix, copied once per call; each batch writes after the prefix.
        buffers, longest = None, max(len(x) for x in ids)
        rows = self._rows(len(prompts), longest + trie.max_depth)
        if shared:
            buffers = row_buffers(self._prefix_cache, rows, longest - shared + trie.max_depth)
        # Similar suffix lengths share a batch (less padding); results do not depend on order.
        order = sorted(range(len(prompts)), key=lambda i: len(ids[i]))

        def run(batch: Sequence[int]) -> None:
            results = self._decode([ids[i][shared:] for i in batch], shared, trie,
                                   temperature, [copy.deepcopy(rngs[i]) for i in batch], buffers)
            for i, label in zip(batch, results):
                out[i] = label
            if progress is not None:
                progress(len(batch))

        self._in_batches(order, run, rows)
        return [out[i] for i in range(len(prompts))]

    def generate(self, prompts: Sequence[str], max_tokens: int, temperature: float, seed: int,
                 stop: Sequence[str] = ()) -> list[Generated]:
        """Free text after each prompt (``icrl.backends.Reasoner``): at most ``max_tokens``
        tokens, sampled from the whole vocabulary at ``temperature`` (greedy at 0) with one
        generator per prompt position (a stream apart from the label choice's), ending before the
        first stop string or at the end of the turn. The prompts' shared prefix is reused as in
        ``predict``."""
        if not prompts:
            return []
        ids = [self.chat.encode_prompt(p) for p in prompts]
        check_prompt_lengths(ids, max_tokens, self.max_model_len)
        self.stats["prompt_tokens"] += sum(len(x) for x in ids)
        shared = self._reuse_prefix(ids)
        rngs = prompt_rngs(seed, len(prompts), stream=1)
        longest = max(len(x) for x in ids)
        buffers, rows = None, self._rows(len(prompts), longest + max_tokens + 1)
        if shared:
            buffers = row_buffers(self._prefix_cache, rows, longest - shared + max_tokens + 1)
        out: dict[int, Generated] = {}  # prompt index -> what it generated
        order = sorted(range(len(prompts)), key=lambda i: len(ids[i]))

        def run(batch: Sequence[int]) -> None:
            cache = batch_cache(buffers, len(batch), shared) if shared and buffers is not None else None
            texts = sample(self._forward, self.chat, [ids[i][shared:] for i in batch], shared, max_tokens,
                           temperature, [copy.deepcopy(rngs[i]) for i in batch], cache, tuple(stop))
            for i, generated in zip(batch, texts):
                out[i] = Generated(*generated)

        self._in_batches(order, run, rows)
        return [out[i] for i in range(len(prompts))]

    def predict_calls(self, calls: Sequence[Call]) -> list[list[str]]:
        """Several runs' calls. Each caller (``call.key``) gets back the stored prefix it left, so
        lock-step runs compute what they compute alone (at most ``prefix_slots`` callers keep
        one; the least recently used is dropped). Packed (``packs``): each call's shared prefix is
        extended in its own slot, then the prompts of all calls go through the model together,
        each row on its own run's prefix; else the calls run one after the other."""
        packed = self.packs(calls)
        before, tic = self.stats["computed_tokens"], time.perf_counter()
        out = self._packed_calls(calls) if packed else self._calls_one_by_one(calls)
        if self.cross_run is None and self._choice.deciding and len(calls) > 1:
            self._choice.record(packed, (time.perf_counter() - tic) / max(1, self.stats["computed_tokens"] - before))
        return out

    def _calls_one_by_one(self, calls: Sequence[Call]) -> list[list[str]]:
        out = []
        for call in calls:
            self._switch_prefix(call.key)
            out.append(self.predict(call.prompts, call.labels, call.temperature, call.seed))
        return out

    def _packed_calls(self, calls: Sequence[Call]) -> list[list[str]]:
        rows: list[Row] = []
        for c, call in enumerate(calls):
            self._switch_prefix(call.key)
            if not call.prompts:
                continue
            trie, ids, shared = self._prepare(call.prompts, call.labels)
            cache = self._prefix_cache if shared else None
            rows += [(c, j, x[shared:], shared, cache, trie) for j, x in enumerate(ids)]
        rngs = [prompt_rngs(call.seed, len(call.prompts)) for call in calls]
        out: dict[tuple[int, int], str] = {}  # (call, prompt index) -> its label
        rows.sort(key=lambda r: (len(r[2]), r[3]))

        def run(batch: Sequence[Row]) -> None:
            room = max(len(r[2]) for r in batch) + max(r[5].max_depth for r in batch)
            cache = packed_cache([r[4] for r in batch], [r[3] for r in batch], room)
            results = decode_rows(self._forward, [r[2] for r in batch], [r[3] for r in batch], [r[5] for r in batch],
                                  [calls[r[0]].temperature for r in batch],
                                  [copy.deepcopy(rngs[r[0]][r[1]]) for r in batch], cache)
            for r, label in zip(batch, results):
                out[r[0], r[1]] = label

        self._in_batches(rows, run, self._rows(len(rows), max((len(r[2]) + r[3] + r[5].max_depth for r in rows),
                                                              default=1)))
        return [[out[c, j] for j in range(len(call.prompts))] for c, call in enumerate(calls)]

    def _rows(self, prompts: int, tokens: int) -> int:
        """Rows per forward pass for ``prompts`` prompts of at most ``tokens`` tokens each: --batch_size,
        else what the device's free memory holds (``icrl.backends.hf_batches.rows_for``)."""
        free = self._free_bytes() if self.batch_size is None else None
        size = row_bytes(self.model.config, self.model.dtype.itemsize, tokens) if free is not None else 0
        return rows_for(prompts, self.batch_size, free, size, self._ceiling)

    def _free_bytes(self) -> Optional[int]:
        """The device's free memory in bytes (None on a CPU: its batch size is a constant)."""
        return int(self._torch.cuda.mem_get_info(self.device)[0]) if str(self.device).startswith("cuda") else None

    def _in_batches(self, items: Sequence[Item], run: Callable[[Sequence[Item]], None], size: int) -> None:
        """``run`` over ``items`` in batches of ``size``, halved for good when the device runs out of
        memory (``icrl.backends.hf_batches``)."""
        torch = self._torch
        free = torch.cuda.empty_cache if str(self.device).startswith("cuda") else (lambda: None)
        done = self.last_rows = in_batches(items, size, run, torch.OutOfMemoryError, free)
        if done < size:  # halved: the smaller size stays
            self._ceiling, self.batch_size = (done, None) if self.batch_size is None else (None, done)

    def packs(self, calls: Sequence[Call]) -> bool:
        """Whether ``predict_calls`` puts these calls into shared forward passes: with prefix reuse,
        two calls or more from distinct callers, and ``cross_run`` on. ``cross_run`` None (the
        default): chosen by measurement on this device (``Choice``: the first lock-step calls
        alternate both ways, then the faster one per computed token stays)."""
        keys = [call.key for call in calls if call.prompts]
        if not (self.prefix_reuse and len(keys) > 1 and len(set(keys)) == len(keys)):
            return False
        return self.cross_run if self.cross_run is not None else self._choice.next()

    def reset_cache(self) -> None:
        self._prefix_tokens, self._prefix_cache = [], None
        self._slots.clear()

    def _switch_prefix(self, key: Optional[Hashable]) -> None:
        if key == self._slot_key:
            return
        self._slots[self._slot_key] = (self._prefix_tokens, self._prefix_cache)
        self._slots.move_to_end(self._slot_key)
        self._prefix_tokens, self._prefix_cache = self._slots.pop(key, ([], None))
        while len(self._slots) > self.prefix_slots:
            self._slots.popitem(last=False)
        self._slot_key = key

    # -- internals -------------------------------------------------------------------------
    @staticmethod
    def _prefix_of(prompt: str) -> str:
        """The prediction prefix is the text after the last newline of the rendered prompt."""
        return prompt.rsplit("\n", 1)[-1]

    def _prepare(self, prompts: Sequence[str], labels: Sequence[str]) -> tuple[LabelTrie, list[list[int]], int]:
        """(label trie, token ids of each prompt, length of their shared prefix), the shared
        prefix now in the current slot's stored cache (0 without prefix reuse)."""
        trie = self._trie(tuple(labels), self._prefix_of(prompts[0]))
        ids = [self.chat.encode_prompt(p) for p in prompts]
        check_prompt_lengths(ids, trie.max_depth, self.max_model_len)
        self.stats["prompt_tokens"] += sum(len(x) for x in ids)
        return trie, ids, self._reuse_prefix(ids)

    def _reuse_prefix(self, ids: Sequence[Sequence[int]]) -> int:
        """The length of the prompts' shared prefix (each prompt's last token left out), now in the
        current slot's stored cache; 0 without prefix reuse."""
        if not self.prefix_reuse:
            return 0
        shared = ids[0][:-1]
        for x in ids[1:]:
            shared = shared[:common_prefix_length(shared, x[:-1])]
        self._extend_prefix(list(shared))
        return len(shared)

    def _trie(self, labels: tuple[str, ...], prefix: str) -> LabelTrie:
        key = (labels, prefix)
        if key not in self._tries:
            self._tries[key] = LabelTrie(labels, self.chat.label_token_ids(labels, prefix), self.chat.eot_token_id)
        return self._tries[key]

    def _forward(self, input_ids: np.ndarray, attention_mask: np.ndarray, position_ids: np.ndarray,
                 cache: Any) -> tuple[np.ndarray, Any]:
        """One model call (under inference mode); returns last-position logits and the cache."""
        torch = self._torch
        self.stats["model_calls"] += 1
        new = attention_mask[:, -input_ids.shape[1]:].sum(axis=1)
        past = attention_mask[:, :-input_ids.shape[1]].sum(axis=1)
        self.stats["computed_tokens"] += int(new.sum())
        self.stats["attended"] += int((new * past + new * (new + 1) // 2).sum())
        with torch.inference_mode():
            out = self.model(input_ids=torch.as_tensor(input_ids, device=self.device),
                             attention_mask=torch.as_tensor(attention_mask, device=self.device),
                             position_ids=torch.as_tensor(position_ids, device=self.device),
                             past_key_values=cache, use_cache=True, logits_to_keep=1)
        return out.logits[:, -1].float().cpu().numpy(), out.past_key_values

    def _extend_prefix(self, tokens: list[int]) -> None:
        """Make the stored batch-1 cache hold exactly `tokens`, reusing what it shares."""
        from transformers import DynamicCache

        keep = common_prefix_length(self._prefix_tokens, tokens)
        if self._prefix_cache is None or keep == 0:
            self._prefix_cache, self._prefix_tokens = DynamicCache(), []
            keep = 0
        elif keep < len(self._prefix_tokens):
            # A negative argument removes that many tokens: transformers 5 rejects a positive
            # (absolute length) argument, and 4.x read negative values the same way.
            self._prefix_cache.crop(keep - len(self._prefix_tokens))
            self._prefix_tokens = self._prefix_tokens[:keep]
        for start in range(keep, len(tokens), self.prefill_chunk):
            chunk = tokens[start:start + self.prefill_chunk]
            n = start + len(chunk)
            _, self._prefix_cache = self._forward(
                np.array([chunk]), np.ones((1, n), dtype=np.int64),
                np.arange(start, n)[None, :], self._prefix_cache)
            self._prefix_tokens = tokens[:n]

    def _decode(self, suffixes: Sequence[Sequence[int]], shared: int, trie: LabelTrie, temperature: float,
                rngs: Sequence[np.random.Generator], buffers: Optional[Buffers] = None) -> list[str]:
        """Run left-padded suffixes on the shared prefix, then walk the label trie."""
        batch = len(suffixes)
        cache = batch_cache(buffers, batch, shared) if shared and buffers is not None else None
        return decode_rows(self._forward, suffixes, [shared] * batch, [trie] * batch, [temperature] * batch, rngs,
                           cache)


class Choice:
    """Packed or call by call, by measurement: the first ``2 * trials`` multi-run calls alternate
    the two ways; then the way with the lower median seconds per computed token (a test call
    reuses its shared prefix, a training call hardly does) is kept. Both ways
    give the same labels (bench/gpu.py checks it), so only the speed depends on the choice."""

    def __init__(self, trials: int = 3) -> None:
        self.trials = trials
        self.times: dict[bool, list[float]] = {True: [], False: []}
        self.chosen: Optional[bool] = None

    @property
    def deciding(self) -> bool:
        return self.chosen is None

    def next(self) -> bool:
        if self.chosen is not None:
            return self.chosen
        return len(self.times[True]) <= len(self.times[False])

    def record(self, packed: bool, seconds_per_token: float) -> None:
        self.times[packed].append(seconds_per_token)
        if min(len(t) for t in self.times.values()) >= self.trials:
            median = {k: sorted(t)[len(t) // 2] for k, t in self.times.items()}
            self.chosen = median[True] <= median[False]
            log.info("lock-step calls: %s (median %.3g vs %.3g s per computed token)",
                     "packed" if self.chosen else "call by call", median[self.chosen], median[not self.chosen])


