"""The plugins a run uses (``icrl.infra.plugins``): written in its config.json, required on resume.

A run uses a plugin when a part it chooses by name (its strategy, reward, agent, backend) was
registered by that plugin. config.json then holds ``"plugins"``: each such plugin's module name
and the sha256 of its source, once; a run that uses none has no ``"plugins"`` entry, so its
config.json is what it was before plugins existed. Resuming (or reading) a run whose plugin is
not loaded, or whose plugin's source changed, is refused in one line naming the plugin. A
plugin's code that raises during a run, or returns what its contract refuses (``icrl.run.edge``),
stops it in one line naming the plugin and the step (``failure``); the steps before it are on
disk, and the same command resumes from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from ..backends import backend_owner
from ..config import RunConfig
from ..infra import plugins
from ..method.registry import chosen_owners
from ..records import CONFIG, find_runs, read_json
from ..records.configfile import ConfigFile
from .edge import PluginBreach


def used(config: RunConfig) -> list[dict[str, str]]:
    """config.json "plugins" of this run: the plugins its chosen parts come from (empty: none)."""
    values = config.spec.as_record()
    return plugins.record_of([*chosen_owners(values), backend_owner(config.spec.backend)])


def record(config: RunConfig) -> dict[str, list[dict[str, str]]]:
    """What config.json gets for the plugins: ``{"plugins": [...]}``, or nothing when none is used."""
    entries = used(config)
    return {"plugins": entries} if entries else {}


def failure(exc: BaseException, steps_done: int) -> Optional[str]:
    """The one line of a plugin's breach of its contract (``icrl.run.edge``), or of an error
    raised inside a plugin's code, at step ``steps_done`` (None: not a plugin's: a bug of icrl's
    keeps its traceback)."""
    if isinstance(exc, PluginBreach):
        return exc.line(steps_done)
    found = plugins.culprit(exc)
    if found is None:
        return None
    plugin, function = found
    return PluginBreach(plugin, plugins.said(exc), function=function).line(steps_done)


def missing_under(root: Union[str, Path]) -> list[str]:
    """The plugins that runs under ``root`` were made with and that are not loaded (module names):
    a command refused for a name or flag it does not know may be one of theirs."""
    loaded = {p.module for p in plugins.loaded()}
    missing: set[Any] = set()  # config.json's values, kept where they are module names
    for run in find_runs(root) if Path(root).is_dir() else []:
        try:
            recorded = read_json(run / CONFIG).get("plugins") or []
            missing |= {entry["module"] for entry in recorded} - loaded
        except (OSError, ValueError, AttributeError, TypeError, KeyError):
            continue  # an unreadable config.json is said where the run is read
    return sorted(m for m in missing if isinstance(m, str))


def check_loaded(recorded: ConfigFile, out_dir: Path) -> None:
    """A recorded run's plugins are loaded and unchanged (else a one-line UsageError)."""
    plugins.check_recorded([(p.module, p.sha256) for p in recorded.plugins or []], out_dir)
