"""Plugins: methods from the researcher's own files, loaded before any command line is built.

A plugin is a Python file, a package folder or an importable module that registers parts
through :mod:`icrl.plugin` (a strategy, a reward, a figure, a backend) when it is imported.
Three ways in, read in this order, each plugin loaded once per process:

- ``--plugin FILE_OR_MODULE`` on any script's command line (repeatable);
- the environment variable ``ICRL_PLUGINS``: the same, separated by ``:``;
- installed packages: the entry points of the group ``icrl.plugins`` (a module, or
  ``module:attribute``, whose module is imported).

``with start(argv):`` is a script's first step, around the import of its command line (whose
parser, choices and validation then know what the plugins registered): it loads the plugins
and says bad input in one line, exit 2, before anything is written. A plugin must be loaded
before ``icrl.config`` builds the run configuration from the declared parameters: ``load``
refuses one that comes later.

Each plugin is a :class:`Plugin`: its module name, its source (the file, or the package's
folder) and the sha256 of that source. Every registry asks :func:`registered` whose a name
is (the plugin being imported, or None: icrl itself, also for icrl's own modules that a
plugin's ``from icrl.plugin import ...`` imports first), so a plugin that registers nothing and
a name registered twice are refused naming both owners; ``check_recorded`` refuses records
made with a plugin that is missing or changed; ``culprit`` finds the plugin an error came from.
What a plugin's code raises is its own (``said``: in one line), a SystemExit or a
KeyboardInterrupt it raised itself included, unless it is a stop a signal asked for
(``asked_to_stop``) or icrl's own code that the plugin called raised it (``raised_by_icrl``).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Callable, Iterator, Mapping, Optional, Sequence, Union

from ..errors import UsageError
from . import signals

FLAG = "--plugin"
ENV = "ICRL_PLUGINS"
GROUP = "icrl.plugins"
BUILT_IN = "icrl"
HELP = ("a Python file, package folder or module that registers strategies, rewards, figures or backends "
        "(repeatable; also $ICRL_PLUGINS, ':'-separated, and installed icrl.plugins entry points; "
        "docs/development.md, Plugins)")


@dataclass(frozen=True)
class Plugin:
    """One loaded plugin: ``module`` (its module name), ``source`` (its file, or its package's
    folder), ``sha256`` (of that source: the file, or every .py file of the package)."""

    module: str
    source: str
    sha256: str

    @property
    def label(self) -> str:
        return f"plugin {self.module} ({self.source})"

    def record(self) -> dict[str, str]:
        """What config.json records of it."""
        return {"module": self.module, "sha256": self.sha256}


_loaded: dict[str, Plugin] = {}      # source -> Plugin, in load order
# module -> [(undo, what)] of the parts it registered
_registrations: dict[str, list[tuple[Callable[[], None], str]]] = {}
_importing: list[Plugin] = []   # the plugin being imported (a stack of one)
_ICRL = Path(__file__).resolve().parents[1]  # icrl's own code


# -- who registers ---------------------------------------------------------------------------------
def current() -> Optional[Plugin]:
    """The plugin being imported now (None: icrl itself). A module of icrl's own whose import
    the plugin's import started (``from icrl.plugin import ...`` imports icrl's strategies,
    rewards, figures and backends) registers its parts as icrl's: the module whose top-level
    code is running says whose they are."""
    if not _importing:
        return None
    running = _running_module()
    return None if running == BUILT_IN or running.startswith(BUILT_IN + ".") else _importing[-1]


def _running_module() -> str:
    """The name of the innermost module whose top-level code is running (the one being imported)."""
    frame: Optional[FrameType] = sys._getframe(1)
    while frame is not None and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    return str(frame.f_globals.get("__name__", "")) if frame is not None else ""


def registered(what: str, undo: Callable[[], None]) -> Optional[Plugin]:
    """Called by every registry once it has registered ``what`` (e.g. "the reward 'x'"): its
    owner, the plugin being imported (None: icrl itself); ``undo`` takes it out again (``unload``)."""
    plugin = current()
    if plugin is not None:
        _registrations.setdefault(plugin.module, []).append((undo, what))
    return plugin


def owner_text(owner: Optional[Plugin]) -> str:
    return f"{BUILT_IN} (built in)" if owner is None else owner.label


def collision(what: str, old: Optional[Plugin], new: Optional[Plugin]) -> UsageError:
    """The one-line refusal of a name registered twice, naming both owners."""
    return UsageError(f"{what} is registered already by {owner_text(old)}; {owner_text(new)} registers it "
                      f"again: rename it in {'one of them' if old and new else 'the plugin'}")


def loaded() -> tuple[Plugin, ...]:
    """The plugins loaded in this process, in load order."""
    return tuple(_loaded.values())


def environment_value() -> str:
    """ICRL_PLUGINS naming every loaded plugin (for processes started from this one)."""
    return ":".join(p.source for p in _loaded.values())


# -- what is asked for -----------------------------------------------------------------------------
def from_argv(argv: Sequence[str]) -> list[tuple[str, str]]:
    """The values of ``--plugin`` in a command line (``--plugin X`` or ``--plugin=X``), as
    (where it was given, value)."""
    words = list(argv)
    found: list[tuple[str, str]] = []
    for i, word in enumerate(words):  # after "--" too: run_sweep.py's run flags
        if word == FLAG:
            if i + 1 >= len(words) or words[i + 1].startswith("--"):
                raise UsageError(f"{FLAG} needs a file, package folder or module name")
            found.append((FLAG, words[i + 1]))
        elif word.startswith(FLAG + "="):
            found.append((FLAG, word[len(FLAG) + 1:]))
    return found


def from_environment(environ: Mapping[str, str]) -> list[tuple[str, str]]:
    return [(ENV, part) for part in environ.get(ENV, "").split(":") if part.strip()]


def from_entry_points() -> list[tuple[str, str]]:
    """The modules the installed packages name in the entry-point group ``icrl.plugins``."""
    return [(f"the entry point {ep.name} ({GROUP}, {ep.value})", ep.value.split(":")[0].strip())
            for ep in importlib.metadata.entry_points(group=GROUP)]


def requested(argv: Sequence[str] = (), environ: Optional[Mapping[str, str]] = None) -> list[tuple[str, str]]:
    """Every plugin asked for, as (where it was given, file or module): the command line's, the
    environment's, the installed ones."""
    environ = os.environ if environ is None else environ
    return [*from_argv(argv), *from_environment(environ), *from_entry_points()]


