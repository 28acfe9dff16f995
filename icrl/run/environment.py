"""Where a run executes: facts for its config record, the backend it loads, its log file and
console messages."""

from __future__ import annotations

import logging
import platform
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from .. import __version__
from ..method.agents import is_learner
from ..config import BACKEND_NAMES, RunConfig
from ..infra.diskfull import OneLineFileHandler
from ..infra.masking import ScrubFilter

if TYPE_CHECKING:
    from ..backends import Backend, BackendSpec

log = logging.getLogger("icrl")


def environment() -> dict[str, Any]:
    """Package versions, git commit, platform and device (config.json "environment")."""
    from importlib import metadata

    packages: dict[str, str] = {}
    for name in ("torch", "transformers", "datasets", "numpy", "pandas", "vllm", "tokenizers", "gguf", "openai",
                 "anthropic"):
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    repo = Path(__file__).resolve().parent.parent.parent
    try:
        commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True,
                                text=True, timeout=5).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True, timeout=5).stdout.strip())
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    device = "cpu"
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        if torch.cuda.is_available():
            device = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
    return {"icrl": __version__, "python": platform.python_version(), "platform": platform.platform(),
            "packages": packages, "git_commit": commit, "git_dirty": dirty, "device": device}


def backend_spec_of(config: RunConfig, engine: bool = True) -> Union[tuple[str], BackendSpec]:
    """The backend a run loads: its backend-role fields and, with ``engine``, the engine-wide
    seed and verbosity the backend takes (vLLM). Without them it is a sweep's group key: vLLM's
    engine seed is unused by seeded requests, so runs of any seed share one engine."""
    if is_learner(config.spec.agent):
        return ("no model",)  # a learner loads no backend: one group
    return _model_spec_of(config, engine)


def _model_spec_of(config: RunConfig, engine: bool) -> BackendSpec:
    """``backend_spec_of`` of a run that loads a model (not a learner)."""
    from ..backends import backend_spec

    values = config.values()
    spec = backend_spec(config.spec.model_name, config.spec.backend, {k: values[k] for k in BACKEND_NAMES})
    return spec.with_engine(seed=config.spec.seed, verbose=config.options.verbose) if engine else spec


def load_backend_of(config: RunConfig) -> Optional[Backend]:
    """The backend a run loads; None for a learner (no model). With --no-progress the
    libraries' own bars (transformers' "Loading weights", the Hub's downloads) stay hidden too."""
    from ..backends import load_spec

    if is_learner(config.spec.agent):
        return None
    if not config.options.progress:
        hide_library_bars()
    return load_spec(_model_spec_of(config, engine=True))


def hide_library_bars() -> None:
    """Turn off the progress bars of transformers and huggingface_hub for this process.
    transformers reads the Hub's switch when it is first imported, and has its own once it is."""
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    loaded = sys.modules.get("transformers.utils.logging")
    if loaded is not None:
        loaded.disable_progress_bar()


def attach_log_file(directory: Path) -> OneLineFileHandler:
    """The run's log.txt: this thread's messages (a sweep's other runs have their own)."""
    # a full disk: one line, once, said when the run goes on (``LogFailure``); else the records' error says it
    handler = OneLineFileHandler(directory / "log.txt", encoding="utf-8", defer=True)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO)
    handler.addFilter(ScrubFilter())
    thread = threading.get_ident()
    handler.addFilter(lambda record: record.thread == thread)
    root = logging.getLogger("icrl")
    root.setLevel(logging.INFO)
    root.addHandler(handler)
    return handler


def detach_log_file(handler: logging.Handler) -> None:
    logging.getLogger("icrl").removeHandler(handler)
    try:
        handler.close()
    except OSError:
        pass  # the last lines could not be flushed (a full disk): the log is best effort, the records are not


def console_logging(verbose: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.INFO if verbose else logging.WARNING)
    handler.addFilter(ScrubFilter())
    logger = logging.getLogger("icrl")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)


def tell(message: str) -> None:
    """A line for the user on the console, also in the run's log."""
    print(message, file=sys.stderr, flush=True)
    log.info(message)
