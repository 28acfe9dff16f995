"""The plugins a run uses (``icrl.infra.plugins``): written in its config.json, required on resume.

A run uses a plugin when a part it chooses by name (its strategy, reward, agent, backend) was
registered by that plugin. config.json then holds ``"plugins"``: each such plugin's module name
and the sha256 of its source, once; a run that uses none has no ``"plugins"`` entry, so its
config.json is what it was before plugins existed. Resuming (or reading) a run whose plugin is
not loaded, or whose plugin's source changed, is refused in one line naming the plugin.
"""

from __future__ import annotations

from pathlib import Path

from ..backends import backend_owner
from ..config import RunConfig
from ..infra import plugins
from ..method.registry import chosen_owners


def used(config: RunConfig) -> list:
    """config.json "plugins" of this run: the plugins its chosen parts come from (empty: none)."""
    values = config.spec.as_record()
    return plugins.record_of([*chosen_owners(values), backend_owner(config.spec.backend)])


def record(config: RunConfig) -> dict:
    """What config.json gets for the plugins: ``{"plugins": [...]}``, or nothing when none is used."""
    entries = used(config)
    return {"plugins": entries} if entries else {}


def check(recorded: dict, out_dir: Path) -> None:
    """A recorded run's plugins are loaded and unchanged (else a one-line UsageError)."""
    plugins.check_recorded(recorded.get("plugins"), out_dir)