# -- where a plugin's source is --------------------------------------------------------------------
def _is_path(spec: str) -> bool:
    return os.sep in spec or "/" in spec or spec.endswith(".py") or os.path.exists(spec)


def locate(spec: str, given: str = FLAG) -> tuple[str, Path, bool, bool]:
    """(module name, source, is a package, given as a path) of a plugin given as a path or a
    module name (``given``: where, for the error)."""
    if _is_path(spec):
        path = Path(spec).expanduser().resolve()
        if not path.exists():
            raise UsageError(f"{given} {spec!r}: no such file or folder; give a .py file, a package folder or an "
                             f"importable module name")
        if path.is_dir():
            if not (path / "__init__.py").is_file():
                raise UsageError(f"{given} {spec!r}: a folder without __init__.py is no package; give the "
                                 f"plugin's .py file or its package folder")
            return path.name, path, True, True
        if path.suffix != ".py":
            raise UsageError(f"{given} {spec!r}: not a Python file (.py)")
        return path.stem, path, False, True
    try:
        found = importlib.util.find_spec(spec)
    except (ImportError, ValueError) as exc:
        found, why = None, str(exc)
    else:
        why = "no such module"
    if found is None or found.origin is None:
        raise UsageError(f"{given} {spec!r}: neither a file nor an importable module ({why})")
    if found.submodule_search_locations:
        return spec, Path(found.origin).parent.resolve(), True, False
    return spec, Path(found.origin).resolve(), False, False


