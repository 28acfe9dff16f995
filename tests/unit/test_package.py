"""The package's layout: the method, storage, safety and the command lines each in their folder,
nothing loose at icrl/'s root, no import cycle, and tests that mirror the package."""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import REPO

PACKAGE = REPO / "icrl"
# the face, the run configuration, the errors, what a plugin imports
ROOT_MODULES = {"__init__.py", "config.py", "errors.py", "plugin.py"}
# The layers, top to bottom (docs/development.md: "Layers"): a module imports modules of its own
# package and of the packages in lower layers, never one above it or beside it. The sweep runs
# many runs through the run's own command line (its parser and validation), so it sits above cli;
# icrl.plugin, the face a plugin imports, is above everything and imported by nothing of icrl's.
LAYERS = (
    ("plugin", "standin"),
    ("sweep",),
    ("cli",),
    ("report",),
    ("viewer",),
    ("analysis",),
    ("run",),
    ("records",),
    ("config",),
    ("method", "backends", "tasks"),
    ("infra",),
    ("errors", "icrl"),
)


def modules() -> dict:
    """Module name -> (file, is a package) for every module of icrl."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def import_graph() -> dict:
    """Module -> the icrl modules it imports anywhere in its code (in functions too)."""
    known = modules()
    graph = {name: set() for name in known}
    for name, (path, is_package) in known.items():
        package = name if is_package else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module
                targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in known else module for a in node.names]
            graph[name] |= {t for t in targets if t in known and t != name}
    return graph


def cycles(graph: dict) -> list:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle():
    """No module imports, at its top or inside a function, a module that imports it back."""
    assert cycles(import_graph()) == []


def package_of(module: str) -> str:
    """icrl.run.loop -> run; icrl.config -> config; icrl -> icrl."""
    return module.split(".")[1] if "." in module else module


def back_arrows(graph: dict, layers=LAYERS) -> list:
    """The imports that climb back: to a package in a layer above the importer's or beside it."""
    rank = {package: i for i, layer in enumerate(layers) for package in layer}
    found = []
    for module, targets in sorted(graph.items()):
        here = package_of(module)
        assert here in rank, f"{module}: package {here!r} has no layer in LAYERS (tests/unit/test_package.py)"
        found += [f"{module} -> {target}" for target in sorted(targets)
                  if package_of(target) != here and rank[package_of(target)] <= rank[here]]
    return found


def test_imports_only_go_down_the_layers():
    """A part of the method does not import the run that uses it, the records do not import the
    tools that read them, and so on down the layers (in functions too)."""
    assert back_arrows(import_graph()) == []


def test_a_back_arrow_is_found():
    graph = {"icrl.method.a": {"icrl.run.b", "icrl.errors"}, "icrl.run.b": {"icrl.method.a"},
             "icrl.method.c": {"icrl.backends.d"}, "icrl.backends.d": set(), "icrl.errors": set()}
    assert back_arrows(graph) == ["icrl.method.a -> icrl.run.b", "icrl.method.c -> icrl.backends.d"]


# Class names defined in two modules, in modules that another change is rewriting: each name
# leaves this table when one of its two classes is renamed (docs/development.md: "Layers").
DEFINED_TWICE: dict = {}


def class_definitions() -> dict:
    """Class name -> the files of icrl that define a class of that name (nested classes too)."""
    found: dict = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(str(path.relative_to(REPO)))
    return found


def test_one_class_per_name():
    """A class name means one thing in the package: a reader (and a traceback) never has to ask
    which ``EpsilonGreedy`` it is."""
    assert {name: files for name, files in class_definitions().items() if len(files) > 1} == DEFINED_TWICE


MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
# Over the limits, in modules that another change is rewriting (docs/development.md: "Size").
LONG_FILES: set = set()
LONG_FUNCTIONS: set = set()


def sizes() -> tuple[set, set]:
    """The files of icrl over MAX_FILE_LINES lines and the functions (path:name) over
    MAX_FUNCTION_LINES, docstring included."""
    files, functions = set(), set()
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        name = str(path.relative_to(REPO))
        if len(text.splitlines()) > MAX_FILE_LINES:
            files.add(name)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                    and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                functions.add(f"{name}:{node.name}")
    return files, functions


def test_no_long_file_and_no_long_function():
    """Small modules with one job, and functions that fit on a screen; the exceptions are listed
    (and leave the lists when they are split)."""
    files, functions = sizes()
    assert files == LONG_FILES
    assert functions == LONG_FUNCTIONS


def test_the_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_nothing_loose_at_the_packages_root():
    assert {p.name for p in PACKAGE.glob("*.py")} == ROOT_MODULES


def test_no_argparse_below_the_command_line():
    """Every argument parser lives in icrl/cli (the scripts' command lines)."""
    users = sorted(str(path.relative_to(REPO)) for name, (path, _) in modules().items()
                   if not name.startswith("icrl.cli") and "argparse" in import_names(path))
    assert users == []