def source_hash(source: Path, package: bool) -> str:
    """sha256 of a plugin's source: its file, or its package's .py files (names and bytes)."""
    digest = hashlib.sha256()
    if not package:
        digest.update(source.read_bytes())
        return digest.hexdigest()
    for path in sorted(p for p in source.rglob("*.py") if "__pycache__" not in p.parts):
        digest.update(path.relative_to(source).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


# -- loading ---------------------------------------------------------------------------------------
def _import(name: str, source: Path, package: bool, by_path: bool) -> None:
    if not by_path:
        importlib.import_module(name)
        return
    other = _module_elsewhere(name, source, package)
    if other is not None:
        raise UsageError(f"a module named {name} exists already ({other}); rename the plugin")
    spec = importlib.util.spec_from_file_location(
        name, source / "__init__.py" if package else source,
        submodule_search_locations=[str(source)] if package else None)
    if spec is None or spec.loader is None:
        raise UsageError(f"{source} cannot be imported as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise


def _module_elsewhere(name: str, source: Path, package: bool) -> Optional[str]:
    """Where another module of this name is (imported or importable), which the plugin would hide."""
    held = sys.modules.get(name)
    if held is not None:
        return getattr(held, "__file__", None) or "built in"
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    where = Path(found.origin).resolve() if found.origin not in (None, "built-in", "frozen") else None
    mine = source / "__init__.py" if package else source
    return None if where == mine else str(where or found.origin or "built in")


def _why(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"syntax error in {exc.filename} line {exc.lineno}: {exc.msg}"
    if isinstance(exc, UsageError):
        return str(exc)
    return f"cannot import it: {said(exc)}"


def said(exc: BaseException) -> str:
    """What a plugin's code raised, in one line (``asked_to_stop`` said it was no user's stop)."""
    if isinstance(exc, SystemExit):
        return f"SystemExit({exc.code!r}): a plugin must not end the process"
    if isinstance(exc, KeyboardInterrupt):
        return "KeyboardInterrupt, raised by the plugin itself (no Ctrl-C arrived)"
    return " ".join(f"{type(exc).__name__}: {exc}".split())


def asked_to_stop(exc: BaseException, arrived: int) -> bool:
    """Whether ``exc``, raised under a call of a plugin's code, is a stop a signal asked for:
    SIGTERM or SIGHUP, or a Ctrl-C that arrived since ``arrived`` (``signals.arrivals()`` before
    the call) or that icrl's own code raised (its handler; the fake backend's); not a
    KeyboardInterrupt the plugin raised itself."""
    signum = signals.stop_in(exc)
    if signum is None:
        return False
    return signum != signal.SIGINT or signals.arrivals() != arrived or raised_by_icrl(exc)


def load_one(spec: str, given: str = FLAG) -> Optional[Plugin]:
    """Import one plugin (None when that source is loaded already); bad input is a one-line
    UsageError (``given``: where it was asked for)."""
    name, source, package, by_path = locate(spec, given)
    if str(source) in _loaded:
        return None
    same = next((p for p in _loaded.values() if p.module == name), None)
    if same is not None:
        raise UsageError(f"two plugins are named {name}: {same.source} and {source}; rename one")
    plugin = Plugin(name, str(source), source_hash(source, package))
    if "icrl.config" in sys.modules:
        raise UsageError(f"{plugin.label} comes after the run configuration was built: give it to the script "
                         f"({FLAG} or {ENV}), which loads plugins before anything else")
    _importing.append(plugin)
    arrived = signals.arrivals()
    try:
        _import(name, source, package, by_path)
    except BaseException as exc:  # the plugin's own failure, an exit included: one line naming it (or a stop)
        unload(plugin)
        if asked_to_stop(exc, arrived):
            raise
        why = " ".join(_why(exc).split())
        raise UsageError(why if why.startswith(plugin.label) or f"; {plugin.label}" in why
                         else f"{plugin.label}: {why}") from None
    finally:
        _importing.pop()
    if not _registrations.get(name):
        raise UsageError(f"{plugin.label} registers nothing: a plugin registers a strategy, reward, figure or "
                         f"backend through icrl.plugin (docs/development.md, Plugins)")
    _loaded[str(source)] = plugin
    return plugin


def load(argv: Sequence[str] = (), environ: Optional[Mapping[str, str]] = None) -> tuple[Plugin, ...]:
    """Load every plugin asked for (``requested``) not loaded yet; returns all loaded ones."""
    for given, spec in requested(argv, environ):
        load_one(spec, given)
    return loaded()


def unload(plugin: Plugin) -> None:
    """Take what ``plugin`` registered out of the registries again (a failed load)."""
    for undo, _ in reversed(_registrations.pop(plugin.module, [])):
        undo()
    _loaded.pop(plugin.source, None)


@contextlib.contextmanager
def start(argv: Sequence[str]) -> Iterator[None]:
    """A script's first step, around the import of its command line: load the plugins, then run
    the block (``from icrl.cli.figures import main``), whose import of ``icrl.config`` builds the
    run configuration with what they registered. A bad plugin, or a parameter of one that
    collides with a flag, is one line on stderr and exit code 2."""
    signals.count_interrupts()  # a Ctrl-C is told from a KeyboardInterrupt a plugin raises itself
    try:
        load(argv)
        yield
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


# -- records made with plugins ---------------------------------------------------------------------
def check_recorded(recorded: Optional[Sequence[tuple[str, str]]], where: object) -> None:
    """Records made with plugins (config.json "plugins": (module, sha256) each) need each of
    them loaded, unchanged."""
    now = {p.module: p for p in _loaded.values()}
    for module, sha256 in recorded or ():
        plugin = now.get(module)
        if plugin is None:
            raise UsageError(f"{where} was made with plugin {module}, which is not loaded: give it with "
                             f"{FLAG} (or {ENV})")
        if plugin.sha256 != sha256:
            raise UsageError(f"{where} was made with {plugin.label} as it was before it changed (sha256 "
                             f"{sha256[:12]} then, {plugin.sha256[:12]} now): restore its source, "
                             f"or pass --overwrite to start the run again")


def record_of(plugins: Sequence[Optional[Plugin]]) -> list[dict[str, str]]:
    """config.json "plugins" of a run whose parts come from ``plugins`` (None: built in), each
    once, by module name."""
    return [p.record() for p in sorted(set(p for p in plugins if p is not None), key=lambda p: p.module)]


def _owner_of_file(filename: str) -> Union[Plugin, str, None]:
    """The loaded plugin whose source holds ``filename``, ``BUILT_IN`` for icrl's own code, else
    None (a library, Python itself)."""
    path = str(Path(filename).resolve())
    for plugin in _loaded.values():
        if path == plugin.source or path.startswith(plugin.source + os.sep):
            return plugin
    return BUILT_IN if path.startswith(str(_ICRL) + os.sep) else None


def culprit(exc: BaseException) -> Optional[tuple[Plugin, str]]:
    """(plugin, function) where ``exc`` was raised, when the innermost frame of a loaded plugin's
    source is in its traceback; else None."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        owner = _owner_of_file(frame.filename)
        if isinstance(owner, Plugin):
            found = (owner, frame.name)
    return found


def raised_by_icrl(exc: BaseException) -> bool:
    """Whether icrl's own code that a plugin's code called raised ``exc`` (a model the plugin
    asks, a check of icrl's): of the frames of icrl and of loaded plugins in its traceback, the
    innermost is icrl's and one further out a plugin's."""
    owners = [o for o in (_owner_of_file(f.filename) for f in traceback.extract_tb(exc.__traceback__))
              if o is not None]
    return bool(owners) and owners[-1] == BUILT_IN and any(isinstance(o, Plugin) for o in owners)