def import_names(path: Path) -> set:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module or "")
    return names


def test_tests_mirror_the_package():
    """tests/unit/<folder>/test_<name>.py and tests/integration/<folder>/test_<name>.py: the folder is
    a package of icrl and <name> one of its modules (or the package itself); at tests/unit's top,
    the package's root modules and the project-wide checks; tests/vllm_engine (the real engine)
    tests modules of icrl/backends, tests/bench the scripts of bench/."""
    project = {"test_golden.py", "test_docs.py", "test_dependencies.py", "test_package.py"}
    for kind in ("unit", "integration"):
        top = REPO / "tests" / kind
        for path in sorted(top.rglob("test_*.py")):
            rel = path.relative_to(top)
            module = path.stem[len("test_"):]
            if len(rel.parts) == 1:
                assert path.name in project or (PACKAGE / f"{module}.py").is_file(), f"tests/{kind}/{rel}"
                continue
            folder = PACKAGE.joinpath(*rel.parts[:-1])
            assert folder.is_dir(), f"tests/{kind}/{rel}: icrl/{'/'.join(rel.parts[:-1])} is no package"
            assert module == folder.name or (folder / f"{module}.py").is_file() or (folder / module).is_dir(), \
                f"tests/{kind}/{rel}: no module {module} in icrl/{'/'.join(rel.parts[:-1])}"
    for path in sorted((REPO / "tests" / "vllm_engine").glob("test_*.py")):
        assert (PACKAGE / "backends" / f"{path.stem[len('test_'):]}.py").is_file(), path.name
    for path in sorted((REPO / "tests" / "bench").glob("test_*.py")):  # the bench/ scripts' own tests
        assert (REPO / "bench" / f"{path.stem[len('test_'):]}.py").is_file(), path.name


# -- the run's contract, typed (docs/development.md: "The run's contract") ------------------------
RECORD_SCHEMA = {"icrl/records/schema.py", "icrl/records/configfile.py"}
CONFIG_SECTIONS = {"format_version", "created", "args", "runtime_args", "resolved", "backend", "environment",
                   "dataset", "test_set", "train_example_ids", "exemplars", "extended", "plugins"}
DAMAGE_RAISERS = {"icrl/errors.py", "icrl/records/log.py", "icrl/records/lines.py", "icrl/run/rebuild.py",
                  "icrl/records/typed.py", "icrl/records/schema.py", "icrl/records/configfile.py"}


def _string_key(node):
    """(what is read, the key) of ``x["key"]`` or ``x.get("key")``; None for anything else."""
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load) and isinstance(node.slice, ast.Constant) \
            and isinstance(node.slice.value, str):
        return node.value, node.slice.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" and node.args \
            and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.func.value, node.args[0].value
    return None


def _below_a_section(node) -> bool:
    found = _string_key(node)
    while found is not None:
        if found[1] in CONFIG_SECTIONS:
            return True
        found = _string_key(found[0])
    return False


def string_key_reads() -> tuple[list, list]:
    """(reads of a record line's field by its name, reads of config.json by a section's name and
    below), each as "file:line key", outside the schema modules and those that import pandas
    (there a string key is a results table's column: "test_set", "accuracy")."""
    import dataclasses

    from icrl.records.schema import TestLine, TrainLine

    fields = ({f.name for f in dataclasses.fields(TrainLine)} | {f.name for f in dataclasses.fields(TestLine)}) - {
        "answers"}
    lines, config = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        name = str(path.relative_to(REPO))
        if name in RECORD_SCHEMA:
            continue
        text = path.read_text(encoding="utf-8")
        if "import pandas" in text:
            continue
        for node in ast.walk(ast.parse(text)):
            found = _string_key(node)
            if found is None:
                continue
            if found[1] in fields:
                lines.append(f"{name}:{node.lineno} {found[1]}")
            if found[1] in CONFIG_SECTIONS or _below_a_section(found[0]):
                config.append(f"{name}:{node.lineno} {found[1]}")
    return lines, config


def test_the_run_contract_is_typed():
    """Record lines and config.json are read as their types, not by string keys; damaged records
    are said by the modules that check them (and those that parse a value against its type)."""
    lines, config = string_key_reads()
    assert len(lines) <= 15, f"{len(lines)} string-key reads of line fields: {lines}"
    assert len(config) <= 40, f"{len(config)} string-key reads of config.json: {config}"
    raisers = {str(p.relative_to(REPO)) for p in PACKAGE.rglob("*.py")
               if "DamagedRecords(" in p.read_text(encoding="utf-8")}
    assert raisers <= DAMAGE_RAISERS, sorted(raisers - DAMAGE_RAISERS)
    print(f"line-field reads {len(lines)}, config.json reads {len(config)}, damage said in {sorted(raisers)}")
